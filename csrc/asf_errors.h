#ifndef ASF_ERRORS_H
#define ASF_ERRORS_H

#include <Python.h>

/* Sets OSError (or the subclass the errno maps to) and returns NULL. */
PyObject *asf_raise_errno(int err);

#endif /* ASF_ERRORS_H */
