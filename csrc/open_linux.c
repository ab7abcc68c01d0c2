/* openat2(2) with RESOLVE_CACHED: a path opened only if resolving it waits for nothing. */
#define _GNU_SOURCE
#include "asf_open.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifdef HAVE_OPENAT2
/* The kernel's UAPI struct and flags (glibc has no wrapper for openat2). */
struct asf_open_how {
    uint64_t flags;
    uint64_t mode;
    uint64_t resolve;
};

#define ASF_RESOLVE_NO_XDEV 0x01
#define ASF_RESOLVE_CACHED 0x20

/* A descriptor, or -errno. */
static int openat2_cached(int dirfd, const char *path, int flags, uint64_t resolve)
{
    struct asf_open_how how;
    long fd;

    memset(&how, 0, sizeof(how));
    how.flags = (uint64_t)(unsigned int)flags;
    how.resolve = ASF_RESOLVE_CACHED | resolve;
    fd = syscall(ASF_NR_OPENAT2, dirfd, path, &how, sizeof(how));
    return fd < 0 ? -errno : (int)fd;
}
#endif

ssize_t asf_open_cached(asf_open_request *req, const char **call)
{
#ifdef HAVE_OPENAT2
    const char *slash = strrchr(req->path, '/');
    const char *name = req->path;
    char *directory = NULL;
    int dirfd = AT_FDCWD, fd;

    *call = "openat2";
    if (slash != NULL) {
        /* "/x" is in "/"; "a/b/x" in "a/b". */
        size_t length = slash == req->path ? 1 : (size_t)(slash - req->path);

        directory = strndup(req->path, length);
        if (directory == NULL)
            return -ENOMEM;
        name = slash + 1;
    }
    if (directory != NULL) {
        dirfd = openat2_cached(AT_FDCWD, directory, O_PATH | O_DIRECTORY | O_CLOEXEC, 0);
        free(directory);
        if (dirfd < 0)
            return dirfd;
    }
    fd = openat2_cached(dirfd, name, req->flags | O_CLOEXEC, ASF_RESOLVE_NO_XDEV);
    if (dirfd != AT_FDCWD)
        close(dirfd);
    return fd;
#else
    (void)req;
    *call = "openat2";
    return -ENOSYS;
#endif
}
