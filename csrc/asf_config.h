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
#endif

#endif /* ASF_CONFIG_H */
