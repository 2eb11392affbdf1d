/* The compiled write() of the sync client's caller-driven TCP writer
 * (weir.client.direct_writer.DirectWriterCore): the common call only.
 *
 * A 100 B producer spends its time in the Python of write(): seven keyword checks, a
 * clock read, a lock, two appends and six counter updates cost ~0.8 us per call, which
 * caps one producer under 1.2 M msgs/s before any I/O. This type is a base class of
 * DirectWriterCore that holds the writer's buffer counters as C fields (the Python code
 * reads and writes them as ordinary attributes through member descriptors) and does
 * the common write -- exactly one positional `bytes`, no keywords, room in the buffer,
 * automatic seq_nos, the writer open and its lock free -- in C. Every other call goes to
 * DirectWriterCore._write_py, the pure-Python write, which stays the reference (and the
 * only path when this module is not built; tests/client/test_write_fast.py checks the
 * two give the same stored messages and the same errors).
 *
 * The lock: the fast path does not take the writer's lock; it checks that nobody holds
 * it and then runs to its end without executing Python code or releasing the GIL (the
 * limit is read before the check; list appends and int creation run no Python), so no
 * other thread can take the lock in between. If the lock is held, the Python write
 * waits for it as before.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>
#include <time.h>

#ifndef WEIR_WRITE_FAST_SOURCE
#define WEIR_WRITE_FAST_SOURCE ""
#endif

typedef struct {
    PyObject_HEAD
    Py_ssize_t buf_bytes;
    Py_ssize_t unacked;
    Py_ssize_t unacked_bytes;
    Py_ssize_t written;
    Py_ssize_t max_n;
    Py_ssize_t max_b;
    Py_ssize_t pump_at;
    long long pumped;
    char fast;
    char armed;
    PyObject *buf;  /* the writer's Buffer (write_buffer.Buffer) */
    PyObject *lock; /* the writer's threading.Lock */
    PyObject *ms_obj; /* the int of the last millisecond written: reused while it lasts */
    long long ms_cached;
} FastWrite;

static PyObject *str_write_py, *str_pump, *str_arm, *str_locked, *str_limit, *str_bytes,
    *str_data, *str_created;

static int
fw_traverse(FastWrite *self, visitproc visit, void *arg)
{
    Py_VISIT(self->buf);
    Py_VISIT(self->lock);
    Py_VISIT(self->ms_obj);
    return 0;
}

static int
fw_clear(FastWrite *self)
{
    Py_CLEAR(self->buf);
    Py_CLEAR(self->lock);
    Py_CLEAR(self->ms_obj);
    return 0;
}

static void
fw_dealloc(FastWrite *self)
{
    PyObject_GC_UnTrack(self);
    fw_clear(self);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

/* Everything but the common call: the Python write, with the same arguments. */
static PyObject *
slow(FastWrite *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    Py_ssize_t total = nargs + nkw;
    PyObject *small[10];
    PyObject **stack = small;
    if (total + 1 > 10) {
        stack = PyMem_Malloc((total + 1) * sizeof(PyObject *));
        if (stack == NULL)
            return PyErr_NoMemory();
    }
    stack[0] = (PyObject *)self;
    for (Py_ssize_t i = 0; i < total; i++)
        stack[i + 1] = args[i];
    PyObject *r = PyObject_VectorcallMethod(str_write_py, stack, (size_t)(nargs + 1), kwnames);
    if (stack != small)
        PyMem_Free(stack);
    return r;
}

static PyObject *
fw_write(FastWrite *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames)
{
    if (nargs != 1 || (kwnames != NULL && PyTuple_GET_SIZE(kwnames) > 0) || !self->fast)
        return slow(self, args, nargs, kwnames);
    PyObject *data = args[0];
    if (!PyBytes_CheckExact(data))
        return slow(self, args, nargs, kwnames);
    Py_ssize_t size = PyBytes_GET_SIZE(data);

    /* the message limit first: reading it may run Python (a property) */
    PyObject *limit = PyObject_GetAttr((PyObject *)self, str_limit);
    if (limit == NULL)
        return NULL;
    PyObject *lb = PyObject_GetAttr(limit, str_bytes);
    Py_DECREF(limit);
    if (lb == NULL)
        return NULL;
    Py_ssize_t limit_bytes = PyLong_AsSsize_t(lb);
    Py_DECREF(lb);
    if (limit_bytes == -1 && PyErr_Occurred())
        return NULL;

    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    long long ms = (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;

    if (self->lock == NULL || self->buf == NULL)
        return slow(self, args, nargs, kwnames);
    PyObject *held = PyObject_CallMethodNoArgs(self->lock, str_locked);
    if (held == NULL)
        return NULL;
    int busy = held != Py_False;
    Py_DECREF(held);
    /* from here to the counter updates no Python code runs: the GIL keeps the lock free */
    if (busy || !self->fast || self->unacked >= self->max_n || self->unacked_bytes >= self->max_b ||
        size > limit_bytes)
        return slow(self, args, nargs, kwnames);

    if (self->ms_obj == NULL || self->ms_cached != ms) {
        PyObject *m = PyLong_FromLongLong(ms);
        if (m == NULL)
            return NULL;
        Py_XSETREF(self->ms_obj, m);
        self->ms_cached = ms;
    }
    /* Buffer is a slots dataclass: its columns are member descriptors, no Python runs */
    PyObject *col = PyObject_GetAttr(self->buf, str_data);
    if (col == NULL)
        return NULL;
    PyObject *ccol = PyObject_GetAttr(self->buf, str_created);
    if (ccol == NULL) {
        Py_DECREF(col);
        return NULL;
    }
    if (!PyList_CheckExact(col) || !PyList_CheckExact(ccol)) {
        Py_DECREF(col);
        Py_DECREF(ccol);
        return slow(self, args, nargs, kwnames);
    }
    if (PyList_Append(col, data) < 0) {
        Py_DECREF(col);
        Py_DECREF(ccol);
        return NULL;
    }
    if (PyList_Append(ccol, self->ms_obj) < 0) {
        /* keep the columns the same length */
        PyList_SetSlice(col, PyList_GET_SIZE(col) - 1, PyList_GET_SIZE(col), NULL);
        Py_DECREF(col);
        Py_DECREF(ccol);
        return NULL;
    }
    Py_DECREF(col);
    Py_DECREF(ccol);
    self->buf_bytes += size;
    self->unacked += 1;
    self->unacked_bytes += size;
    self->written += 1;

    /* as the Python write: acks in, what is buffered out, once a millisecond and when the
     * message is alone in the buffer; or when a part of a batch is buffered */
    PyObject *r = NULL;
    if (ms != self->pumped || self->buf_bytes == size) {
        self->pumped = ms;
        r = PyObject_CallMethodOneArg((PyObject *)self, str_pump, Py_True);
    }
    else if (self->buf_bytes >= self->pump_at) {
        r = PyObject_CallMethodOneArg((PyObject *)self, str_pump, Py_False);
    }
    else {
        r = Py_NewRef(Py_None);
    }
    if (r == NULL)
        return NULL;
    Py_DECREF(r);
    if (!self->armed) {
        r = PyObject_CallMethodNoArgs((PyObject *)self, str_arm);
        if (r == NULL)
            return NULL;
        Py_DECREF(r);
    }
    Py_RETURN_NONE;
}

static PyMethodDef fw_methods[] = {
    {"write", (PyCFunction)(void (*)(void))fw_write, METH_FASTCALL | METH_KEYWORDS,
     "write(data, *, key=None, headers=None, seq_no=None, created_at=None, deliver_at=None, "
     "deliver_after=None, timeout=None): the common call in C, the rest by _write_py"},
    {NULL, NULL, 0, NULL},
};

static PyMemberDef fw_members[] = {
    {"_buf_bytes", T_PYSSIZET, offsetof(FastWrite, buf_bytes), 0, NULL},
    {"_unacked", T_PYSSIZET, offsetof(FastWrite, unacked), 0, NULL},
    {"_unacked_bytes", T_PYSSIZET, offsetof(FastWrite, unacked_bytes), 0, NULL},
    {"_written", T_PYSSIZET, offsetof(FastWrite, written), 0, NULL},
    {"_max_n", T_PYSSIZET, offsetof(FastWrite, max_n), 0, NULL},
    {"_max_b", T_PYSSIZET, offsetof(FastWrite, max_b), 0, NULL},
    {"_pump_at", T_PYSSIZET, offsetof(FastWrite, pump_at), 0, NULL},
    {"_pumped", T_LONGLONG, offsetof(FastWrite, pumped), 0, NULL},
    {"_fast", T_BOOL, offsetof(FastWrite, fast), 0, NULL},
    {"_armed", T_BOOL, offsetof(FastWrite, armed), 0, NULL},
    {"_buf", T_OBJECT_EX, offsetof(FastWrite, buf), 0, NULL},
    {"_lock", T_OBJECT_EX, offsetof(FastWrite, lock), 0, NULL},
    {NULL, 0, 0, 0, NULL},
};

static PyTypeObject FastWriteType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "weir.client._write_fast.FastWrite",
    .tp_basicsize = sizeof(FastWrite),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "The writer's buffer counters in C and its common write() (see the module).",
    .tp_new = PyType_GenericNew,
    .tp_dealloc = (destructor)fw_dealloc,
    .tp_traverse = (traverseproc)fw_traverse,
    .tp_clear = (inquiry)fw_clear,
    .tp_methods = fw_methods,
    .tp_members = fw_members,
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "weir.client._write_fast",
    "The compiled common write() of the caller-driven TCP writer.", -1, NULL,
};

PyMODINIT_FUNC
PyInit__write_fast(void)
{
#define INTERN(var, s)                                \
    if ((var = PyUnicode_InternFromString(s)) == NULL) \
        return NULL;
    INTERN(str_write_py, "_write_py");
    INTERN(str_pump, "_pump");
    INTERN(str_arm, "_arm");
    INTERN(str_locked, "locked");
    INTERN(str_limit, "limit");
    INTERN(str_bytes, "bytes");
    INTERN(str_data, "data");
    INTERN(str_created, "created");
#undef INTERN
    if (PyType_Ready(&FastWriteType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    if (PyModule_AddObjectRef(m, "FastWrite", (PyObject *)&FastWriteType) < 0 ||
        PyModule_AddStringConstant(m, "SOURCE_SHA256", WEIR_WRITE_FAST_SOURCE) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
