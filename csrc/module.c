/* aiosendfile._core_c: argument parsing, GIL release and results for the C core. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <limits.h>

#include "asf_cached.h"
#include "asf_errors.h"
#include "asf_open.h"
#include "asf_pump.h"
#include "asf_residency.h"
#include "asf_sendfile.h"
#include "asf_splice.h"

typedef struct {
    int given;      /* 0 when the argument is None */
    off_t value;
} optional_offset;

/* None, or an int that fits off_t (64-bit offsets); `name` is for the errors. */
static int parse_optional_position(PyObject *obj, const char *name, optional_offset *out)
{
    long long value;

    if (obj == Py_None) {
        out->given = 0;
        return 1;
    }
    if (!PyLong_Check(obj)) {
        PyErr_Format(PyExc_TypeError, "%s must be an int or None, not %.200s",
                     name, Py_TYPE(obj)->tp_name);
        return 0;
    }
    value = PyLong_AsLongLong(obj);
    if (value == -1 && PyErr_Occurred())
        return 0;
    if ((long long)(off_t)value != value) {
        PyErr_Format(PyExc_OverflowError, "%s does not fit in off_t", name);
        return 0;
    }
    out->given = 1;
    out->value = (off_t)value;
    return 1;
}

/* None, or an int >= 0 that fits off_t. */
static int parse_optional_offset(PyObject *obj, const char *name, optional_offset *out)
{
    if (!parse_optional_position(obj, name, out))
        return 0;
    if (out->given && out->value < 0) {
        PyErr_Format(PyExc_ValueError, "%s must be >= 0", name);
        return 0;
    }
    return 1;
}

/* O& converters for the arguments that take None or a file position or length. */
static int convert_offset(PyObject *obj, void *out)
{
    return parse_optional_offset(obj, "offset", out);
}

/* sendfile()'s offset: a negative one is for the kernel to refuse, as pysendfile lets it. */
static int convert_any_offset(PyObject *obj, void *out)
{
    return parse_optional_position(obj, "offset", out);
}

static int convert_count(PyObject *obj, void *out)
{
    return parse_optional_offset(obj, "count", out);
}

/* A C-core step: bytes moved, or -errno with *call naming the system call that failed.
 * It may note results in its request. */
typedef ssize_t (*step_fn)(void *request, const char **call);

static ssize_t sendfile_step(void *request, const char **call)
{
    return asf_sendfile(request, call);
}

static ssize_t cached_step(void *request, const char **call)
{
    return asf_sendfile_cached(request, call);
}

static ssize_t splice_step(void *request, const char **call)
{
    return asf_splice_to_file(request, call);
}

static ssize_t open_step(void *request, const char **call)
{
    return asf_open_cached(request, call);
}

/* Runs `step` with the GIL released; its count as an int, or OSError naming the call. */
static PyObject *run_step(step_fn step, void *request)
{
    ssize_t result;
    const char *call = NULL;

    for (;;) {
        Py_BEGIN_ALLOW_THREADS
        result = step(request, &call);
        Py_END_ALLOW_THREADS
        if (result != -EINTR)
            break;
        /* PEP 475: run signal handlers, then retry unless one raised. */
        if (PyErr_CheckSignals() < 0)
            return NULL;
    }
    if (result < 0)
        return asf_raise_errno((int)-result, call);
    return PyLong_FromSsize_t(result);
}

PyDoc_STRVAR(sendfile_doc,
"sendfile(out, in_, offset, nbytes, header=b\"\", trailer=b\"\", flags=0, cork=False) -> int\n\
\n\
One non-blocking step: write header, then up to nbytes bytes of in_ from\n\
offset with sendfile(2), then trailer once all nbytes file bytes have gone in\n\
this call. Loops in C until done, end of file, the socket would block, or a\n\
call comes back short (on a blocking socket, a signal: its handler runs as\n\
this returns, and the caller resumes from the count).\n\
\n\
out and in_ are file descriptors. offset None reads from (and advances)\n\
in_'s own position. Returns the bytes written (header + file + trailer, in\n\
that order); 0 at end of file. Raises OSError with the kernel's errno\n\
(BlockingIOError for EAGAIN) only when nothing could be written, its message\n\
naming the call that failed: \"sendfile: Broken pipe\" (send or write for\n\
header and trailer). After a partial write the error comes back on the next\n\
call. A negative offset or nbytes is sendfile(2)'s EINVAL, raised before\n\
anything is written. The header is sent with MSG_MORE so it shares a segment with the\n\
file's first bytes. SIGPIPE raised by these calls is swallowed; the\n\
process's disposition is not changed. flags is accepted for pysendfile\n\
compatibility and ignored on Linux. With cork true and out a TCP socket\n\
that is not corked already, the step holds TCP_CORK and releases it at the\n\
end, so the bytes leave in full-sized segments and the last partial one at\n\
once; a socket the caller corked stays corked. The GIL is released around\n\
the system calls.");

/* One step of sendfile() once its arguments are parsed; the caller releases the buffers. */
static PyObject *sendfile_parsed(int out_fd, int in_fd, optional_offset *offset,
                                 Py_ssize_t nbytes, const Py_buffer *header,
                                 const Py_buffer *trailer, int cork)
{
    asf_request req;

    /* sendfile(2) refuses a negative offset or count with EINVAL (pysendfile passes
     * both through to it): the same error, raised before anything is written. */
    if ((offset->given && offset->value < 0) || nbytes < 0)
        return asf_raise_errno(EINVAL, "sendfile");

    req.out_fd = out_fd;
    req.in_fd = in_fd;
    req.offset = offset->given ? &offset->value : NULL;
    req.nbytes = (size_t)nbytes;
    req.header = header->buf;
    req.header_len = header->buf ? (size_t)header->len : 0;
    req.trailer = trailer->buf;
    req.trailer_len = trailer->buf ? (size_t)trailer->len : 0;
    req.cork = cork;
    return run_step(sendfile_step, &req);
}

/* Every call the fast path below does not take: PyArg_ParseTupleAndKeywords sets
 * every error, so the messages are the same whichever way a call comes in. */
static PyObject *core_sendfile_args(PyObject *self, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"out", "in_", "offset", "nbytes", "header",
                             "trailer", "flags", "cork", NULL};
    int out_fd, in_fd, flags = 0, cork = 0;
    optional_offset offset = {0, 0};
    Py_ssize_t nbytes;
    Py_buffer header, trailer;
    PyObject *ret;

    (void)self;
    header.buf = NULL;  /* y* leaves an omitted buffer untouched */
    trailer.buf = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "iiO&n|y*y*ip:sendfile",
                                     kwlist, &out_fd, &in_fd, convert_any_offset,
                                     &offset, &nbytes, &header, &trailer,
                                     &flags, &cork))
        return NULL;
    (void)flags;
    ret = sendfile_parsed(out_fd, in_fd, &offset, nbytes, &header, &trailer, cork);
    if (header.buf)
        PyBuffer_Release(&header);
    if (trailer.buf)
        PyBuffer_Release(&trailer);
    return ret;
}

/* --- the fast path: the engine calls these once per step or response --- */

/* A call with positional arguments only, re-made as a tuple for a keyword parser. */
static PyObject *call_with_tuple(PyObject *(*parse)(PyObject *, PyObject *, PyObject *),
                                 PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                                 PyObject *kwnames)
{
    Py_ssize_t i, nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    PyObject *tuple, *kwargs = NULL, *ret = NULL;

    tuple = PyTuple_New(nargs);
    if (tuple == NULL)
        return NULL;
    for (i = 0; i < nargs; i++)
        PyTuple_SET_ITEM(tuple, i, Py_NewRef(args[i]));
    if (nkw) {
        kwargs = PyDict_New();
        if (kwargs == NULL)
            goto done;
        for (i = 0; i < nkw; i++)
            if (PyDict_SetItem(kwargs, PyTuple_GET_ITEM(kwnames, i), args[nargs + i]) < 0)
                goto done;
    }
    ret = parse(self, tuple, kwargs);
done:
    Py_DECREF(tuple);
    Py_XDECREF(kwargs);
    return ret;
}

/* An exact int that fits a Py_ssize_t (or a C int); 0, with no error set, for
 * anything else, which the keyword parser then meets and reports. */
static int fast_ssize(PyObject *obj, Py_ssize_t *out)
{
    int overflow;
    long long value;

    if (!PyLong_CheckExact(obj))
        return 0;
    value = PyLong_AsLongLongAndOverflow(obj, &overflow);
    if (overflow || value < PY_SSIZE_T_MIN || value > PY_SSIZE_T_MAX)
        return 0;
    *out = (Py_ssize_t)value;
    return 1;
}

static int fast_int(PyObject *obj, int *out)
{
    Py_ssize_t value;

    if (!fast_ssize(obj, &value) || value < INT_MIN || value > INT_MAX)
        return 0;
    *out = (int)value;
    return 1;
}

/* bytes or a C-contiguous memoryview, as y* takes them; 0 with no error otherwise. */
static int fast_buffer(PyObject *obj, Py_buffer *view)
{
    if (!PyBytes_CheckExact(obj) &&
        !(PyMemoryView_Check(obj) && PyBuffer_IsContiguous(PyMemoryView_GET_BUFFER(obj), 'C')))
        return 0;
    if (PyObject_GetBuffer(obj, view, PyBUF_SIMPLE) < 0) {
        PyErr_Clear();  /* a released memoryview: the keyword parser says so */
        view->buf = NULL;
        return 0;
    }
    return 1;
}

static PyObject *core_sendfile(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                               PyObject *kwnames)
{
    int out_fd, in_fd, flags = 0;
    optional_offset offset = {0, 0};
    Py_ssize_t nbytes;
    Py_buffer header, trailer;
    PyObject *ret;

    header.buf = NULL;
    trailer.buf = NULL;
    if (kwnames != NULL || nargs < 4 || nargs > 8 || !fast_int(args[0], &out_fd) ||
        !fast_int(args[1], &in_fd) || !(args[2] == Py_None || PyLong_CheckExact(args[2])) ||
        !fast_ssize(args[3], &nbytes) || (nargs > 6 && !fast_int(args[6], &flags)) ||
        (nargs > 7 && !PyBool_Check(args[7])))
        return call_with_tuple(core_sendfile_args, self, args, nargs, kwnames);
    if ((nargs > 4 && !fast_buffer(args[4], &header)) ||
        (nargs > 5 && !fast_buffer(args[5], &trailer))) {
        if (header.buf)
            PyBuffer_Release(&header);
        return call_with_tuple(core_sendfile_args, self, args, nargs, kwnames);
    }
    if (!convert_any_offset(args[2], &offset))
        ret = NULL;
    else
        ret = sendfile_parsed(out_fd, in_fd, &offset, nbytes, &header, &trailer,
                              nargs > 7 && args[7] == Py_True);
    if (header.buf)
        PyBuffer_Release(&header);
    if (trailer.buf)
        PyBuffer_Release(&trailer);
    return ret;
}

PyDoc_STRVAR(sendfile_cached_doc,
"sendfile_cached(out, in_, offset, count, header=b\"\", max_bytes=131072)\n\
    -> (nbytes, written) or None\n\
\n\
A whole small response in one call, for send()'s quick path. With a count\n\
above 0, the nbytes are count (no fstat: a file shorter than count comes back\n\
short); otherwise in_ must be a regular file that reports its size (fstat),\n\
offset not past its end, and nbytes the rest of the file (count 0: none). nbytes\n\
must be at most max_bytes, every one of them in the page cache (cachestat).\n\
Then it is one sendfile() step of header + those nbytes, and the result is\n\
nbytes and the step's count; otherwise None, having written nothing. OSError\n\
as sendfile(). The GIL is released around the system calls.");

/* One call of sendfile_cached() once its arguments are parsed. */
static PyObject *sendfile_cached_parsed(int out_fd, int in_fd, optional_offset *offset,
                                        const optional_offset *count,
                                        const Py_buffer *header, Py_ssize_t max_bytes)
{
    asf_cached_request req;
    PyObject *written, *owed, *ret;

    if (!offset->given) {
        PyErr_SetString(PyExc_TypeError, "offset must be an int");
        return NULL;
    }
    if (max_bytes < 0) {
        PyErr_SetString(PyExc_ValueError, "max_bytes must be >= 0");
        return NULL;
    }

    req.send.out_fd = out_fd;
    req.send.in_fd = in_fd;
    req.send.offset = &offset->value;
    req.send.nbytes = 0;
    req.send.header = header->buf;
    req.send.header_len = header->buf ? (size_t)header->len : 0;
    req.send.trailer = NULL;
    req.send.trailer_len = 0;
    req.send.cork = 0;  /* small: the cork's two calls cost more than they save */
    req.count = count->given ? (long long)count->value : -1;
    req.max_bytes = (size_t)max_bytes;

    written = run_step(cached_step, &req);
    if (written == NULL)
        return NULL;
    if (!req.taken) {
        Py_DECREF(written);
        return Py_NewRef(Py_None);
    }
    owed = PyLong_FromSsize_t((Py_ssize_t)req.send.nbytes);
    ret = owed ? PyTuple_New(2) : NULL;
    if (ret == NULL) {
        Py_XDECREF(owed);
        Py_DECREF(written);
        return NULL;
    }
    PyTuple_SET_ITEM(ret, 0, owed);
    PyTuple_SET_ITEM(ret, 1, written);
    return ret;
}

static PyObject *core_sendfile_cached_args(PyObject *self, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"out", "in_", "offset", "count", "header",
                             "max_bytes", NULL};
    int out_fd, in_fd;
    optional_offset offset = {0, 0}, count = {0, 0};
    Py_ssize_t max_bytes = 128 * 1024;
    Py_buffer header;
    PyObject *ret;

    (void)self;
    header.buf = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "iiO&O&|y*n:sendfile_cached",
                                     kwlist, &out_fd, &in_fd, convert_offset,
                                     &offset, convert_count, &count, &header,
                                     &max_bytes))
        return NULL;
    ret = sendfile_cached_parsed(out_fd, in_fd, &offset, &count, &header, max_bytes);
    if (header.buf)
        PyBuffer_Release(&header);
    return ret;
}

static PyObject *core_sendfile_cached(PyObject *self, PyObject *const *args,
                                      Py_ssize_t nargs, PyObject *kwnames)
{
    int out_fd, in_fd;
    optional_offset offset = {0, 0}, count = {0, 0};
    Py_ssize_t max_bytes = 128 * 1024;
    Py_buffer header;
    PyObject *ret;

    header.buf = NULL;
    if (kwnames != NULL || nargs < 4 || nargs > 6 || !fast_int(args[0], &out_fd) ||
        !fast_int(args[1], &in_fd) || !PyLong_CheckExact(args[2]) ||
        !(args[3] == Py_None || PyLong_CheckExact(args[3])) ||
        (nargs > 5 && !fast_ssize(args[5], &max_bytes)) ||
        (nargs > 4 && !fast_buffer(args[4], &header)))
        return call_with_tuple(core_sendfile_cached_args, self, args, nargs, kwnames);
    if (!convert_offset(args[2], &offset) || !convert_count(args[3], &count))
        ret = NULL;
    else
        ret = sendfile_cached_parsed(out_fd, in_fd, &offset, &count, &header, max_bytes);
    if (header.buf)
        PyBuffer_Release(&header);
    return ret;
}

PyDoc_STRVAR(resident_doc,
"resident(fd, offset, nbytes) -> int\n\
\n\
How many bytes of fd from offset (at most nbytes, and at most 16 MiB per\n\
call) are in the page cache, in whole pages, stopping at the first page that\n\
is not: what sendfile(2) can send without waiting for a disk. One\n\
cachestat(2) call when the whole range is cached (Linux >= 6.5), mincore(2)\n\
on a mapping otherwise. Raises OSError when the kernel cannot tell (a file\n\
that cannot be mapped, such as procfs, on a kernel without cachestat), its\n\
message naming mmap or mincore.");

static PyObject *core_resident(PyObject *self, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"fd", "offset", "nbytes", NULL};
    int fd;
    optional_offset offset = {0, 0};
    Py_ssize_t nbytes;
    ssize_t result;
    const char *call = NULL;

    (void)self;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "iO&n:resident", kwlist, &fd,
                                     convert_offset, &offset, &nbytes))
        return NULL;
    if (!offset.given) {
        PyErr_SetString(PyExc_TypeError, "offset must be an int");
        return NULL;
    }
    if (nbytes < 0) {
        PyErr_SetString(PyExc_ValueError, "nbytes must be >= 0");
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    result = asf_resident_bytes(fd, offset.value, (size_t)nbytes, &call);
    Py_END_ALLOW_THREADS
    if (result < 0)
        return asf_raise_errno((int)-result, call);
    return PyLong_FromSsize_t(result);
}

PyDoc_STRVAR(splice_to_file_doc,
"splice_to_file(sock, pipe_r, pipe_w, file, offset, nbytes) -> int\n\
\n\
Moves up to nbytes from socket sock to file with splice(2), socket -> pipe\n\
-> file, the bytes never in user space. Loops in C until nbytes are written,\n\
the socket would block, or it reaches end of stream; never takes more than\n\
nbytes from the socket. offset None writes at (and advances) file's own\n\
position. The pipe (pipe_r, pipe_w) must be O_NONBLOCK and private to the\n\
transfer.\n\
\n\
Returns the bytes written to the file; 0 at end of stream. Raises OSError\n\
with the kernel's errno (BlockingIOError for EAGAIN: nothing to read yet)\n\
only when nothing was written, its message naming the call (splice, or ioctl\n\
for the pipe's count); after a partial write the error comes back on\n\
the next call. A file-side error (ENOSPC, EFBIG) leaves in the pipe the bytes\n\
the file refused: they have left the socket, and the next call with the same\n\
pipe writes them first; a caller that gives up must read them out or close\n\
the pipe. Linux only (ENOSYS elsewhere). The GIL is released around the\n\
system calls.");

static PyObject *core_splice_to_file(PyObject *self, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"sock", "pipe_r", "pipe_w", "file", "offset",
                             "nbytes", NULL};
    int sock_fd, pipe_r, pipe_w, file_fd;
    optional_offset offset = {0, 0};
    Py_ssize_t nbytes;
    asf_splice_request req;

    (void)self;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "iiiiO&n:splice_to_file",
                                     kwlist, &sock_fd, &pipe_r, &pipe_w,
                                     &file_fd, convert_offset, &offset,
                                     &nbytes))
        return NULL;
    if (nbytes < 0) {
        PyErr_SetString(PyExc_ValueError, "nbytes must be >= 0");
        return NULL;
    }

    req.sock_fd = sock_fd;
    req.pipe_r = pipe_r;
    req.pipe_w = pipe_w;
    req.file_fd = file_fd;
    req.offset = offset.given ? &offset.value : NULL;
    req.nbytes = (size_t)nbytes;

    return run_step(splice_step, &req);
}

PyDoc_STRVAR(open_cached_doc,
"open_cached(path, flags) -> int\n\
\n\
Opens path (str, bytes or os.PathLike) with openat2(2) and RESOLVE_CACHED:\n\
only if every component is in the dentry cache, so the call never waits for\n\
a disk, a FUSE daemon or a server to resolve it. The directory is resolved\n\
first, then the last component from it with RESOLVE_NO_XDEV: the file is on\n\
its directory's filesystem (a symlink or bind mount leading elsewhere is\n\
refused). Returns the descriptor, non-inheritable as os.open's. Raises\n\
OSError naming openat2: BlockingIOError (EAGAIN) when a component is not\n\
cached or flags ask for more than a lookup (O_CREAT, O_TRUNC), EXDEV for a\n\
file on another mount, ENOSYS or EINVAL on kernels before 5.12. The\n\
filesystem's own open is called as by open(2). The GIL is released around\n\
the system calls.");

static PyObject *core_open_cached(PyObject *self, PyObject *args, PyObject *kwargs)
{
    static char *kwlist[] = {"path", "flags", NULL};
    PyObject *path;
    int flags;
    asf_open_request req;
    PyObject *ret;

    (void)self;
    if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O&i:open_cached", kwlist,
                                     PyUnicode_FSConverter, &path, &flags))
        return NULL;
    req.path = PyBytes_AS_STRING(path);
    req.flags = flags;  /* PyUnicode_FSConverter refused embedded null bytes */
    ret = run_step(open_step, &req);
    Py_DECREF(path);
    return ret;
}


/* --- the pump: one per event loop (aiosendfile/_sending/pump.py) --- */

typedef struct {
    asf_pump_transfer t;
    PyObject *header;       /* bytes: the transfer's pointers point into them */
    PyObject *trailer;
    PyObject *queued;       /* None, or a callable: the bytes the transport holds */
    int used;
    int report;             /* look after every wake that moved bytes (progress) */
} pump_slot;

typedef struct {
    PyObject_HEAD
    int epfd;
    size_t budget, min_share, window;
    pump_slot *slots;
    Py_ssize_t nslots, used;
    int running;            /* run() has released the GIL: no other call now */
} PumpObject;

static void pump_free_slot(pump_slot *slot)
{
    Py_CLEAR(slot->header);
    Py_CLEAR(slot->trailer);
    Py_CLEAR(slot->queued);
    slot->used = 0;
}

static int pump_check(PumpObject *self)
{
    if (self->epfd < 0) {
        PyErr_SetString(PyExc_ValueError, "the pump is closed");
        return 0;
    }
    if (self->running) {
        PyErr_SetString(PyExc_RuntimeError, "the pump is running in another thread");
        return 0;
    }
    return 1;
}

static PyObject *pump_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    static char *keywords[] = {"budget", "min_share", "window", NULL};
    Py_ssize_t budget, min_share, window;
    PumpObject *self;
    int fd;

    if (!PyArg_ParseTupleAndKeywords(args, kwds, "nnn:Pump", keywords, &budget, &min_share,
                                     &window))
        return NULL;
    if (budget <= 0 || min_share <= 0 || window <= 0) {
        PyErr_SetString(PyExc_ValueError, "budget, min_share and window must be > 0");
        return NULL;
    }
    fd = asf_pump_open();
    if (fd < 0)
        return asf_raise_errno(-fd, "epoll_create1");
    self = (PumpObject *)type->tp_alloc(type, 0);
    if (self == NULL) {
        close(fd);
        return NULL;
    }
    self->epfd = fd;
    self->budget = (size_t)budget;
    self->min_share = (size_t)min_share;
    self->window = (size_t)window;
    return (PyObject *)self;
}

static void pump_release(PumpObject *self)
{
    Py_ssize_t i;

    for (i = 0; i < self->nslots; i++)
        if (self->slots[i].used)
            pump_free_slot(&self->slots[i]);
    PyMem_Free(self->slots);
    self->slots = NULL;
    self->nslots = self->used = 0;
    if (self->epfd >= 0) {
        close(self->epfd);
        self->epfd = -1;
    }
}

static void pump_dealloc(PumpObject *self)
{
    PyTypeObject *type = Py_TYPE(self);

    pump_release(self);
    type->tp_free((PyObject *)self);
    Py_DECREF(type);
}

static PyObject *pump_close(PumpObject *self, PyObject *Py_UNUSED(unused))
{
    if (self->running) {
        PyErr_SetString(PyExc_RuntimeError, "the pump is running in another thread");
        return NULL;
    }
    pump_release(self);
    Py_RETURN_NONE;
}

static PyObject *pump_fileno(PumpObject *self, PyObject *Py_UNUSED(unused))
{
    if (self->epfd < 0) {
        PyErr_SetString(PyExc_ValueError, "the pump is closed");
        return NULL;
    }
    return PyLong_FromLong(self->epfd);
}

/* The state a caller needs of a transfer: (slot, state, position, moved, header_left,
 * trailer_left, cached_until, read_from, errno, call); `moved` is taken. */
static PyObject *pump_report(PumpObject *self, Py_ssize_t index)
{
    asf_pump_transfer *t = &self->slots[index].t;
    size_t moved = t->moved;

    t->moved = 0;
    return Py_BuildValue("(niLnnnLLis)", index, t->state, (long long)t->position,
                         (Py_ssize_t)moved, (Py_ssize_t)t->header_len,
                         (Py_ssize_t)t->trailer_len, (long long)t->cached_until,
                         (long long)t->read_from, t->err, t->call ? t->call : "");
}

PyDoc_STRVAR(pump_add_doc,
"add(out, in_, position, end, cached_until, check_cache, header, trailer, report,\n\
    queued) -> slot\n\
\n\
Puts a transfer in the pump: file bytes position to end of in_ (after what is\n\
owed of header; trailer behind the last byte), to be sent down out whenever it\n\
has room. out must be the transfer's own descriptor: it is watched by the pump's\n\
epoll instance until the transfer leaves. With check_cache, bytes past\n\
cached_until are asked of the page cache first. With report, run() names the\n\
slot after every wake that moved bytes. queued, None or a callable returning the\n\
bytes the socket's transport holds, is called before each step: if it holds\n\
some (or the call fails), the transfer leaves, QUEUED, and nothing is sent.");

static PyObject *pump_add(PumpObject *self, PyObject *args)
{
    int out_fd, in_fd, check_cache, report, err;
    long long position, end, cached_until;
    PyObject *header, *trailer, *queued;
    Py_ssize_t index;
    pump_slot *slot;

    if (!PyArg_ParseTuple(args, "iiLLLpSSpO:add", &out_fd, &in_fd, &position, &end,
                          &cached_until, &check_cache, &header, &trailer, &report, &queued))
        return NULL;
    if (queued != Py_None && !PyCallable_Check(queued)) {
        PyErr_SetString(PyExc_TypeError, "add: queued must be None or callable");
        return NULL;
    }
    if (!pump_check(self))
        return NULL;
    if (position < 0 || end < position) {
        PyErr_SetString(PyExc_ValueError, "add: 0 <= position <= end");
        return NULL;
    }
    for (index = 0; index < self->nslots && self->slots[index].used; index++)
        ;
    if (index == self->nslots) {
        Py_ssize_t grown = self->nslots ? self->nslots * 2 : 16;
        pump_slot *slots = PyMem_Realloc(self->slots, (size_t)grown * sizeof(pump_slot));

        if (slots == NULL)
            return PyErr_NoMemory();
        memset(slots + self->nslots, 0, (size_t)(grown - self->nslots) * sizeof(pump_slot));
        self->slots = slots;
        self->nslots = grown;
    }
    err = asf_pump_watch(self->epfd, out_fd, (uint64_t)index);
    if (err < 0)
        return asf_raise_errno(-err, "epoll_ctl");
    slot = &self->slots[index];
    memset(&slot->t, 0, sizeof(slot->t));
    slot->t.out_fd = out_fd;
    slot->t.in_fd = in_fd;
    slot->t.position = (off_t)position;
    slot->t.end = (off_t)end;
    slot->t.cached_until = (off_t)cached_until;
    slot->t.check_cache = check_cache;
    slot->t.header = PyBytes_AS_STRING(header);
    slot->t.header_len = (size_t)PyBytes_GET_SIZE(header);
    slot->t.trailer = PyBytes_AS_STRING(trailer);
    slot->t.trailer_len = (size_t)PyBytes_GET_SIZE(trailer);
    slot->t.state = ASF_PUMP_SENDING;
    slot->t.read_from = -1;
    slot->header = Py_NewRef(header);
    slot->trailer = Py_NewRef(trailer);
    slot->queued = queued == Py_None ? NULL : Py_NewRef(queued);
    slot->report = report;
    slot->used = 1;
    self->used++;
    return PyLong_FromSsize_t(index);
}

static pump_slot *pump_slot_arg(PumpObject *self, PyObject *arg, Py_ssize_t *index)
{
    *index = PyLong_AsSsize_t(arg);
    if (*index == -1 && PyErr_Occurred())
        return NULL;
    if (*index < 0 || *index >= self->nslots || !self->slots[*index].used) {
        PyErr_Format(PyExc_KeyError, "no transfer in slot %zd", *index);
        return NULL;
    }
    return &self->slots[*index];
}

PyDoc_STRVAR(pump_extend_doc,
"extend(slot, cached_until) -> None\n\
\n\
The bytes before cached_until are in the page cache now (read in by a worker).");

static PyObject *pump_extend(PumpObject *self, PyObject *args)
{
    PyObject *which;
    long long cached_until;
    Py_ssize_t index;
    pump_slot *slot;

    if (!PyArg_ParseTuple(args, "OL:extend", &which, &cached_until) || !pump_check(self))
        return NULL;
    slot = pump_slot_arg(self, which, &index);
    if (slot == NULL)
        return NULL;
    if ((off_t)cached_until > slot->t.cached_until)
        slot->t.cached_until = (off_t)cached_until;
    Py_RETURN_NONE;
}

PyDoc_STRVAR(pump_remove_doc,
"remove(slot) -> (slot, state, position, moved, header_left, trailer_left,\n\
    cached_until, read_from, errno, call)\n\
\n\
Takes the transfer out of the pump (its socket no longer watched) and returns its\n\
state, as run() reports it.");

static PyObject *pump_remove(PumpObject *self, PyObject *which)
{
    Py_ssize_t index;
    pump_slot *slot;
    PyObject *report;
    int err;

    if (!pump_check(self))
        return NULL;
    slot = pump_slot_arg(self, which, &index);
    if (slot == NULL)
        return NULL;
    err = asf_pump_unwatch(self->epfd, slot->t.out_fd);
    report = pump_report(self, index);
    pump_free_slot(slot);
    self->used--;
    if (report != NULL && err < 0) {
        Py_DECREF(report);
        return asf_raise_errno(-err, "epoll_ctl");
    }
    return report;
}

PyDoc_STRVAR(pump_run_doc,
"run() -> (ready, [(slot, state, position, moved, header_left, trailer_left,\n\
    cached_until, read_from, errno, call), ...])\n\
\n\
Steps every transfer whose socket has room now, each at most its share of the\n\
budget (the budget split between them, at least min_share), with the GIL\n\
released and one SIGPIPE guard for all the steps. Returns how many were ready,\n\
and the transfers to look at: those that left the pump (done, short, cold, failed: no longer watched, the\n\
slot free), those whose bytes past read_from must be read in, and with report\n\
those that moved bytes.");

static PyObject *pump_run(PumpObject *self, PyObject *Py_UNUSED(unused))
{
    uint64_t keys[256];
    int ready, i, look[256];
    size_t share;
    asf_sigpipe_guard guard;
    PyObject *found, *item, *result;

    if (!pump_check(self))
        return NULL;
    self->running = 1;
    Py_BEGIN_ALLOW_THREADS
    ready = asf_pump_ready(self->epfd, keys, 256);
    Py_END_ALLOW_THREADS
    if (ready < 0) {
        self->running = 0;
        return asf_raise_errno(-ready, "epoll_wait");
    }
    /* Bytes the transport queued itself go first, or were written around the send
     * (a uvloop transport cannot refuse a write): either way, not ours to step now. */
    for (i = 0; i < ready; i++) {
        pump_slot *slot = &self->slots[keys[i]];
        PyObject *held;

        look[i] = 0;
        if (slot->queued == NULL)
            continue;
        held = PyObject_CallNoArgs(slot->queued);
        if (held == NULL)
            PyErr_Clear();  /* the transport is broken: its owner meets the error */
        if (held == NULL || PyObject_IsTrue(held) != 0) {
            PyErr_Clear();
            slot->t.state = ASF_PUMP_QUEUED;
            look[i] = 1;
        }
        Py_XDECREF(held);
    }
    Py_BEGIN_ALLOW_THREADS
    if (ready > 0) {
        share = self->budget / (size_t)ready;
        if (share < self->min_share)
            share = self->min_share;
        asf_sigpipe_block(&guard);
        for (i = 0; i < ready; i++) {
            pump_slot *slot = &self->slots[keys[i]];

            if (slot->t.state == ASF_PUMP_SENDING)
                look[i] = asf_pump_step(&slot->t, share, self->window);
            if (slot->t.state != ASF_PUMP_SENDING)
                (void)asf_pump_unwatch(self->epfd, slot->t.out_fd);
            else if (slot->report && slot->t.moved)
                look[i] = 1;
        }
        asf_sigpipe_restore(&guard);
    }
    Py_END_ALLOW_THREADS
    self->running = 0;
    found = PyList_New(0);
    if (found == NULL)
        return NULL;
    for (i = 0; i < ready; i++) {
        pump_slot *slot = &self->slots[keys[i]];

        if (!look[i])
            continue;
        item = pump_report(self, (Py_ssize_t)keys[i]);
        if (item == NULL || PyList_Append(found, item) < 0) {
            Py_XDECREF(item);
            Py_DECREF(found);
            return NULL;
        }
        Py_DECREF(item);
        if (slot->t.state != ASF_PUMP_SENDING) {
            pump_free_slot(slot);
            self->used--;
        }
    }
    result = Py_BuildValue("(iN)", ready, found);
    return result;
}

static PyObject *pump_len(PumpObject *self, PyObject *Py_UNUSED(unused))
{
    return PyLong_FromSsize_t(self->used);
}

static PyMethodDef pump_methods[] = {
    {"fileno", (PyCFunction)pump_fileno, METH_NOARGS, "The epoll instance, for the loop to watch."},
    {"add", (PyCFunction)pump_add, METH_VARARGS, pump_add_doc},
    {"extend", (PyCFunction)pump_extend, METH_VARARGS, pump_extend_doc},
    {"remove", (PyCFunction)pump_remove, METH_O, pump_remove_doc},
    {"run", (PyCFunction)pump_run, METH_NOARGS, pump_run_doc},
    {"close", (PyCFunction)pump_close, METH_NOARGS, "Closes the epoll instance; drops every transfer."},
    {"count", (PyCFunction)pump_len, METH_NOARGS, "How many transfers are in the pump."},
    {NULL, NULL, 0, NULL},
};

PyDoc_STRVAR(pump_doc,
"Pump(budget, min_share, window)\n\
\n\
One event loop's zero-copy transfers: an epoll instance watching each one's\n\
socket for room, and run() sending to every socket that has some, in C. The\n\
loop watches fileno() for reading (it is readable while a socket has room).");

static PyType_Slot pump_type_slots[] = {
    {Py_tp_new, pump_new},
    {Py_tp_dealloc, pump_dealloc},
    {Py_tp_methods, pump_methods},
    {Py_tp_doc, (void *)pump_doc},
    {0, NULL},
};

static PyType_Spec pump_type_spec = {
    .name = "aiosendfile._core_c.Pump",
    .basicsize = sizeof(PumpObject),
    .flags = Py_TPFLAGS_DEFAULT,
    .slots = pump_type_slots,
};

static int core_exec(PyObject *module)
{
    PyObject *type = PyType_FromModuleAndSpec(module, &pump_type_spec, NULL);
    int err;

    if (type == NULL)
        return -1;
    err = PyModule_AddObjectRef(module, "Pump", type);
    Py_DECREF(type);
    return err;
}

static PyMethodDef core_methods[] = {
    {"sendfile", (PyCFunction)(void (*)(void))core_sendfile,
     METH_FASTCALL | METH_KEYWORDS, sendfile_doc},
    {"sendfile_cached", (PyCFunction)(void (*)(void))core_sendfile_cached,
     METH_FASTCALL | METH_KEYWORDS, sendfile_cached_doc},
    {"resident", (PyCFunction)(void (*)(void))core_resident,
     METH_VARARGS | METH_KEYWORDS, resident_doc},
    {"splice_to_file", (PyCFunction)(void (*)(void))core_splice_to_file,
     METH_VARARGS | METH_KEYWORDS, splice_to_file_doc},
    {"open_cached", (PyCFunction)(void (*)(void))core_open_cached,
     METH_VARARGS | METH_KEYWORDS, open_cached_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef_Slot core_slots[] = {
    {Py_mod_exec, core_exec},
#if PY_VERSION_HEX >= 0x030C0000
    {Py_mod_multiple_interpreters, Py_MOD_PER_INTERPRETER_GIL_SUPPORTED},
#endif
#if PY_VERSION_HEX >= 0x030D0000
    {Py_mod_gil, Py_MOD_GIL_NOT_USED},
#endif
    {0, NULL},
};

static struct PyModuleDef core_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "aiosendfile._core_c",
    .m_doc = "The C core of aiosendfile: sendfile(2) steps on plain file descriptors.",
    .m_size = 0,
    .m_methods = core_methods,
    .m_slots = core_slots,
};

PyMODINIT_FUNC PyInit__core_c(void)
{
    return PyModuleDef_Init(&core_module);
}
