/* Which bytes of a file are in the page cache: so sendfile(2) never waits for a disk. */
#ifndef ASF_RESIDENCY_H
#define ASF_RESIDENCY_H

#include <stddef.h>
#include <sys/types.h>

#include "asf_config.h"

/* Largest range one call examines (bounds the mincore vector on the stack). */
#define ASF_RESIDENCY_MAX_BYTES ((size_t)16 * 1024 * 1024)

/*
 * Returns how many bytes from `offset` (up to `len`, at most
 * ASF_RESIDENCY_MAX_BYTES) are in the page cache, counting whole pages and
 * stopping at the first page that is not; or -errno when the kernel cannot
 * tell (no cachestat and a file that cannot be mapped, e.g. procfs), with
 * *call naming the system call that failed last: "mmap" or "mincore".
 * One cachestat(2) call when the whole range is resident, the hot case.
 */
ssize_t asf_resident_bytes(int fd, off_t offset, size_t len, const char **call);

#endif /* ASF_RESIDENCY_H */
