/* Socket to file for Linux: splice(2) socket -> pipe -> file, the bytes never in user space. */
#define _GNU_SOURCE
#include "asf_splice.h"

#include <errno.h>

#ifdef HAVE_SPLICE

#include <fcntl.h>
#include <poll.h>
#include <sys/ioctl.h>

/* Largest count one splice(2) call accepts (the kernel's MAX_RW_COUNT). */
#define ASF_MAX_SPLICE_BYTES ((size_t)0x7ffff000)

/* Writes the pipe's *in_pipe bytes to the file; 0, or -errno with the rest left in the pipe. */
static int drain_pipe(const asf_splice_request *req, size_t *in_pipe, size_t *written)
{
    while (*in_pipe > 0) {
        /* With an offset, splice(2) writes there and advances *offset itself. */
        ssize_t n = splice(req->pipe_r, NULL, req->file_fd, req->offset, *in_pipe,
                           SPLICE_F_MOVE);
        if (n < 0)
            return -errno;
        if (n == 0)
            return -EIO;  /* impossible while we hold the write end: fail, never spin */
        *in_pipe -= (size_t)n;
        *written += (size_t)n;
    }
    return 0;
}

/* Whether the socket has data or end of stream for us.  A pending error
 * answers no: poll(2) sees it without consuming it, so the next call, starting
 * with nothing written, reports it instead of losing it behind a count. */
static int socket_readable(int fd)
{
    struct pollfd pfd;

    pfd.fd = fd;
    pfd.events = POLLIN;
    pfd.revents = 0;
    if (poll(&pfd, 1, 0) <= 0)
        return 0;  /* EINTR included: stop here and report the count */
    if (pfd.revents & (POLLERR | POLLNVAL))
        return 0;
    return (pfd.revents & (POLLIN | POLLHUP)) != 0;
}

ssize_t asf_splice_to_file(const asf_splice_request *req, const char **call)
{
    size_t written = 0, in_pipe = 0;
    int pending = 0, err = 0;

    /* Bytes an earlier call could not write to the file come first. */
    if (ioctl(req->pipe_r, FIONREAD, &pending) < 0) {
        *call = "ioctl";
        return -errno;
    }
    in_pipe = (size_t)pending;

    for (;;) {
        size_t want;
        ssize_t n;

        err = drain_pipe(req, &in_pipe, &written);
        if (err != 0 || written >= req->nbytes)
            break;
        /* Once something is written, EAGAIN and socket errors are for the next call. */
        if (written > 0 && !socket_readable(req->sock_fd))
            break;
        want = req->nbytes - written;
        if (want > ASF_MAX_SPLICE_BYTES)
            want = ASF_MAX_SPLICE_BYTES;
        n = splice(req->sock_fd, NULL, req->pipe_w, NULL, want,
                   SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
        if (n > 0) {
            in_pipe = (size_t)n;  /* the pipe was empty: drained above */
            continue;
        }
        if (n < 0)
            err = -errno;  /* EAGAIN: the socket has nothing yet */
        break;             /* n == 0: end of stream */
    }
    if (written > 0)
        return (ssize_t)written;
    *call = "splice";  /* either side's: the pipe's drain to the file, or the socket's read */
    return err;
}

#else /* !HAVE_SPLICE */

ssize_t asf_splice_to_file(const asf_splice_request *req, const char **call)
{
    (void)req;
    *call = "splice";
    return -ENOSYS;
}

#endif /* HAVE_SPLICE */
