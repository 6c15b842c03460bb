/* File-system helpers shared by the formats, the tables and the programs, and the one scheme
 * for temporary names. Internal.
 *
 * A temporary that stands for path (a file or a folder written before it is renamed into
 * place) is called "<folder>/.<name>.pbtmp-<host hash>-<pid>-<random>". A writer killed
 * mid-write leaves it behind; pb__temp_sweep removes those of this host whose process is gone,
 * so the next writer of the same path cleans up after the dead one. */
#ifndef PB_COMMON_FS_H
#define PB_COMMON_FS_H

#include <stddef.h>
#include <sys/types.h>

#include "pipebench/core.h"

/** What a file of this st_mode is, for messages: "a FIFO", "a socket", "a character device",
 * "a block device", "a folder", "a regular file" or "a special file". Static storage. */
const char *pb__file_kind(unsigned mode);
/** Refuses a path that is neither a regular file nor (when dir_ok) a folder, without opening it:
 * PB_EFORMAT with "PATH is a FIFO, not WHAT"; PB_ENOTFOUND when it does not exist. Probes and
 * readers call it before they open what a user named, so a FIFO or a device never blocks them. */
int pb__check_file_kind(const char *path, int dir_ok, const char *what, struct pb_error *err);
/** Opens a regular file read-only with O_NONBLOCK (which regular files ignore, and which keeps
 * open() from waiting on a FIFO or a device), then checks with fstat that it is one: *fd on
 * success; PB_EFORMAT ("PATH is a FIFO, not WHAT") or -errno with a message otherwise. */
int pb__open_regular(const char *path, const char *what, int *fd, struct pb_error *err);

/** Creates a folder and its parents (mkdir -p); a path that exists and is no folder is an
 * error. */
int pb__mkdirs(const char *path, struct pb_error *err);
/** Checks a path that a dataset writer is about to replace by renaming a temporary onto it:
 * missing, a regular file or a folder is fine (a symbolic link is judged by what it names, and
 * is itself replaced); a device, FIFO or socket is refused with PB_EIO naming what it is. */
int pb__output_check(const char *path, struct pb_error *err);
/** Removes a file or a folder tree (rm -rf, never following links); missing is not an error. */
int pb__remove_tree(const char *path);

/** Reads a whole regular file into a pb_alloc'd buffer of *size bytes, freed with
 * pb_free(*data, *size). A file that is not regular, or that shrinks while it is read, is an
 * error naming path. */
int pb__read_file(const char *path, void **data, size_t *size, struct pb_error *err);
/** Creates or truncates path and writes data to it (not atomic: for files inside a temporary
 * folder that is renamed into place as a whole). */
int pb__write_file(const char *path, const void *data, size_t size, struct pb_error *err);
/** Writes all of data to fd; name is for messages. A short write reports ENOSPC (what a full
 * file system means by it), never a stale errno. */
int pb__write_all(int fd, const void *data, size_t size, const char *name, struct pb_error *err);

/** Sorted list of entries of dir (no "." or ".."); free with pb__free_names. */
int pb__list_dir(const char *dir, char ***names, size_t *count, struct pb_error *err);
void pb__free_names(char **names, size_t count);

/** Does the regular file path end with the n bytes of tail? 1 yes, 0 no (or unreadable). */
int pb__file_ends_with(const char *path, const void *tail, size_t n);

/** A fresh temporary name for path in path's folder (the scheme above) into buf. Returns
 * PB_OK, or PB_EINVAL when path is empty, ends in '/' or the name does not fit. */
int pb__temp_sibling(const char *path, char *buf, size_t size);
/** The same name, placed in folder dir instead of path's own folder. */
int pb__temp_name_in(const char *dir, const char *path, char *buf, size_t size);
/** Removes the temporaries of path (files and folders, and DuckDB's "tmp_" copies of them) in
 * path's folder that processes of this host left and that no longer run (kill(pid, 0) says
 * ESRCH). Returns how many were removed. */
int pb__temp_sweep(const char *path);
/** The same for the temporaries of path kept in folder dir. */
int pb__temp_sweep_in(const char *dir, const char *path);

/** Splits path into its folder ("." when it has none) and its last component. */
void pb__path_split(const char *path, char *dir, size_t dir_size, const char **base);

/** Most bytes of a metadata file (Zarr .zattrs/.zarray/zarr.json, an oa-dataset's
 * _ome_arrow_dataset.json) that pipebench reads: such files hold a few KiB. */
#define PB__META_MAX_BYTES ((size_t)64 << 20)
/** pb__read_file for a file of at most max bytes (fstat'ed once it is open, as a regular file,
 * without blocking on a FIFO): a larger one is PB_EUNSUPPORTED, "PATH: N bytes, more than the
 * MAX pipebench reads from such a file", and nothing is read. */
int pb__read_file_max(const char *path, size_t max, void **data, size_t *size,
                      struct pb_error *err);

#endif
