/* The lock of a results folder: one `pipebench run` or `pipebench report` writes into a folder
 * at a time. Internal.
 *
 * The lock is flock(2) on DIR/.pipebench.lock, a file of pipebench's own (opened O_NOFOLLOW,
 * regular files only) that holds the holder's pid for messages. flock belongs to the open file:
 * it goes away with the process however the process ends, so the file a killed run leaves
 * behind blocks nobody. The holder removes the file when it lets go; a taker that finds the
 * file it locked no longer at that name takes the new one instead. Within one process the lock
 * nests (a count per folder), so a caller that holds it may call functions that take it too;
 * a forked copy of the holder does not hold it (a take there is refused as any other process's
 * is), and its releases are no-ops. */
#ifndef PB_COMMON_DIRLOCK_H
#define PB_COMMON_DIRLOCK_H

#include "pipebench/core.h"

#define PB__DIRLOCK_NAME ".pipebench.lock"

typedef struct pb__dirlock pb__dirlock;

/** Takes the lock of the existing folder dir without waiting. what names the caller in the
 * message ("run --out"). On success *out holds it until pb__dirlock_release. When another
 * process holds it: -EWOULDBLOCK with "DIR is in use by another pipebench (pid N) ..."; a lock
 * name that is a link or not a regular file: PB_EIO naming it; other failures: -errno. */
int pb__dirlock_take(const char *dir, const char *what, pb__dirlock **out, struct pb_error *err);
/** Lets go of one take (the last one removes the lock file); NULL is a no-op. */
void pb__dirlock_release(pb__dirlock *l);

#endif
