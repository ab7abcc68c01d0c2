#ifndef ASF_ERRORS_H
#define ASF_ERRORS_H

#include <Python.h>

/*
 * Sets OSError(err, "<call>: <strerror>"), e.g. [Errno 32] "sendfile: Broken
 * pipe", and returns NULL.  The errno stays the kernel's and picks the subclass
 * as PyErr_SetFromErrno does (BlockingIOError for EAGAIN, BrokenPipeError for
 * EPIPE...); only the text names the system call that failed (NULL: strerror
 * alone, as PyErr_SetFromErrno's).
 */
PyObject *asf_raise_errno(int err, const char *call);

#endif /* ASF_ERRORS_H */
