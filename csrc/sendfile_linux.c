/* The zero-copy step for Linux: send(2) for header and trailer, sendfile(2) for the file. */
#define _GNU_SOURCE
#include "asf_sendfile.h"

#ifndef HAVE_LINUX_SENDFILE
#  error "the C core is built on Linux only; elsewhere aiosendfile uses its pure-Python core"
#endif

#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* --- SIGPIPE: block it around our calls and take back any we raised. --- */

typedef struct {
    sigset_t saved_mask;
    int was_pending;
    int active;
} sigpipe_guard;

/* With SIGPIPE ignored (CPython's start-up default) the kernel discards it as
 * it is raised: one sigaction(2) query instead of four mask calls per step.
 * (A blocked signal is never discarded, so the guard must not block first.) */
static int sigpipe_ignored(void)
{
    struct sigaction current;

    return sigaction(SIGPIPE, NULL, &current) == 0 && !(current.sa_flags & SA_SIGINFO) &&
           current.sa_handler == SIG_IGN;
}

static void sigpipe_block(sigpipe_guard *guard)
{
    sigset_t pipe_only, pending;

    guard->active = !sigpipe_ignored();
    if (!guard->active)
        return;
    sigemptyset(&pipe_only);
    sigaddset(&pipe_only, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &pipe_only, &guard->saved_mask);
    sigemptyset(&pending);
    sigpending(&pending);
    guard->was_pending = sigismember(&pending, SIGPIPE);
}

static void sigpipe_restore(const sigpipe_guard *guard)
{
    sigset_t pipe_only, pending;
    struct timespec no_wait = {0, 0};

    if (!guard->active)
        return;
    sigemptyset(&pending);
    sigpending(&pending);
    if (!guard->was_pending && sigismember(&pending, SIGPIPE)) {
        /* Ours: the kernel sent it to this thread while it was blocked. */
        sigemptyset(&pipe_only);
        sigaddset(&pipe_only, SIGPIPE);
        while (sigtimedwait(&pipe_only, NULL, &no_wait) < 0 && errno == EINTR)
            ;
    }
    pthread_sigmask(SIG_SETMASK, &guard->saved_mask, NULL);
}

/* --- header and trailer --- */

/* Writes buf[*done:len] until done or the fd would block; 0, or -errno. */
static int write_bytes(int fd, const char *buf, size_t len, size_t *done,
                       int more_follows, int *is_socket)
{
    while (*done < len) {
        ssize_t n;
        if (*is_socket) {
            int flags = MSG_NOSIGNAL | (more_follows ? MSG_MORE : 0);
            n = send(fd, buf + *done, len - *done, flags);
            if (n < 0 && errno == ENOTSOCK) {
                *is_socket = 0;  /* sendfile(2) also writes to pipes and files */
                continue;
            }
        }
        else {
            n = write(fd, buf + *done, len - *done);
        }
        if (n < 0)
            return -errno;
        *done += (size_t)n;
    }
    return 0;
}

/* A header sent with MSG_MORE waits for more bytes; when none followed in
 * this call (end of file, or the socket filled), push it out now rather than
 * leave it held until the peer's next ACK.  Clearing TCP_CORK pushes pending
 * frames; a socket the application corked itself is left alone. */
static void push_held_header(int fd)
{
    int corked = 0, zero = 0;
    socklen_t len = sizeof(corked);

    if (getsockopt(fd, IPPROTO_TCP, TCP_CORK, &corked, &len) == 0 && !corked)
        (void)setsockopt(fd, IPPROTO_TCP, TCP_CORK, &zero, sizeof(zero));
}

/* --- the step --- */

static ssize_t send_file_bytes(const asf_request *req, size_t *sent)
{
    while (*sent < req->nbytes) {
        size_t chunk = req->nbytes - *sent;
        ssize_t n;

        if (chunk > ASF_MAX_SYSCALL_BYTES)
            chunk = ASF_MAX_SYSCALL_BYTES;
        n = sendfile(req->out_fd, req->in_fd, req->offset, chunk);
        if (n < 0)
            return -errno;
        if (n == 0)
            return 0;  /* end of file: the file is shorter than asked */
        *sent += (size_t)n;
    }
    return 0;
}

ssize_t asf_sendfile(const asf_request *req)
{
    sigpipe_guard guard;
    size_t header_sent = 0, file_sent = 0, trailer_sent = 0;
    int is_socket = 1, more_follows, err;
    int header_held = 0;

    more_follows = req->nbytes > 0 || req->trailer_len > 0;
    sigpipe_block(&guard);

    err = write_bytes(req->out_fd, req->header, req->header_len, &header_sent,
                      more_follows, &is_socket);
    if (err == 0) {
        header_held = is_socket && more_follows && req->header_len > 0;
        err = (int)send_file_bytes(req, &file_sent);
    }
    if (err == 0 && file_sent == req->nbytes) {
        err = write_bytes(req->out_fd, req->trailer, req->trailer_len,
                          &trailer_sent, 0, &is_socket);
        if (trailer_sent > 0)
            header_held = 0;  /* sent without MSG_MORE: everything is pushed */
    }
    if (header_held && file_sent == 0 && trailer_sent == 0)
        push_held_header(req->out_fd);

    sigpipe_restore(&guard);

    if (header_sent + file_sent + trailer_sent > 0)
        return (ssize_t)(header_sent + file_sent + trailer_sent);
    return err;
}
