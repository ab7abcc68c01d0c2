/* Page-cache residency of a file range: cachestat(2) first, mincore(2) for the prefix. */
#define _GNU_SOURCE
#include "asf_residency.h"

#include <errno.h>
#include <stdint.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

/* The kernel's UAPI structs (glibc has no wrapper for cachestat yet). */
struct asf_cachestat_range {
    uint64_t off;
    uint64_t len;
};

struct asf_cachestat {
    uint64_t nr_cache;
    uint64_t nr_dirty;
    uint64_t nr_writeback;
    uint64_t nr_evicted;
    uint64_t nr_recently_evicted;
};

/* 1: every page of the range is cached; 0: not all; -errno: cannot tell. */
static int all_cached(int fd, off_t first, size_t len, size_t page)
{
    struct asf_cachestat_range range = {(uint64_t)first, (uint64_t)len};
    struct asf_cachestat stat;
    uint64_t pages = (len + page - 1) / page;

    if (syscall(ASF_NR_CACHESTAT, fd, &range, &stat, 0) != 0)
        return -errno;
    return stat.nr_cache >= pages;
}

/* Bytes from `first` (page aligned) up to the first page not in the cache; or -errno
 * with *call set. */
static ssize_t cached_prefix(int fd, off_t first, size_t len, size_t page, const char **call)
{
    unsigned char vec[ASF_RESIDENCY_MAX_BYTES / 4096];
    size_t pages = (len + page - 1) / page, i;
    void *map;

    if (pages > sizeof(vec))
        pages = sizeof(vec);
    /* Mapping does not fault pages in; mincore only reads the page tables' view. */
    map = mmap(NULL, pages * page, PROT_READ, MAP_SHARED, fd, first);
    if (map == MAP_FAILED) {
        *call = "mmap";
        return -errno;
    }
    if (mincore(map, pages * page, vec) != 0) {
        int err = errno;
        munmap(map, pages * page);
        *call = "mincore";
        return -err;
    }
    munmap(map, pages * page);
    for (i = 0; i < pages && (vec[i] & 1); i++)
        ;
    return (ssize_t)(i * page);
}

ssize_t asf_resident_bytes(int fd, off_t offset, size_t len, const char **call)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    off_t first = offset - offset % (off_t)page;
    size_t lead = (size_t)(offset - first), span;
    ssize_t prefix;
    int whole;

    if (len == 0)
        return 0;
    if (len > ASF_RESIDENCY_MAX_BYTES)
        len = ASF_RESIDENCY_MAX_BYTES;
    span = lead + len;

    whole = all_cached(fd, first, span, page);
    if (whole == 1)
        return (ssize_t)len;
    /* Not all (or no cachestat, ENOSYS before Linux 6.5): find where it stops. */
    prefix = cached_prefix(fd, first, span, page, call);
    if (prefix < 0)
        return whole == 0 ? 0 : prefix;
    if ((size_t)prefix <= lead)
        return 0;
    return (ssize_t)((size_t)prefix - lead < len ? (size_t)prefix - lead : len);
}
