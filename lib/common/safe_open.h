/* Opening what a dataset names, and what an output replaces, without following symbolic links
 * out of where they belong. Internal. */
#ifndef PB_COMMON_SAFE_OPEN_H
#define PB_COMMON_SAFE_OPEN_H

#include "pipebench/core.h"

/** Checks that root/rel, with every symbolic link on the way resolved, lies inside the folder
 * root (openat2 with RESOLVE_BENEATH; realpath where the kernel lacks it). rel is relative.
 * PB_OK when it does, and when it does not exist (the caller's open says so); PB_EFORMAT
 * "ROOT/REL leads outside WHAT ROOT ..." when a link or ".." takes it out; -errno with a
 * message when root cannot be opened. what: "the dataset folder", for the message. */
int pb__entry_inside(const char *root, const char *rel, const char *what, struct pb_error *err);

/** openat(dirfd, rel, flags) where nothing on the way (a symbolic link, "..") may lead out of
 * the folder dirfd: -1 with errno EXDEV (or ELOOP) when something does. Uses openat2 with
 * RESOLVE_BENEATH; where the kernel lacks it, rel's last component must not be a link. */
int pb__open_beneath(int dirfd, const char *rel, int flags);

/** Opens path for writing, created or truncated, never through a symbolic link: a link at path
 * is removed and a new file made in its place (the file it named is left as it was); a link to
 * a character device (/dev/stdout on a terminal) is opened as that device. *fd on success. */
int pb__open_output(const char *path, int *fd, struct pb_error *err);

#endif
