/* Socket to file through a pipe, never through user space: no Python, no asyncio. */
#ifndef ASF_SPLICE_H
#define ASF_SPLICE_H

#include <stddef.h>
#include <sys/types.h>

#include "asf_config.h"

typedef struct {
    int sock_fd;            /* the socket to read from */
    int pipe_r;             /* a pipe that belongs to this transfer alone; */
    int pipe_w;             /* O_NONBLOCK, so a wrong count fails, never waits */
    int file_fd;            /* the file to write to */
    off_t *offset;          /* where the next byte goes; NULL: file_fd's own position */
    size_t nbytes;          /* the most bytes to take from the socket and write */
} asf_splice_request;

/*
 * Moves up to nbytes from the socket to the file with splice(2): socket to
 * pipe (SPLICE_F_NONBLOCK), pipe to file, looping until nbytes are written,
 * the socket would block, or it reaches end of stream.  Never takes more than
 * nbytes from the socket, so what follows stays there for the next reader.
 *
 * The pipe is drained into the file before returning, with one exception: a
 * file-side error (ENOSPC, EFBIG, EIO...) leaves in the pipe the bytes the
 * file refused.  They have left the socket; they are the stream's next bytes.
 * A later call with the same pipe writes them first (the pipe's content is
 * measured on entry), so a retry loses nothing; a caller that gives up must
 * read them out or close the pipe, never hand it to another transfer.
 *
 * A socket error after some bytes were written is left pending (poll(2) sees
 * it without consuming it) and reported by the next call.
 *
 * Returns the bytes written to the file (> 0), 0 at end of stream with
 * nothing written, or -errno when nothing was written (-EAGAIN: the socket
 * has nothing yet), with *call naming the system call: "ioctl" or "splice".
 */
ssize_t asf_splice_to_file(const asf_splice_request *req, const char **call);

#endif /* ASF_SPLICE_H */
