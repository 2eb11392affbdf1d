/* The reader's Message tuples, built in C (weir.client.messages).
 *
 * A loop over a batch's Message objects spent ~160 ns a message building them in
 * Python's C pieces (zip of eleven columns, then tuple.__new__ per row through map),
 * against ~75 ns for the loop itself (bench/write_cost.py, docs/performance.md). This
 * iterator builds each Message straight from the columns of one decoded stored batch:
 * one allocation of the tuple, its offset (and seq_no when they are a range) as ints,
 * the other fields shared or taken from the column lists. Messages are built as the
 * loop asks for them, so a loop that drops each one frees it at once.
 *
 * It is the only way a reader builds messages: weir.client.messages loads it through
 * weir.compiled, which refuses a missing build or one of another source. The columns are
 * the decoder's own lists; a list that shrank under the iterator (someone cleared
 * Batch.values while looping) ends it with an error instead of reading past its end.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#ifndef WEIR_MESSAGE_ROWS_SOURCE
#define WEIR_MESSAGE_ROWS_SOURCE ""
#endif

#define FIELDS 11

typedef struct {
    PyObject_HEAD
    PyTypeObject *cls;      /* Message: a tuple subclass of FIELDS fields */
    PyObject *topic;
    PyObject *partition;
    PyObject *seqs;         /* list of ints, or NULL: seq0 + i */
    PyObject *created;      /* list of ints, or NULL: created_one for all */
    PyObject *created_one;
    PyObject *written;
    PyObject *producer_id;
    PyObject *keys;         /* list of bytes, or NULL: empty_key for all */
    PyObject *empty_key;
    PyObject *data;         /* list of bytes */
    PyObject *headers;      /* list of mappings, or NULL: empty_headers for all */
    PyObject *empty_headers;
    PyObject *session;
    long long offset0;
    long long seq0;
    Py_ssize_t i;
    Py_ssize_t n;
} Rows;

static int
rows_traverse(Rows *r, visitproc visit, void *arg)
{
    Py_VISIT(r->cls);
    Py_VISIT(r->topic);
    Py_VISIT(r->partition);
    Py_VISIT(r->seqs);
    Py_VISIT(r->created);
    Py_VISIT(r->created_one);
    Py_VISIT(r->written);
    Py_VISIT(r->producer_id);
    Py_VISIT(r->keys);
    Py_VISIT(r->empty_key);
    Py_VISIT(r->data);
    Py_VISIT(r->headers);
    Py_VISIT(r->empty_headers);
    Py_VISIT(r->session);
    return 0;
}

static int
rows_clear(Rows *r)
{
    Py_CLEAR(r->cls);
    Py_CLEAR(r->topic);
    Py_CLEAR(r->partition);
    Py_CLEAR(r->seqs);
    Py_CLEAR(r->created);
    Py_CLEAR(r->created_one);
    Py_CLEAR(r->written);
    Py_CLEAR(r->producer_id);
    Py_CLEAR(r->keys);
    Py_CLEAR(r->empty_key);
    Py_CLEAR(r->data);
    Py_CLEAR(r->headers);
    Py_CLEAR(r->empty_headers);
    Py_CLEAR(r->session);
    r->i = r->n = 0; /* cleared: ended */
    return 0;
}

static void
rows_dealloc(Rows *r)
{
    PyObject_GC_UnTrack(r);
    rows_clear(r);
    PyObject_GC_Del(r);
}

/* item i of a column list, new reference; NULL with an error when the list shrank */
static PyObject *
column_item(PyObject *list, Py_ssize_t i, const char *what)
{
    if (i >= PyList_GET_SIZE(list)) {
        PyErr_Format(PyExc_RuntimeError,
                     "the batch's %s column changed while its messages were iterated", what);
        return NULL;
    }
    return Py_NewRef(PyList_GET_ITEM(list, i));
}

static PyObject *
rows_next(Rows *r)
{
    if (r->i >= r->n || r->cls == NULL)
        return NULL;
    Py_ssize_t i = r->i;
    PyObject *offset = NULL, *seq = NULL, *created = NULL, *key = NULL, *data = NULL,
             *headers = NULL;
    offset = PyLong_FromLongLong(r->offset0 + i);
    if (offset == NULL)
        goto fail;
    seq = r->seqs != NULL ? column_item(r->seqs, i, "seq_no") : PyLong_FromLongLong(r->seq0 + i);
    if (seq == NULL)
        goto fail;
    created = r->created != NULL ? column_item(r->created, i, "created_at")
                                 : Py_NewRef(r->created_one);
    if (created == NULL)
        goto fail;
    key = r->keys != NULL ? column_item(r->keys, i, "key") : Py_NewRef(r->empty_key);
    if (key == NULL)
        goto fail;
    data = column_item(r->data, i, "data");
    if (data == NULL)
        goto fail;
    headers = r->headers != NULL ? column_item(r->headers, i, "headers")
                                 : Py_NewRef(r->empty_headers);
    if (headers == NULL)
        goto fail;
    /* Taken before the allocation, which may collect garbage and so run a finalizer that
     * asks this iterator for the next row: that one gets row i + 1. Nothing runs between
     * the tuple's tracking (at the end of its allocation) and the last store below. */
    r->i = i + 1;
    PyObject *t = r->cls->tp_alloc(r->cls, FIELDS);
    if (t == NULL)
        goto fail;
    PyTuple_SET_ITEM(t, 0, Py_NewRef(r->topic));
    PyTuple_SET_ITEM(t, 1, Py_NewRef(r->partition));
    PyTuple_SET_ITEM(t, 2, offset);
    PyTuple_SET_ITEM(t, 3, seq);
    PyTuple_SET_ITEM(t, 4, created);
    PyTuple_SET_ITEM(t, 5, Py_NewRef(r->written));
    PyTuple_SET_ITEM(t, 6, Py_NewRef(r->producer_id));
    PyTuple_SET_ITEM(t, 7, key);
    PyTuple_SET_ITEM(t, 8, data);
    PyTuple_SET_ITEM(t, 9, headers);
    PyTuple_SET_ITEM(t, 10, Py_NewRef(r->session));
    return t;
fail:
    Py_XDECREF(offset);
    Py_XDECREF(seq);
    Py_XDECREF(created);
    Py_XDECREF(key);
    Py_XDECREF(data);
    Py_XDECREF(headers);
    r->i = r->n; /* ended */
    return NULL;
}

static PyObject *
rows_length_hint(Rows *r, PyObject *Py_UNUSED(ignored))
{
    return PyLong_FromSsize_t(r->n - r->i);
}

static PyMethodDef rows_methods[] = {
    {"__length_hint__", (PyCFunction)rows_length_hint, METH_NOARGS, NULL},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject RowsType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "weir.client._message_rows.Rows",
    .tp_basicsize = sizeof(Rows),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "The Message tuples of one decoded stored batch, built as they are asked for.",
    .tp_dealloc = (destructor)rows_dealloc,
    .tp_traverse = (traverseproc)rows_traverse,
    .tp_clear = (inquiry)rows_clear,
    .tp_iter = PyObject_SelfIter,
    .tp_iternext = (iternextfunc)rows_next,
    .tp_methods = rows_methods,
};

/* a column: a list of at least n items, or None (the shared value instead) */
static int
column(PyObject *arg, Py_ssize_t n, const char *what, PyObject **out)
{
    if (arg == Py_None) {
        *out = NULL;
        return 0;
    }
    if (!PyList_CheckExact(arg)) {
        PyErr_Format(PyExc_TypeError, "the %s column must be a list or None, not %.100s",
                     what, Py_TYPE(arg)->tp_name);
        return -1;
    }
    if (PyList_GET_SIZE(arg) < n) {
        PyErr_Format(PyExc_ValueError, "the %s column has %zd items for %zd messages", what,
                     PyList_GET_SIZE(arg), n);
        return -1;
    }
    *out = Py_NewRef(arg);
    return 0;
}

/* ``cls`` is a NamedTuple of FIELDS fields: a tuple subclass with ``_fields``, whose
 * instances hold exactly their fields (a struct sequence, such as os.stat_result, has no
 * ``_fields`` and keeps hidden items past its visible ones: built here, it would read and
 * free items never allocated) */
static int
is_named_tuple(PyObject *cls)
{
    if (!PyType_Check(cls) || !PyType_IsSubtype((PyTypeObject *)cls, &PyTuple_Type)) {
        PyErr_SetString(PyExc_TypeError, "rows() builds a NamedTuple class");
        return 0;
    }
    PyObject *fields = PyObject_GetAttrString(cls, "_fields");
    if (fields == NULL) {
        PyErr_Clear();
        PyErr_SetString(PyExc_TypeError, "rows() builds a NamedTuple class");
        return 0;
    }
    int ok = PyTuple_Check(fields) && PyTuple_GET_SIZE(fields) == FIELDS;
    Py_DECREF(fields);
    if (!ok)
        PyErr_Format(PyExc_TypeError, "rows() builds a NamedTuple of %d fields", FIELDS);
    return ok;
}

PyDoc_STRVAR(rows_doc,
"rows(cls, topic, partition, first_offset, count, seqs, created, written, producer_id,\n"
"     keys, data, headers, session, empty_key, empty_headers)\n"
"\n"
"An iterator of ``count`` ``cls`` tuples (Message) from one decoded batch's columns:\n"
"``seqs`` an int (the first seq_no, then one more each) or a list; ``created`` an int\n"
"(for all) or a list; ``keys`` and ``headers`` lists, or None for ``empty_key`` and\n"
"``empty_headers``; ``data`` a list.");

static PyObject *
rows(PyObject *Py_UNUSED(module), PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 15) {
        PyErr_Format(PyExc_TypeError, "rows() takes 15 arguments (%zd given)", nargs);
        return NULL;
    }
    PyObject *cls = args[0];
    if (!is_named_tuple(cls))
        return NULL;
    long long offset0 = PyLong_AsLongLong(args[3]);
    if (offset0 == -1 && PyErr_Occurred())
        return NULL;
    Py_ssize_t n = PyLong_AsSsize_t(args[4]);
    if (n == -1 && PyErr_Occurred())
        return NULL;
    if (n < 0) {
        PyErr_SetString(PyExc_ValueError, "rows() needs a count of at least 0");
        return NULL;
    }
    if (n > 0 && offset0 > LLONG_MAX - (n - 1)) {
        PyErr_SetString(PyExc_OverflowError, "rows(): the offsets would pass 2**63 - 1");
        return NULL;
    }
    Rows *r = PyObject_GC_New(Rows, &RowsType);
    if (r == NULL)
        return NULL;
    r->cls = (PyTypeObject *)Py_NewRef(cls);
    r->topic = Py_NewRef(args[1]);
    r->partition = Py_NewRef(args[2]);
    r->seqs = r->created = r->created_one = r->keys = r->data = r->headers = NULL;
    r->written = Py_NewRef(args[7]);
    r->producer_id = Py_NewRef(args[8]);
    r->session = Py_NewRef(args[12]);
    r->empty_key = Py_NewRef(args[13]);
    r->empty_headers = Py_NewRef(args[14]);
    r->offset0 = offset0;
    r->seq0 = 0;
    r->i = 0;
    r->n = n;
    PyObject_GC_Track(r);
    if (PyLong_Check(args[5])) {
        r->seq0 = PyLong_AsLongLong(args[5]);
        if (r->seq0 == -1 && PyErr_Occurred())
            goto fail;
        if (n > 0 && r->seq0 > LLONG_MAX - (n - 1)) {
            PyErr_SetString(PyExc_OverflowError, "rows(): the seq_nos would pass 2**63 - 1");
            goto fail;
        }
    } else if (column(args[5], n, "seq_no", &r->seqs) < 0 || r->seqs == NULL) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_TypeError, "the seq_no column must be an int or a list");
        goto fail;
    }
    if (PyLong_Check(args[6])) {
        r->created_one = Py_NewRef(args[6]);
    } else if (column(args[6], n, "created_at", &r->created) < 0 || r->created == NULL) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_TypeError, "the created_at column must be an int or a list");
        goto fail;
    }
    if (column(args[9], n, "key", &r->keys) < 0)
        goto fail;
    if (column(args[10], n, "data", &r->data) < 0)
        goto fail;
    if (r->data == NULL) {
        PyErr_SetString(PyExc_TypeError, "the data column must be a list");
        goto fail;
    }
    if (column(args[11], n, "headers", &r->headers) < 0)
        goto fail;
    return (PyObject *)r;
fail:
    Py_DECREF(r);
    return NULL;
}

static PyMethodDef module_methods[] = {
    {"rows", (PyCFunction)(void (*)(void))rows, METH_FASTCALL, rows_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "weir.client._message_rows",
    "The reader's Message tuples, built in C.", -1, module_methods,
};

PyMODINIT_FUNC
PyInit__message_rows(void)
{
    if (PyType_Ready(&RowsType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    if (PyModule_AddStringConstant(m, "SOURCE_SHA256", WEIR_MESSAGE_ROWS_SOURCE) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
