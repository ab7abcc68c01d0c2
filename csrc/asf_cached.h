/* The quick path's step: a whole small response from the page cache, in one call. */
#ifndef ASF_CACHED_H
#define ASF_CACHED_H

#include <stddef.h>
#include <sys/types.h>

#include "asf_sendfile.h"

typedef struct {
    asf_request send;       /* offset must be given; nbytes is filled in by the check */
    long long count;        /* file bytes wanted from the offset; -1: to the end of file */
    size_t max_bytes;       /* a longer range is not taken */
    int taken;              /* out: 1 when the range qualified and was sent */
} asf_cached_request;

/*
 * Checks, then sends: with a count above 0, the range [offset, offset + count)
 * must hold at most max_bytes, every one of them in the page cache (a shorter
 * file then comes back short from sendfile(2)); without one (count -1) or with
 * count 0, in_fd must be a regular file that reports a size, the offset must not be
 * past its end, and the range it owes from the offset (count clamped to the end of
 * file) must hold at most max_bytes, every one of them in the page cache.  Then the step
 * is asf_sendfile() of header + that range, and `taken` is set.  Otherwise
 * nothing is written, `taken` stays 0, and the result is 0.
 *
 * Returns what asf_sendfile() returns when taken: bytes written, or -errno
 * when nothing could be written, with *call naming the system call.
 */
ssize_t asf_sendfile_cached(asf_cached_request *req, const char **call);

#endif /* ASF_CACHED_H */
