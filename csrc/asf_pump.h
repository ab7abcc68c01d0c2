/* The pump: every zero-copy transfer of one event loop, sent in C while its socket takes bytes. */
#ifndef ASF_PUMP_H
#define ASF_PUMP_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "asf_config.h"

/* What a transfer in the pump is doing; anything but SENDING has left the epoll set. */
enum {
    ASF_PUMP_SENDING = 0, /* in the epoll set, sent to while its socket takes bytes */
    ASF_PUMP_DONE,        /* every byte owed went: header, file to `end`, trailer */
    ASF_PUMP_SHORT,       /* the file ended before `end` (it shrank) */
    ASF_PUMP_COLD,        /* the next byte is not known to be in the page cache */
    ASF_PUMP_FAILED,      /* a call failed: `err`, `call` */
    ASF_PUMP_QUEUED       /* the transport queued bytes of its own: they go first */
};

typedef struct {
    int out_fd;             /* the send's own dup() of the socket */
    int in_fd;              /* the send's own descriptor of the file */
    off_t position;         /* the next file byte */
    off_t end;              /* the first file byte not to send */
    off_t cached_until;     /* the bytes before it are in the page cache */
    int check_cache;        /* 0: send without asking the page cache */
    const char *header;     /* what is still owed of the header (the caller keeps it) */
    size_t header_len;
    const char *trailer;    /* likewise, sent behind the last file byte */
    size_t trailer_len;
    int state;              /* ASF_PUMP_* */
    int err;                /* FAILED: the errno */
    const char *call;       /* FAILED: the system call */
    off_t read_from;        /* -1, or where bytes not in the page cache begin: read them in */
    size_t moved;           /* file bytes sent since the caller last took the count */
} asf_pump_transfer;

/* An epoll instance for the pump's sockets (close-on-exec); -errno on failure. */
int asf_pump_open(void);

/* Watches `t->out_fd` for room (level-triggered), the event naming `key`; -errno. */
int asf_pump_watch(int epfd, int out_fd, uint64_t key);

/* Stops watching `out_fd` (0 whether or not it was watched). */
int asf_pump_unwatch(int epfd, int out_fd);

/* Up to `max` keys of sockets with room now, without waiting; -errno. */
int asf_pump_ready(int epfd, uint64_t *keys, int max);

/*
 * One step of `t`, whose socket had room: at most `share` file bytes (and what is
 * owed of the header, and the trailer behind the last file byte) in one
 * asf_sendfile_unguarded() call, which loops until they are sent or the socket is
 * full.  With `check_cache`, bytes past `cached_until` are asked of the page cache
 * first, `window` at a time: what is cached is sent; where it stops, `read_from` is
 * set (once), and a step that has no cached byte to send leaves `t` COLD.  The
 * caller holds the SIGPIPE guard.  Returns 1 when the caller must look at `t` (its
 * state changed, or read_from was set), 0 otherwise (EAGAIN included).
 */
int asf_pump_step(asf_pump_transfer *t, size_t share, size_t window);

#endif /* ASF_PUMP_H */
