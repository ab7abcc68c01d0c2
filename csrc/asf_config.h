/* Feature detection, done once: every platform #ifdef of the C core lives here. */
#ifndef ASF_CONFIG_H
#define ASF_CONFIG_H

#if defined(__linux__)
/* sendfile(2) from a regular file to a socket: Linux >= 2.2; to any fd: Linux >= 2.6.33. */
#  define HAVE_LINUX_SENDFILE 1
/* send(2) MSG_MORE (Linux >= 2.4.4) and MSG_NOSIGNAL (Linux >= 2.2). */
#  define HAVE_MSG_MORE 1
#  define HAVE_MSG_NOSIGNAL 1
/* TCP_CORK toggling pushes a held partial segment: Linux >= 2.2. */
#  define HAVE_TCP_CORK 1
/* cachestat(2), page-cache residency of a range in one call: Linux >= 6.5 (syscall 451
 * on every architecture); older kernels answer ENOSYS and mincore(2) takes over. */
#  define HAVE_CACHESTAT 1
#  define ASF_NR_CACHESTAT 451
/* mincore(2) on a shared mapping of the file: Linux >= 2.3.99. */
#  define HAVE_MINCORE 1
/* splice(2) between a socket, a pipe and a file: Linux >= 2.6.17. */
#  define HAVE_SPLICE 1
/* openat2(2) with RESOLVE_CACHED, a path resolved from the dentry cache alone: Linux >= 5.12
 * (syscall 437 on every architecture; glibc has no wrapper); older kernels answer ENOSYS
 * (before 5.6) or EINVAL, and send() opens paths as before. */
#  define HAVE_OPENAT2 1
#  define ASF_NR_OPENAT2 437
#endif

#endif /* ASF_CONFIG_H */
