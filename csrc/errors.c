/* The only place an errno becomes a Python exception. */
#include "asf_errors.h"

#include <errno.h>
#include <string.h>

PyObject *asf_raise_errno(int err, const char *call)
{
    PyObject *text, *message, *args;

    /* As PyErr_SetFromErrno: a pending signal's handler runs first, and may raise. */
    if (err == EINTR && PyErr_CheckSignals() < 0)
        return NULL;
    /* Decoded as os.strerror() decodes it: the pure-Python core's text is the same. */
    text = PyUnicode_DecodeLocale(strerror(err), "surrogateescape");
    if (text == NULL)
        return NULL;
    message = call ? PyUnicode_FromFormat("%s: %U", call, text) : Py_NewRef(text);
    Py_DECREF(text);
    if (message == NULL)
        return NULL;
    args = Py_BuildValue("(iN)", err, message);
    if (args == NULL)
        return NULL;
    /* Raised as OSError(*args): OSError.__new__ picks the errno's subclass. */
    PyErr_SetObject(PyExc_OSError, args);
    Py_DECREF(args);
    return NULL;
}
