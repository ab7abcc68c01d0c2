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

/* With SIGPIPE ignored (CPython's start-up default) the kernel discards it as
 * it is raised: one sigaction(2) query instead of four mask calls per step.
 * (A blocked signal is never discarded, so the guard must not block first.) */
static int sigpipe_ignored(void)
{
    struct sigaction current;

    return sigaction(SIGPIPE, NULL, &current) == 0 && !(current.sa_flags & SA_SIGINFO) &&
           current.sa_handler == SIG_IGN;
}

void asf_sigpipe_block(asf_sigpipe_guard *guard)
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

void asf_sigpipe_restore(const asf_sigpipe_guard *guard)
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

/* One write of buf[0:len]: the count (short after a signal or on a full socket), or
 * -errno with *call set. */
static ssize_t write_bytes(int fd, const char *buf, size_t len, int more_follows,
                           int *is_socket, const char **call)
{
    ssize_t n;

    if (len == 0)
        return 0;
    if (*is_socket) {
        n = send(fd, buf, len, MSG_NOSIGNAL | (more_follows ? MSG_MORE : 0));
        if (n >= 0)
            return n;
        if (errno != ENOTSOCK) {
            *call = "send";
            return -errno;
        }
        *is_socket = 0;  /* sendfile(2) also writes to pipes and files */
    }
    n = write(fd, buf, len);
    if (n >= 0)
        return n;
    *call = "write";
    return -errno;
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

/* Corks a TCP socket for one step, unless it is corked already (by the application,
 * whose cork is left alone); whether this call corked it.  Not TCP (a Unix socket, a
 * pipe): nothing to cork, and nothing is ever held back there. */
static int cork_for_step(int fd)
{
    int corked = 0, one = 1;
    socklen_t len = sizeof(corked);

    if (getsockopt(fd, IPPROTO_TCP, TCP_CORK, &corked, &len) != 0 || corked)
        return 0;
    return setsockopt(fd, IPPROTO_TCP, TCP_CORK, &one, sizeof(one)) == 0;
}

/* Releasing the cork sends what it held, the last partial segment included. */
static void uncork(int fd)
{
    int zero = 0;

    (void)setsockopt(fd, IPPROTO_TCP, TCP_CORK, &zero, sizeof(zero));
}

/* --- the step --- */

/* Up to nbytes file bytes into *sent: 0, or -errno with *call set.  Stops at the first
 * short count: on a blocking fd a signal cut it short and its handler must run before we
 * go on; on a non-blocking one the fd is full and another call would only get EAGAIN. */
static int send_file_bytes(const asf_request *req, size_t *sent, const char **call)
{
    while (*sent < req->nbytes) {
        size_t chunk = req->nbytes - *sent;
        ssize_t n;

        if (chunk > ASF_MAX_SYSCALL_BYTES)
            chunk = ASF_MAX_SYSCALL_BYTES;
        n = sendfile(req->out_fd, req->in_fd, req->offset, chunk);
        if (n < 0) {
            *call = "sendfile";
            return -errno;
        }
        *sent += (size_t)n;
        if ((size_t)n < chunk)
            return 0;  /* end of file shows as 0 on the caller's next call */
    }
    return 0;
}

ssize_t asf_sendfile(const asf_request *req, const char **call)
{
    asf_sigpipe_guard guard;
    ssize_t n;

    asf_sigpipe_block(&guard);
    n = asf_sendfile_unguarded(req, call);
    asf_sigpipe_restore(&guard);
    return n;
}

ssize_t asf_sendfile_unguarded(const asf_request *req, const char **call)
{
    ssize_t n;
    size_t header_sent = 0, file_sent = 0, trailer_sent = 0;
    int is_socket = 1, more_follows, corked, err = 0;

    more_follows = req->nbytes > 0 || req->trailer_len > 0;
    corked = req->cork && cork_for_step(req->out_fd);

    n = write_bytes(req->out_fd, req->header, req->header_len, more_follows, &is_socket, call);
    if (n < 0)
        err = (int)n;
    else
        header_sent = (size_t)n;
    if (err == 0 && header_sent == req->header_len)
        err = send_file_bytes(req, &file_sent, call);
    if (err == 0 && header_sent == req->header_len && file_sent == req->nbytes) {
        n = write_bytes(req->out_fd, req->trailer, req->trailer_len, 0, &is_socket, call);
        if (n < 0)
            err = (int)n;
        else
            trailer_sent = (size_t)n;
    }
    if (corked)
        uncork(req->out_fd);
    /* Header bytes sent with MSG_MORE and nothing after them in this call. */
    else if (is_socket && more_follows && header_sent > 0 && file_sent == 0 && trailer_sent == 0)
        push_held_header(req->out_fd);

    if (header_sent + file_sent + trailer_sent > 0)
        return (ssize_t)(header_sent + file_sent + trailer_sent);
    return err;
}
