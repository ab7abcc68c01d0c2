/* The only place an errno becomes a Python exception. */
#include "asf_errors.h"

#include <errno.h>

PyObject *asf_raise_errno(int err)
{
    /* PyErr_SetFromErrno picks the subclass: BlockingIOError for EAGAIN,
     * BrokenPipeError for EPIPE, ConnectionResetError for ECONNRESET... */
    errno = err;
    return PyErr_SetFromErrno(PyExc_OSError);
}
