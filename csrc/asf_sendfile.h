/* The zero-copy step on plain file descriptors: no Python, no asyncio. */
#ifndef ASF_SENDFILE_H
#define ASF_SENDFILE_H

#include <signal.h>
#include <stddef.h>
#include <sys/types.h>

#include "asf_config.h"

/* Largest count one sendfile(2) call accepts (the kernel's MAX_RW_COUNT). */
#define ASF_MAX_SYSCALL_BYTES ((size_t)0x7ffff000)

typedef struct {
    int out_fd;
    int in_fd;
    off_t *offset;          /* NULL: read from (and advance) in_fd's own position */
    size_t nbytes;          /* file bytes wanted; 0 sends none */
    const char *header;
    size_t header_len;
    const char *trailer;
    size_t trailer_len;
    int cork;               /* hold TCP_CORK for the step (see asf_sendfile) */
} asf_request;

/*
 * Writes header, then up to nbytes file bytes, then the trailer once every
 * file byte has gone, looping until done, end of file, the descriptor would
 * block, or a call comes back short: on a blocking descriptor that is a
 * signal, whose handler must run before the caller resumes from the count.
 * SIGPIPE raised by these calls is swallowed: sendfile(2) has no
 * MSG_NOSIGNAL, and the kernel raises it on a reset even when the call
 * returns a partial count.
 *
 * With `cork` set and out_fd a TCP socket that is not corked already, the
 * step runs under TCP_CORK and releases it at the end: the bytes leave in
 * full-sized segments and the last partial one leaves at once (nginx's
 * tcp_nopush).  A socket the caller corked is left corked.
 *
 * Returns the bytes written (header + file + trailer), 0 at end of file with
 * nothing else to write, or -errno when nothing at all could be written; then
 * *call names the system call that failed: "send", "write" or "sendfile".
 */
ssize_t asf_sendfile(const asf_request *req, const char **call);

/* asf_sendfile() without the SIGPIPE guard, for a caller that makes several steps
 * under one guard (the pump). */
ssize_t asf_sendfile_unguarded(const asf_request *req, const char **call);

/* Keeps the SIGPIPE the calls between block() and restore() raise from the process,
 * whatever its disposition: nothing to do when it is ignored (CPython's default, one
 * sigaction(2) query), else the signal is blocked and any it raised taken back. */
typedef struct {
    sigset_t saved_mask;
    int was_pending;
    int active;
} asf_sigpipe_guard;

void asf_sigpipe_block(asf_sigpipe_guard *guard);
void asf_sigpipe_restore(const asf_sigpipe_guard *guard);

#endif /* ASF_SENDFILE_H */
