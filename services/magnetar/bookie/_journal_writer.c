/* The bookie journal's writer thread in C: see journal_writer.py, which says why and holds the
 * pure-Python twin (PyWriter) with the same interface.
 *
 * The thread never touches a Python object, so it never waits for the GIL. The event loop appends
 * records (a memcpy under a mutex); the thread writes everything appended so far with pwrite,
 * fdatasyncs once, publishes the highest durable sequence number and writes to an eventfd the
 * loop watches. After an error it records errno and writes nothing more.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

typedef struct {
    PyObject_HEAD
    pthread_mutex_t mu;
    pthread_cond_t wake;    /* signalled when records are appended or on stop */
    pthread_cond_t drained; /* signalled when a batch is durable */
    pthread_t thread;
    int started;
    int fd;                 /* the segment being written */
    int efd;                /* eventfd: incremented after every synced batch */
    int sync;
    char *buf;              /* appended, not yet taken by the thread */
    size_t len, cap;
    char *spare;            /* the buffer the thread writes from */
    size_t spare_cap;
    uint64_t appended;      /* sequence number of the last appended record */
    uint64_t durable;       /* every record up to this one is written and synced */
    long long offset;       /* where the next batch goes in fd */
    int writing;
    int error;              /* errno of the first failure; the thread stops writing */
    int stop;
} Writer;

static void *run(void *arg) {
    Writer *w = (Writer *)arg;
    pthread_mutex_lock(&w->mu);
    for (;;) {
        while (w->len == 0 && !w->stop)
            pthread_cond_wait(&w->wake, &w->mu);
        if (w->len == 0 && w->stop)
            break;
        char *data = w->buf;
        size_t n = w->len;
        uint64_t seq = w->appended;
        int fd = w->fd;
        long long off = w->offset;
        w->buf = w->spare;
        size_t cap = w->cap;
        w->cap = w->spare_cap;
        w->spare = data;
        w->spare_cap = cap;
        w->len = 0;
        w->writing = 1;
        int failed = w->error;
        pthread_mutex_unlock(&w->mu);

        int err = failed;
        size_t done = 0;
        while (!err && done < n) {
            ssize_t r = pwrite(fd, data + done, n - done, (off_t)(off + (long long)done));
            if (r < 0) {
                if (errno == EINTR)
                    continue;
                err = errno;
            } else if (r == 0) {
                err = EIO;
            } else {
                done += (size_t)r;
            }
        }
        if (!err && w->sync && fdatasync(fd) != 0)
            err = errno;

        pthread_mutex_lock(&w->mu);
        w->writing = 0;
        if (err) {
            if (!w->error)
                w->error = err;
        } else {
            w->durable = seq;
            w->offset = off + (long long)n;
        }
        pthread_cond_broadcast(&w->drained);
        pthread_mutex_unlock(&w->mu);
        uint64_t one = 1;
        ssize_t ignored = write(w->efd, &one, sizeof one);
        (void)ignored;
        pthread_mutex_lock(&w->mu);
    }
    pthread_mutex_unlock(&w->mu);
    return NULL;
}

static int Writer_init(Writer *self, PyObject *args, PyObject *kwds) {
    static char *kwlist[] = {"fd", "offset", "sync", NULL};
    int fd;
    long long offset;
    int sync = 1;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "iL|p", kwlist, &fd, &offset, &sync))
        return -1;
    if (self->started) {
        PyErr_SetString(PyExc_RuntimeError, "writer already started");
        return -1;
    }
    self->fd = fd;
    self->offset = offset;
    self->sync = sync;
    self->cap = self->spare_cap = 1 << 16;
    self->buf = malloc(self->cap);
    self->spare = malloc(self->spare_cap);
    if (!self->buf || !self->spare) {
        PyErr_NoMemory();
        return -1;
    }
    self->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (self->efd < 0) {
        PyErr_SetFromErrno(PyExc_OSError);
        return -1;
    }
    pthread_mutex_init(&self->mu, NULL);
    pthread_cond_init(&self->wake, NULL);
    pthread_cond_init(&self->drained, NULL);
    int rc = pthread_create(&self->thread, NULL, run, self);
    if (rc) {
        errno = rc;
        PyErr_SetFromErrno(PyExc_OSError);
        return -1;
    }
    self->started = 1;
    return 0;
}

/* Stop the thread after it has written what was appended; releases the GIL while waiting. */
static void stop_thread(Writer *self) {
    if (!self->started)
        return;
    pthread_mutex_lock(&self->mu);
    self->stop = 1;
    pthread_cond_signal(&self->wake);
    pthread_mutex_unlock(&self->mu);
    Py_BEGIN_ALLOW_THREADS
    pthread_join(self->thread, NULL);
    Py_END_ALLOW_THREADS
    self->started = 0;
}

static void Writer_dealloc(Writer *self) {
    stop_thread(self);
    if (self->efd >= 0)
        close(self->efd);
    free(self->buf);
    free(self->spare);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *Writer_new(PyTypeObject *type, PyObject *Py_UNUSED(args), PyObject *Py_UNUSED(kwds)) {
    Writer *self = (Writer *)type->tp_alloc(type, 0);
    if (self)
        self->efd = -1;
    return (PyObject *)self;
}

PyDoc_STRVAR(append_doc, "append(data) -> int: queue bytes for the next batch; returns their sequence number.");
static PyObject *Writer_append(Writer *self, PyObject *arg) {
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0)
        return NULL;
    pthread_mutex_lock(&self->mu);
    if (!self->started || self->stop) {
        pthread_mutex_unlock(&self->mu);
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_RuntimeError, "journal writer is closed");
        return NULL;
    }
    size_t need = self->len + (size_t)view.len;
    if (need > self->cap) {
        size_t cap = self->cap;
        while (cap < need)
            cap *= 2;
        char *grown = realloc(self->buf, cap);
        if (!grown) {
            pthread_mutex_unlock(&self->mu);
            PyBuffer_Release(&view);
            return PyErr_NoMemory();
        }
        self->buf = grown;
        self->cap = cap;
    }
    memcpy(self->buf + self->len, view.buf, (size_t)view.len);
    self->len = need;
    uint64_t seq = ++self->appended;
    pthread_cond_signal(&self->wake);
    pthread_mutex_unlock(&self->mu);
    PyBuffer_Release(&view);
    return PyLong_FromUnsignedLongLong(seq);
}

PyDoc_STRVAR(state_doc, "state() -> (durable, error): the last durable sequence number and errno (0: none).");
static PyObject *Writer_state(Writer *self, PyObject *Py_UNUSED(unused)) {
    pthread_mutex_lock(&self->mu);
    uint64_t durable = self->durable;
    int error = self->error;
    pthread_mutex_unlock(&self->mu);
    return Py_BuildValue("(Ki)", (unsigned long long)durable, error);
}

PyDoc_STRVAR(switch_doc, "switch(fd, offset): wait until everything appended is durable, then write to fd from offset.");
static PyObject *Writer_switch(Writer *self, PyObject *args) {
    int fd;
    long long offset;
    if (!PyArg_ParseTuple(args, "iL", &fd, &offset))
        return NULL;
    int error;
    Py_BEGIN_ALLOW_THREADS
    pthread_mutex_lock(&self->mu);
    while ((self->len > 0 || self->writing) && !self->error)
        pthread_cond_wait(&self->drained, &self->mu);
    error = self->error;
    if (!error) {
        self->fd = fd;
        self->offset = offset;
    }
    pthread_mutex_unlock(&self->mu);
    Py_END_ALLOW_THREADS
    if (error) {
        errno = error;
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    Py_RETURN_NONE;
}

PyDoc_STRVAR(close_doc, "close(): write and sync what was appended, stop the thread, close the eventfd.");
static PyObject *Writer_close(Writer *self, PyObject *Py_UNUSED(unused)) {
    stop_thread(self);
    if (self->efd >= 0) {
        close(self->efd);
        self->efd = -1;
    }
    Py_RETURN_NONE;
}

static PyObject *Writer_get_eventfd(Writer *self, void *Py_UNUSED(closure)) { return PyLong_FromLong(self->efd); }

static PyMethodDef Writer_methods[] = {
    {"append", (PyCFunction)Writer_append, METH_O, append_doc},
    {"state", (PyCFunction)Writer_state, METH_NOARGS, state_doc},
    {"switch", (PyCFunction)Writer_switch, METH_VARARGS, switch_doc},
    {"close", (PyCFunction)Writer_close, METH_NOARGS, close_doc},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Writer_getset[] = {
    {"eventfd", (getter)Writer_get_eventfd, NULL, "readable after every synced batch", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject WriterType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "magnetar.bookie._journal_writer.Writer",
    .tp_basicsize = sizeof(Writer),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A thread that appends to a file and fdatasyncs without holding the GIL.",
    .tp_new = Writer_new,
    .tp_init = (initproc)Writer_init,
    .tp_dealloc = (destructor)Writer_dealloc,
    .tp_methods = Writer_methods,
    .tp_getset = Writer_getset,
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_journal_writer", "Journal writer thread without the GIL (journal_writer.py).", -1,
    NULL, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__journal_writer(void) {
    if (PyType_Ready(&WriterType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (!m)
        return NULL;
    Py_INCREF(&WriterType);
    if (PyModule_AddObject(m, "Writer", (PyObject *)&WriterType) < 0) {
        Py_DECREF(&WriterType);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
