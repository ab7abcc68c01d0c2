/* The pump for Linux: epoll(7) over the transfers' sockets, sendfile(2) steps for each ready one. */
#define _GNU_SOURCE
#include "asf_pump.h"

#include <errno.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "asf_residency.h"
#include "asf_sendfile.h"

int asf_pump_open(void)
{
    int fd = epoll_create1(EPOLL_CLOEXEC);

    return fd < 0 ? -errno : fd;
}

int asf_pump_watch(int epfd, int out_fd, uint64_t key)
{
    struct epoll_event event = {.events = EPOLLOUT, .data.u64 = key};

    return epoll_ctl(epfd, EPOLL_CTL_ADD, out_fd, &event) == 0 ? 0 : -errno;
}

int asf_pump_unwatch(int epfd, int out_fd)
{
    struct epoll_event unused = {0};

    /* ENOENT: not watched; EBADF: closed already, which removed it. */
    if (epoll_ctl(epfd, EPOLL_CTL_DEL, out_fd, &unused) == 0 || errno == ENOENT || errno == EBADF)
        return 0;
    return -errno;
}

int asf_pump_ready(int epfd, uint64_t *keys, int max)
{
    struct epoll_event events[256];
    int n, i;

    if (max > 256)
        max = 256;
    do
        n = epoll_wait(epfd, events, max, 0);
    while (n < 0 && errno == EINTR);
    if (n < 0)
        return -errno;
    for (i = 0; i < n; i++)
        keys[i] = events[i].data.u64;
    return n;
}

/* Bytes from t->position that are known cached now; asks the page cache once per window.
 * Sets read_from where the cache stops (1 when that is news for the caller). */
static size_t cached_ahead(asf_pump_transfer *t, size_t window, int *news)
{
    off_t left = t->end - t->position;
    const char *call;
    ssize_t resident;
    size_t ask;

    if (!t->check_cache || t->position < t->cached_until)
        return t->check_cache ? (size_t)(t->cached_until - t->position) : (size_t)left;
    ask = (size_t)left < window ? (size_t)left : window;
    resident = asf_resident_bytes(t->in_fd, t->position, ask, &call);
    if (resident < 0)
        resident = 0;  /* the kernel cannot tell: the caller reads the window in */
    t->cached_until = t->position + resident;
    if ((size_t)resident < ask && t->read_from != t->cached_until) {
        t->read_from = t->cached_until;
        *news = 1;
    }
    return (size_t)resident;
}

int asf_pump_step(asf_pump_transfer *t, size_t share, size_t window)
{
    asf_request req;
    off_t offset = t->position;
    size_t nbytes = (size_t)(t->end - t->position), cached, from_header, from_file;
    const char *call = NULL;
    ssize_t n;
    int news = 0;

    if (nbytes > share)
        nbytes = share;
    if (nbytes > 0) {
        cached = cached_ahead(t, window, &news);
        if (cached == 0) {
            t->state = ASF_PUMP_COLD;
            return 1;
        }
        if (nbytes > cached)
            nbytes = cached;
    }
    req.out_fd = t->out_fd;
    req.in_fd = t->in_fd;
    req.offset = &offset;
    req.nbytes = nbytes;
    req.header = t->header;
    req.header_len = t->header_len;
    /* The trailer goes behind the last file byte only. */
    req.trailer = t->position + (off_t)nbytes == t->end ? t->trailer : NULL;
    req.trailer_len = req.trailer ? t->trailer_len : 0;
    req.cork = 0;  /* the caller holds the cork over the whole transfer */
    n = asf_sendfile_unguarded(&req, &call);
    if (n < 0) {
        if (n == -EAGAIN || n == -EWOULDBLOCK || n == -EINTR)
            return news;  /* the socket filled again; the next event resumes */
        t->state = ASF_PUMP_FAILED;
        t->err = (int)-n;
        t->call = call;
        return 1;
    }
    if (n == 0) {
        /* Nothing to write but file bytes, and none came: the file ended early. */
        t->state = nbytes ? ASF_PUMP_SHORT : ASF_PUMP_DONE;
        return 1;
    }
    from_header = (size_t)n < t->header_len ? (size_t)n : t->header_len;
    t->header += from_header;
    t->header_len -= from_header;
    from_file = (size_t)n - from_header < nbytes ? (size_t)n - from_header : nbytes;
    if (req.trailer) {
        t->trailer += (size_t)n - from_header - from_file;
        t->trailer_len -= (size_t)n - from_header - from_file;
    }
    t->position += (off_t)from_file;
    t->moved += from_file;
    if (t->position == t->end && t->header_len == 0 && t->trailer_len == 0) {
        t->state = ASF_PUMP_DONE;
        return 1;
    }
    return news;
}
