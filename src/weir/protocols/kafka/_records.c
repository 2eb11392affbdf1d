/* The Kafka record batch's records section -> weir batch columns, in one pass.
 *
 * Kafka records are runs of zigzag varints with the key, value and headers in
 * between: a Python loop over them is the limit of the produce path (about 2 us
 * per record), so this one function does it in C. It checks every length
 * against the bounds (the bytes come from the network), and builds exactly the
 * columns of weir's batch payload (weir.storage.batch): created-time deltas,
 * key lengths, data lengths, header lengths, and the keys, data and headers
 * blobs, so Python only adds the batch header.
 *
 * parse_records(buf, pos, end, count, base_ts, null_header) -> tuple
 *   buf          a bytes-like object holding the records section
 *   pos, end     where the records are in buf
 *   count        records the batch header claims
 *   base_ts      the batch's first timestamp (record timestamps are deltas)
 *   null_header  weir header key marking a null value, set to "true" (weir data
 *                cannot be null; the Pulsar front marks its null values the same way)
 * returns (created_base, created_col, created64, key_lens, data_lens,
 *          header_lens, keys, data, headers, max_record, last_offset_delta)
 *   created_col  None when every record has created_base, else int32 deltas
 *                (int64 when created64)
 *   key_lens     None when no record has a non-empty key
 *   header_lens  None when no record has headers
 *   max_record   the largest key + value of one record
 * raises ValueError for malformed records.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

typedef struct {
    char *p;
    Py_ssize_t len;
    Py_ssize_t cap;
} Buf;

static int buf_grow(Buf *b, Py_ssize_t need) {
    if (b->len + need <= b->cap)
        return 0;
    Py_ssize_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + need) {
        if (cap > PY_SSIZE_T_MAX / 2) {
            PyErr_NoMemory();
            return -1;
        }
        cap *= 2;
    }
    char *p = PyMem_Realloc(b->p, (size_t)cap);
    if (!p) {
        PyErr_NoMemory();
        return -1;
    }
    b->p = p;
    b->cap = cap;
    return 0;
}

static inline int buf_put(Buf *b, const void *src, Py_ssize_t n) {
    if (buf_grow(b, n) < 0)
        return -1;
    if (n)
        memcpy(b->p + b->len, src, (size_t)n);
    b->len += n;
    return 0;
}

static inline int buf_u32(Buf *b, uint32_t v) {
    unsigned char le[4] = {(unsigned char)v, (unsigned char)(v >> 8), (unsigned char)(v >> 16),
                           (unsigned char)(v >> 24)};
    return buf_put(b, le, 4);
}

static inline int buf_u16(Buf *b, uint16_t v) {
    unsigned char le[2] = {(unsigned char)v, (unsigned char)(v >> 8)};
    return buf_put(b, le, 2);
}

static void buf_free(Buf *b) {
    PyMem_Free(b->p);
    b->p = NULL;
    b->len = b->cap = 0;
}

static PyObject *buf_bytes(Buf *b) {
    return PyBytes_FromStringAndSize(b->p ? b->p : "", b->len);
}

/* A zigzag varint of at most 10 bytes; -1 with an error set when malformed. */
static inline int read_varint(const unsigned char *p, Py_ssize_t *pos, Py_ssize_t end,
                              int64_t *out) {
    uint64_t v = 0;
    int shift = 0;
    Py_ssize_t i = *pos;
    for (;;) {
        if (i >= end) {
            PyErr_SetString(PyExc_ValueError, "varint runs past the end of the record");
            return -1;
        }
        unsigned char c = p[i++];
        v |= (uint64_t)(c & 0x7F) << shift;
        if (!(c & 0x80))
            break;
        shift += 7;
        if (shift > 63) {
            PyErr_SetString(PyExc_ValueError, "varint longer than 10 bytes");
            return -1;
        }
    }
    *pos = i;
    *out = (int64_t)(v >> 1) ^ -(int64_t)(v & 1);
    return 0;
}

#define FAIL(...)                                                                                  \
    do {                                                                                           \
        PyErr_Format(PyExc_ValueError, __VA_ARGS__);                                               \
        goto error;                                                                                \
    } while (0)

#define VARINT(var, limit)                                                                         \
    do {                                                                                           \
        if (read_varint(p, &pos, (limit), &(var)) < 0)                                             \
            goto error;                                                                            \
    } while (0)

static PyObject *parse_records(PyObject *Py_UNUSED(self), PyObject *args) {
    Py_buffer view;
    Py_ssize_t pos, end, count;
    long long base_ts;
    const char *null_key;
    Py_ssize_t null_key_len;
    if (!PyArg_ParseTuple(args, "y*nnnLy#", &view, &pos, &end, &count, &base_ts, &null_key,
                          &null_key_len))
        return NULL;
    PyObject *result = NULL;
    Buf created = {0}, key_lens = {0}, data_lens = {0}, header_lens = {0};
    Buf keys = {0}, data = {0}, headers = {0};
    int any_key = 0, any_header = 0, created64 = 0, created_differs = 0;
    int64_t created_base = 0, max_record = 0, last_delta = -1;
    int64_t *stamps = NULL;
    const unsigned char *p = (const unsigned char *)view.buf;

    if (pos < 0 || end > view.len || pos > end)
        FAIL("records section %zd..%zd outside a buffer of %zd bytes", pos, end, view.len);
    if (count < 0 || count > (end - pos) / 7 + 1)
        FAIL("%zd records cannot fit in %zd bytes", count, end - pos);
    stamps = PyMem_Malloc(sizeof(int64_t) * (size_t)(count ? count : 1));
    if (!stamps) {
        PyErr_NoMemory();
        goto error;
    }
    if (buf_grow(&key_lens, 4 * count) < 0 || buf_grow(&data_lens, 4 * count) < 0 ||
        buf_grow(&data, end - pos) < 0)
        goto error;

    for (Py_ssize_t i = 0; i < count; i++) {
        int64_t length, ts_delta, offset_delta, klen, vlen, nheaders;
        VARINT(length, end);
        if (length < 6 || length > end - pos)
            FAIL("record %zd length %lld does not fit the batch", i, (long long)length);
        Py_ssize_t rend = pos + (Py_ssize_t)length;
        pos += 1; /* attributes: unused in v2 */
        VARINT(ts_delta, rend);
        VARINT(offset_delta, rend);
        if (offset_delta != i)
            FAIL("record %zd has offset delta %lld", i, (long long)offset_delta);
        last_delta = offset_delta;
        stamps[i] = (int64_t)((uint64_t)base_ts + (uint64_t)ts_delta);
        VARINT(klen, rend);
        if (klen < -1 || klen > rend - pos)
            FAIL("record %zd key length %lld does not fit the record", i, (long long)klen);
        Py_ssize_t kpos = pos;
        if (klen > 0) {
            any_key = 1;
            pos += (Py_ssize_t)klen;
        } else {
            klen = 0;
        }
        VARINT(vlen, rend);
        if (vlen < -1 || vlen > rend - pos)
            FAIL("record %zd value length %lld does not fit the record", i, (long long)vlen);
        int null_value = vlen < 0;
        if (null_value)
            vlen = 0;
        if (buf_put(&keys, p + kpos, (Py_ssize_t)klen) < 0 || buf_u32(&key_lens, (uint32_t)klen) < 0 ||
            buf_put(&data, p + pos, (Py_ssize_t)vlen) < 0 || buf_u32(&data_lens, (uint32_t)vlen) < 0)
            goto error;
        if (klen + vlen > max_record)
            max_record = klen + vlen;
        pos += (Py_ssize_t)vlen;
        VARINT(nheaders, rend);
        if (nheaders < 0 || nheaders > rend - pos)
            FAIL("record %zd claims %lld headers", i, (long long)nheaders);
        Py_ssize_t hstart = headers.len;
        for (int64_t h = 0; h < nheaders; h++) {
            int64_t hkl, hvl;
            VARINT(hkl, rend);
            if (hkl < 0 || hkl > rend - pos || hkl > 0xFFFF)
                FAIL("record %zd header key length %lld does not fit", i, (long long)hkl);
            PyObject *check = PyUnicode_DecodeUTF8((const char *)p + pos, (Py_ssize_t)hkl, "strict");
            if (!check) {
                PyErr_Clear();
                FAIL("record %zd header key is not utf-8", i);
            }
            Py_DECREF(check);
            if (buf_u16(&headers, (uint16_t)hkl) < 0 ||
                buf_put(&headers, p + pos, (Py_ssize_t)hkl) < 0)
                goto error;
            pos += (Py_ssize_t)hkl;
            VARINT(hvl, rend);
            if (hvl < -1 || hvl > rend - pos)
                FAIL("record %zd header value length %lld does not fit", i, (long long)hvl);
            if (hvl < 0)
                hvl = 0; /* a null header value reads back empty */
            if (buf_u32(&headers, (uint32_t)hvl) < 0 ||
                buf_put(&headers, p + pos, (Py_ssize_t)hvl) < 0)
                goto error;
            pos += (Py_ssize_t)hvl;
        }
        if (null_value) {
            if (buf_u16(&headers, (uint16_t)null_key_len) < 0 ||
                buf_put(&headers, null_key, null_key_len) < 0 || buf_u32(&headers, 4) < 0 ||
                buf_put(&headers, "true", 4) < 0)
                goto error;
        }
        if (headers.len != hstart)
            any_header = 1;
        if (buf_u32(&header_lens, (uint32_t)(headers.len - hstart)) < 0)
            goto error;
        if (pos != rend)
            FAIL("record %zd is %lld bytes, its fields take %lld", i, (long long)length,
                 (long long)(length - (rend - pos)));
    }
    if (pos != end)
        FAIL("%zd bytes after the last of %zd records", end - pos, count);

    if (count > 0) {
        created_base = stamps[0];
        for (Py_ssize_t i = 1; i < count; i++) {
            int64_t d = (int64_t)((uint64_t)stamps[i] - (uint64_t)created_base);
            if (d != 0)
                created_differs = 1;
            if (d < INT32_MIN || d > INT32_MAX)
                created64 = 1;
        }
        if (created_differs) {
            for (Py_ssize_t i = 0; i < count; i++) {
                int64_t d = (int64_t)((uint64_t)stamps[i] - (uint64_t)created_base);
                unsigned char le[8];
                int width = created64 ? 8 : 4;
                for (int b = 0; b < width; b++)
                    le[b] = (unsigned char)((uint64_t)d >> (8 * b));
                if (buf_put(&created, le, width) < 0)
                    goto error;
            }
        }
    }
    result = Py_BuildValue(
        "(LNONNNNNNLL)", (long long)created_base,
        created_differs ? buf_bytes(&created) : Py_NewRef(Py_None),
        created64 ? Py_True : Py_False, any_key ? buf_bytes(&key_lens) : Py_NewRef(Py_None),
        buf_bytes(&data_lens), any_header ? buf_bytes(&header_lens) : Py_NewRef(Py_None),
        buf_bytes(&keys), buf_bytes(&data), buf_bytes(&headers), (long long)max_record,
        (long long)last_delta);
error:
    PyMem_Free(stamps);
    buf_free(&created);
    buf_free(&key_lens);
    buf_free(&data_lens);
    buf_free(&header_lens);
    buf_free(&keys);
    buf_free(&data);
    buf_free(&headers);
    PyBuffer_Release(&view);
    return result;
}

static PyMethodDef methods[] = {
    {"parse_records", parse_records, METH_VARARGS,
     "Kafka records -> weir batch columns (see the module source)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_records",
                                    "Kafka record batch v2 parsing in C.", -1, methods};

PyMODINIT_FUNC PyInit__records(void) { return PyModule_Create(&module); }
