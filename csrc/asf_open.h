/* Opening a path without waiting for a disk to resolve it: send()'s on-loop open. */
#ifndef ASF_OPEN_H
#define ASF_OPEN_H

#include <sys/types.h>

#include "asf_config.h"

typedef struct {
    const char *path;
    int flags;              /* open(2) flags; O_CLOEXEC is always added, as os.open does */
} asf_open_request;

/*
 * Opens `path` with openat2(2) and RESOLVE_CACHED: every component must already
 * be in the dentry cache, so resolving it never waits for a disk, a FUSE daemon
 * or a server.  The directory is resolved first (O_PATH: nothing of its
 * filesystem is called), then the last component from it with RESOLVE_NO_XDEV:
 * a file that is another mount (a bind-mounted file) or a symlink leading out
 * of the directory's mount is refused, so the file is on its directory's
 * filesystem.  O_CREAT and O_TRUNC are refused (RESOLVE_CACHED).
 *
 * Returns the descriptor, or -errno with *call = "openat2": -EAGAIN when a
 * component is not cached (or flags ask for more than a lookup), -EXDEV when
 * the file is on another mount, -ENOSYS or -EINVAL on kernels before 5.12.
 */
ssize_t asf_open_cached(asf_open_request *req, const char **call);

#endif /* ASF_OPEN_H */
