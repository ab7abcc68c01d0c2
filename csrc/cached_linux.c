/* The quick path's step: fstat(2) (unless the caller gave the count), cachestat(2)
 * and the zero-copy step in one call.
 *
 * A small response costs send() more in Python than in the kernel; doing the
 * checks here saves the Python objects and calls they would take there. */
#include "asf_cached.h"

#include <sys/stat.h>

#include "asf_residency.h"

/* The file bytes a regular file owes from `offset`; -1 when its size is not known
 * or `offset` is past its end. */
static long long bytes_owed(int fd, off_t offset, long long count)
{
    struct stat st;
    long long left;

    /* procfs and sysfs report size 0 for files with content: not known. */
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size <= 0)
        return -1;
    /* Past the end: the general path checks the file can take that position. */
    if (offset > st.st_size)
        return -1;
    left = (long long)(st.st_size - offset);
    return (count >= 0 && count < left) ? count : left;
}

ssize_t asf_sendfile_cached(asf_cached_request *req, const char **call)
{
    /* A count the caller gives (the size it already knows, as an HTTP server's
     * Content-Length) needs no fstat(2): only a page-cache file's pages can be
     * resident, and a file shorter than the count leaves pages past its end that
     * are not, unless they share its last page: then sendfile(2) comes back short,
     * as for a file that shrank. */
    long long owed = req->count > 0 ? req->count
                                    : bytes_owed(req->send.in_fd, *req->send.offset, req->count);
    const char *unknown;  /* residency that cannot be told is a no, not an error */

    req->taken = 0;
    if (owed < 0 || (unsigned long long)owed > req->max_bytes)
        return 0;
    /* The whole range or nothing: a partly cached file goes through the read-ahead. */
    if (owed > 0 &&
        asf_resident_bytes(req->send.in_fd, *req->send.offset, (size_t)owed, &unknown) != owed)
        return 0;
    req->send.nbytes = (size_t)owed;
    req->taken = 1;
    return asf_sendfile(&req->send, call);
}
