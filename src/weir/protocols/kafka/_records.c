/* Kafka record batch (v2) records <-> weir batch payloads, in C.
 *
 * Kafka records are runs of zigzag varints with the key, value and headers in
 * between: a Python loop over them was the limit of the produce path (about 2 us
 * per record) and of the fetch path, so both directions are here. Every length is
 * checked against the bounds (the bytes come from the network, or from storage).
 *
 * parse_records(buf, pos, end, count, base_ts, null_header, room) -> tuple
 *   Kafka records -> a weir batch payload (weir.storage.batch: created-time deltas,
 *   key lengths, data lengths, header lengths, then the keys, data and headers
 *   blobs), laid out in ONE bytearray after `room` bytes left for the batch header,
 *   so the caller writes the header in place and the records are copied once.
 *   buf          a bytes-like object holding the records section
 *   pos, end     where the records are in buf
 *   count        records the batch header claims
 *   base_ts      the batch's first timestamp (record timestamps are deltas)
 *   null_header  weir header key marking a null value, set to "true" (weir data
 *                cannot be null; the Pulsar front marks its null values the same way)
 *   room         bytes to leave free before the payload
 *   returns (out, created_base, flags, max_record, last_offset_delta)
 *   flags        the weir payload flags: CREATED (0x02, +CREATED64 0x20) when the
 *                timestamps differ, KEYS (0x04) when a record has a non-empty key,
 *                HEADERS (0x08) when a record has headers
 *   max_record   the largest key + value of one record
 *   raises ValueError for malformed records.
 *
 * build_records(payload, flags, count, created_base, null_header) -> tuple
 *   A raw (uncompressed) weir payload -> Kafka records, after 61 bytes left for the
 *   record batch header: returns (out, base_timestamp, max_timestamp). A record whose
 *   headers hold null_header and whose data is empty gets a null value (the header
 *   is not passed on); an empty or absent key is null. Raises ValueError when the
 *   columns do not fit the payload.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

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

/* Bytes a zigzag varint of n takes. */
static inline Py_ssize_t zz_len(int64_t n) {
    uint64_t z = ((uint64_t)n << 1) ^ (uint64_t)(n >> 63);
    Py_ssize_t len = 1;
    while (z >= 0x80) {
        z >>= 7;
        len++;
    }
    return len;
}

static inline unsigned char *zz_put(unsigned char *o, int64_t n) {
    uint64_t z = ((uint64_t)n << 1) ^ (uint64_t)(n >> 63);
    while (z >= 0x80) {
        *o++ = (unsigned char)((z & 0x7F) | 0x80);
        z >>= 7;
    }
    *o++ = (unsigned char)z;
    return o;
}

static inline unsigned char *le32_put(unsigned char *o, uint32_t v) {
    o[0] = (unsigned char)v;
    o[1] = (unsigned char)(v >> 8);
    o[2] = (unsigned char)(v >> 16);
    o[3] = (unsigned char)(v >> 24);
    return o + 4;
}

static inline uint32_t le32_get(const unsigned char *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}

static inline uint64_t le64_get(const unsigned char *p) {
    return (uint64_t)le32_get(p) | ((uint64_t)le32_get(p + 4) << 32);
}

#define FLAG_SEQ_SPARSE 0x01
#define FLAG_CREATED 0x02
#define FLAG_KEYS 0x04
#define FLAG_HEADERS 0x08
#define FLAG_SEQ64 0x10
#define FLAG_CREATED64 0x20

typedef struct {
    int64_t ts;
    Py_ssize_t kpos, klen, vpos, vlen; /* vlen -1: a null value */
    Py_ssize_t hpos;                   /* the header count varint */
    Py_ssize_t hsize;                  /* the record's headers in weir's encoding */
} Rec;

static PyObject *parse_records(PyObject *Py_UNUSED(self), PyObject *args) {
    Py_buffer view;
    Py_ssize_t pos, end, count, room;
    long long base_ts;
    const char *null_key;
    Py_ssize_t null_key_len;
    if (!PyArg_ParseTuple(args, "y*nnnLy#n", &view, &pos, &end, &count, &base_ts, &null_key,
                          &null_key_len, &room))
        return NULL;
    PyObject *result = NULL, *out = NULL;
    Rec *recs = NULL;
    int any_key = 0, any_header = 0, created64 = 0, created_differs = 0;
    int64_t created_base = 0, max_record = 0, last_delta = -1;
    Py_ssize_t keys_total = 0, data_total = 0, headers_total = 0;
    const unsigned char *p = (const unsigned char *)view.buf;

    if (pos < 0 || end > view.len || pos > end)
        FAIL("records section %zd..%zd outside a buffer of %zd bytes", pos, end, view.len);
    if (count < 0 || count > (end - pos) / 7 + 1)
        FAIL("%zd records cannot fit in %zd bytes", count, end - pos);
    if (room < 0 || room > (1 << 20))
        FAIL("room of %zd bytes", room);
    recs = PyMem_Malloc(sizeof(Rec) * (size_t)(count ? count : 1));
    if (!recs) {
        PyErr_NoMemory();
        goto error;
    }
    /* pass 1: check every record, note where its parts are and how big they get */
    for (Py_ssize_t i = 0; i < count; i++) {
        Rec *r = &recs[i];
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
        r->ts = (int64_t)((uint64_t)base_ts + (uint64_t)ts_delta);
        VARINT(klen, rend);
        if (klen < -1 || klen > rend - pos)
            FAIL("record %zd key length %lld does not fit the record", i, (long long)klen);
        r->kpos = pos;
        if (klen > 0) {
            any_key = 1;
            pos += (Py_ssize_t)klen;
        } else {
            klen = 0;
        }
        r->klen = (Py_ssize_t)klen;
        VARINT(vlen, rend);
        if (vlen < -1 || vlen > rend - pos)
            FAIL("record %zd value length %lld does not fit the record", i, (long long)vlen);
        r->vpos = pos;
        r->vlen = (Py_ssize_t)vlen;
        if (vlen < 0)
            vlen = 0;
        if (klen > UINT32_MAX || vlen > UINT32_MAX)
            FAIL("record %zd is too large", i);
        if (klen + vlen > max_record)
            max_record = klen + vlen;
        keys_total += (Py_ssize_t)klen;
        data_total += (Py_ssize_t)vlen;
        pos += (Py_ssize_t)vlen;
        r->hpos = pos;
        VARINT(nheaders, rend);
        if (nheaders < 0 || nheaders > rend - pos)
            FAIL("record %zd claims %lld headers", i, (long long)nheaders);
        Py_ssize_t hsize = 0;
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
            pos += (Py_ssize_t)hkl;
            VARINT(hvl, rend);
            if (hvl < -1 || hvl > rend - pos)
                FAIL("record %zd header value length %lld does not fit", i, (long long)hvl);
            if (hvl < 0)
                hvl = 0; /* a null header value reads back empty */
            pos += (Py_ssize_t)hvl;
            hsize += 2 + (Py_ssize_t)hkl + 4 + (Py_ssize_t)hvl;
        }
        if (r->vlen < 0)
            hsize += 2 + null_key_len + 4 + 4;
        if (hsize > UINT32_MAX)
            FAIL("record %zd headers are too large", i);
        if (hsize)
            any_header = 1;
        r->hsize = hsize;
        headers_total += hsize;
        if (pos != rend)
            FAIL("record %zd is %lld bytes, its fields take %lld", i, (long long)length,
                 (long long)(length - (rend - pos)));
    }
    if (pos != end)
        FAIL("%zd bytes after the last of %zd records", end - pos, count);
    if (count > 0) {
        created_base = recs[0].ts;
        for (Py_ssize_t i = 1; i < count; i++) {
            int64_t d = (int64_t)((uint64_t)recs[i].ts - (uint64_t)created_base);
            if (d != 0)
                created_differs = 1;
            if (d < INT32_MIN || d > INT32_MAX)
                created64 = 1;
        }
    }
    /* pass 2: the payload, column by column, into one buffer */
    Py_ssize_t cw = created_differs ? (created64 ? 8 : 4) : 0;
    Py_ssize_t size = room + count * (cw + 4 + (any_key ? 4 : 0) + (any_header ? 4 : 0)) +
                      (any_key ? keys_total : 0) + data_total + (any_header ? headers_total : 0);
    out = PyByteArray_FromStringAndSize(NULL, size);
    if (!out)
        goto error;
    unsigned char *o = (unsigned char *)PyByteArray_AS_STRING(out);
    memset(o, 0, (size_t)room);
    unsigned char *created = o + room;
    unsigned char *klens = created + cw * count;
    unsigned char *dlens = klens + (any_key ? 4 * count : 0);
    unsigned char *hlens = dlens + 4 * count;
    unsigned char *kblob = hlens + (any_header ? 4 * count : 0);
    unsigned char *dblob = kblob + (any_key ? keys_total : 0);
    unsigned char *hblob = dblob + data_total;
    for (Py_ssize_t i = 0; i < count; i++) {
        const Rec *r = &recs[i];
        if (cw) {
            uint64_t d = (uint64_t)r->ts - (uint64_t)created_base;
            for (int b = 0; b < cw; b++)
                *created++ = (unsigned char)(d >> (8 * b));
        }
        if (any_key) {
            klens = le32_put(klens, (uint32_t)r->klen);
            memcpy(kblob, p + r->kpos, (size_t)r->klen);
            kblob += r->klen;
        }
        Py_ssize_t vlen = r->vlen < 0 ? 0 : r->vlen;
        dlens = le32_put(dlens, (uint32_t)vlen);
        memcpy(dblob, p + r->vpos, (size_t)vlen);
        dblob += vlen;
        if (any_header) {
            hlens = le32_put(hlens, (uint32_t)r->hsize);
            Py_ssize_t hp = r->hpos;
            int64_t nheaders = 0, hkl = 0, hvl = 0;
            /* checked in pass 1: these reads cannot fail */
            read_varint(p, &hp, end, &nheaders);
            for (int64_t h = 0; h < nheaders; h++) {
                read_varint(p, &hp, end, &hkl);
                *hblob++ = (unsigned char)hkl;
                *hblob++ = (unsigned char)(hkl >> 8);
                memcpy(hblob, p + hp, (size_t)hkl);
                hblob += hkl;
                hp += (Py_ssize_t)hkl;
                read_varint(p, &hp, end, &hvl);
                if (hvl < 0)
                    hvl = 0;
                hblob = le32_put(hblob, (uint32_t)hvl);
                memcpy(hblob, p + hp, (size_t)hvl);
                hblob += hvl;
                hp += (Py_ssize_t)hvl;
            }
            if (r->vlen < 0) {
                *hblob++ = (unsigned char)null_key_len;
                *hblob++ = (unsigned char)(null_key_len >> 8);
                memcpy(hblob, null_key, (size_t)null_key_len);
                hblob += null_key_len;
                hblob = le32_put(hblob, 4);
                memcpy(hblob, "true", 4);
                hblob += 4;
            }
        }
    }
    int flags = (created_differs ? FLAG_CREATED | (created64 ? FLAG_CREATED64 : 0) : 0) |
                (any_key ? FLAG_KEYS : 0) | (any_header ? FLAG_HEADERS : 0);
    result = Py_BuildValue("(OLiLL)", out, (long long)created_base, flags, (long long)max_record,
                           (long long)last_delta);
error:
    Py_XDECREF(out);
    PyMem_Free(recs);
    PyBuffer_Release(&view);
    return result;
}

#define KAFKA_HEADER 61

static PyObject *build_records(PyObject *Py_UNUSED(self), PyObject *args) {
    Py_buffer view;
    int flags;
    Py_ssize_t count;
    long long created_base;
    const char *null_key;
    Py_ssize_t null_key_len;
    if (!PyArg_ParseTuple(args, "y*inLy#", &view, &flags, &count, &created_base, &null_key,
                          &null_key_len))
        return NULL;
    PyObject *result = NULL, *out = NULL;
    int64_t *stamps = NULL;
    const unsigned char *p = (const unsigned char *)view.buf;
    Py_ssize_t n = view.len;
    if (count < 0 || count > n / 4 + 1)
        FAIL("%zd records cannot fit in a payload of %zd bytes", count, n);
    stamps = PyMem_Malloc(sizeof(int64_t) * (size_t)(count ? count : 1));
    if (!stamps) {
        PyErr_NoMemory();
        goto error;
    }
    /* the columns */
    Py_ssize_t pos = 0;
    if (flags & FLAG_SEQ_SPARSE)
        pos += count * ((flags & FLAG_SEQ64) ? 8 : 4);
    Py_ssize_t cpos = pos, cw = (flags & FLAG_CREATED) ? ((flags & FLAG_CREATED64) ? 8 : 4) : 0;
    pos += cw * count;
    Py_ssize_t kl = pos;
    if (flags & FLAG_KEYS)
        pos += 4 * count;
    Py_ssize_t dl = pos;
    pos += 4 * count;
    Py_ssize_t hl = pos;
    if (flags & FLAG_HEADERS)
        pos += 4 * count;
    if (pos > n)
        FAIL("columns of %zd records do not fit a payload of %zd bytes", count, n);
    Py_ssize_t keys_total = 0, data_total = 0, headers_total = 0;
    for (Py_ssize_t i = 0; i < count; i++) {
        if (flags & FLAG_KEYS)
            keys_total += le32_get(p + kl + 4 * i);
        data_total += le32_get(p + dl + 4 * i);
        if (flags & FLAG_HEADERS)
            headers_total += le32_get(p + hl + 4 * i);
    }
    Py_ssize_t kb = pos, db = kb + keys_total, hb = db + data_total;
    if (hb + headers_total != n)
        FAIL("blobs of %zd records do not fit a payload of %zd bytes", count, n);
    int64_t base_ts = 0, max_ts = 0;
    for (Py_ssize_t i = 0; i < count; i++) {
        int64_t d = 0;
        if (cw == 4)
            d = (int32_t)le32_get(p + cpos + 4 * i);
        else if (cw == 8)
            d = (int64_t)le64_get(p + cpos + 8 * i);
        stamps[i] = (int64_t)((uint64_t)created_base + (uint64_t)d);
        if (i == 0 || stamps[i] < base_ts)
            base_ts = stamps[i];
        if (i == 0 || stamps[i] > max_ts)
            max_ts = stamps[i];
    }
    /* pass 1: every record's size (headers checked), so the output is allocated once */
    Py_ssize_t total = KAFKA_HEADER;
    for (int pass = 0; pass < 2; pass++) {
        unsigned char *o = pass ? (unsigned char *)PyByteArray_AS_STRING(out) + KAFKA_HEADER : NULL;
        Py_ssize_t k = kb, d = db, h = hb;
        for (Py_ssize_t i = 0; i < count; i++) {
            Py_ssize_t klen = (flags & FLAG_KEYS) ? (Py_ssize_t)le32_get(p + kl + 4 * i) : 0;
            Py_ssize_t dlen = (Py_ssize_t)le32_get(p + dl + 4 * i);
            Py_ssize_t hlen = (flags & FLAG_HEADERS) ? (Py_ssize_t)le32_get(p + hl + 4 * i) : 0;
            /* the headers: count them, find the null-value mark */
            Py_ssize_t hp = h, hend = h + hlen, hbytes = 0;
            int64_t nheaders = 0;
            int null_mark = 0;
            while (hp < hend) {
                if (hend - hp < 6)
                    FAIL("record %zd headers are truncated", i);
                Py_ssize_t hk = (Py_ssize_t)p[hp] | ((Py_ssize_t)p[hp + 1] << 8);
                if (hk > hend - hp - 6)
                    FAIL("record %zd header key runs past its headers", i);
                Py_ssize_t hv = (Py_ssize_t)le32_get(p + hp + 2 + hk);
                if (hv > hend - hp - 6 - hk)
                    FAIL("record %zd header value runs past its headers", i);
                if (hk == null_key_len && memcmp(p + hp + 2, null_key, (size_t)hk) == 0) {
                    null_mark = 1;
                } else {
                    nheaders++;
                    hbytes += zz_len(hk) + hk + zz_len(hv) + hv;
                }
                hp += 6 + hk + hv;
            }
            int null_value = null_mark && dlen == 0;
            int null_key_rec = klen == 0;
            int64_t ts_delta = (int64_t)((uint64_t)stamps[i] - (uint64_t)base_ts);
            Py_ssize_t body = 1 + zz_len(ts_delta) + zz_len(i) +
                              (null_key_rec ? 1 : zz_len(klen) + klen) +
                              (null_value ? 1 : zz_len(dlen) + dlen) + zz_len(nheaders) + hbytes;
            if (!pass) {
                total += zz_len(body) + body;
            } else {
                o = zz_put(o, body);
                *o++ = 0; /* attributes */
                o = zz_put(o, ts_delta);
                o = zz_put(o, i);
                if (null_key_rec) {
                    o = zz_put(o, -1);
                } else {
                    o = zz_put(o, klen);
                    memcpy(o, p + k, (size_t)klen);
                    o += klen;
                }
                if (null_value) {
                    o = zz_put(o, -1);
                } else {
                    o = zz_put(o, dlen);
                    memcpy(o, p + d, (size_t)dlen);
                    o += dlen;
                }
                o = zz_put(o, nheaders);
                for (hp = h; hp < hend;) {
                    Py_ssize_t hk = (Py_ssize_t)p[hp] | ((Py_ssize_t)p[hp + 1] << 8);
                    Py_ssize_t hv = (Py_ssize_t)le32_get(p + hp + 2 + hk);
                    if (!(hk == null_key_len && memcmp(p + hp + 2, null_key, (size_t)hk) == 0)) {
                        o = zz_put(o, hk);
                        memcpy(o, p + hp + 2, (size_t)hk);
                        o += hk;
                        o = zz_put(o, hv);
                        memcpy(o, p + hp + 6 + hk, (size_t)hv);
                        o += hv;
                    }
                    hp += 6 + hk + hv;
                }
            }
            k += klen;
            d += dlen;
            h += hlen;
        }
        if (!pass) {
            out = PyByteArray_FromStringAndSize(NULL, total);
            if (!out)
                goto error;
            memset(PyByteArray_AS_STRING(out), 0, KAFKA_HEADER);
        }
    }
    result = Py_BuildValue("(OLL)", out, (long long)base_ts, (long long)max_ts);
error:
    Py_XDECREF(out);
    PyMem_Free(stamps);
    PyBuffer_Release(&view);
    return result;
}

static PyMethodDef methods[] = {
    {"parse_records", parse_records, METH_VARARGS,
     "Kafka records -> a weir batch payload (see the module source)."},
    {"build_records", build_records, METH_VARARGS,
     "A weir batch payload -> Kafka records (see the module source)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_records",
                                    "Kafka record batch v2 records <-> weir batch payloads, in C.", -1, methods};

/* setup.py defines it as the SHA-256 of this file, so the Python side can tell a build
 * of an older source (compiled.py); "" when built another way. */
#ifndef WEIR_RECORDS_SOURCE
#define WEIR_RECORDS_SOURCE ""
#endif

PyMODINIT_FUNC PyInit__records(void) {
    PyObject *m = PyModule_Create(&module);
    if (m != NULL && PyModule_AddStringConstant(m, "SOURCE_SHA256", WEIR_RECORDS_SOURCE) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
