/* pipebench system helpers: files, temporary names, child processes, stop requests, JSON files,
 * growable strings, multi-output commits and where an installed pipebench keeps its files. The
 * library does all of this for itself; these are the same functions, offered to the programs
 * built on it (the benchmark library, the CLI) so that they need nothing of lib/'s internals.
 * Every call is thread-safe unless it says otherwise. */
#ifndef PIPEBENCH_SYS_H
#define PIPEBENCH_SYS_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>

#include "pipebench/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/** @name Files
 * Temporaries that stand for a path are named "<folder>/.<name>.pbtmp-<host>-<pid>-<random>";
 * pb_temp_sweep removes those whose writer (this host) is gone. @{ */

/** What a file of this st_mode is, for messages ("a FIFO", "a folder", ...). Static storage. */
PB_API const char *pb_file_kind(unsigned mode);
/** Refuses, without opening it, a path that is neither a regular file nor (dir_ok) a folder:
 * PB_EFORMAT "PATH is a FIFO, not WHAT"; PB_ENOTFOUND when it does not exist. */
PB_API int pb_check_file_kind(const char *path, int dir_ok, const char *what,
                              struct pb_error *err);
/** Whether a path may be replaced by renaming a temporary onto it: missing, a regular file or a
 * folder is fine; a device, FIFO or socket is PB_EIO naming what it is. */
PB_API int pb_output_check(const char *path, struct pb_error *err);
/** Removes a file or a folder tree, never following links; missing is not an error. */
PB_API int pb_remove_tree(const char *path);
/** Reads a whole regular file into *data (*size bytes), which the caller frees with
 * pb_free(*data, *size). Errors name path. */
PB_API int pb_read_file(const char *path, void **data, size_t *size, struct pb_error *err);
/** Creates or truncates path and writes data (not atomic: see pb_write_file_atomic). */
PB_API int pb_write_file(const char *path, const void *data, size_t size, struct pb_error *err);
/** Writes all of data to fd; name is for messages. A short write is ENOSPC. */
PB_API int pb_write_all(int fd, const void *data, size_t size, const char *name,
                        struct pb_error *err);
/** 1 when the regular file at path ends with the n bytes of tail, else 0. */
PB_API int pb_file_ends_with(const char *path, const void *tail, size_t n);
/** A fresh temporary name for path, in path's folder, into buf: PB_OK or PB_EINVAL. */
PB_API int pb_temp_sibling(const char *path, char *buf, size_t size);
/** Removes the temporaries of path that writers of this host, now gone, left; returns how many. */
PB_API int pb_temp_sweep(const char *path);
/** Splits path into its folder ("." when it has none) and, in *base, its last component. */
PB_API void pb_path_split(const char *path, char *dir, size_t dir_size, const char **base);
/** PB_OK when root/rel, links resolved, lies inside the folder root (or does not exist);
 * PB_EFORMAT "ROOT/REL leads outside WHAT ROOT" when it does not. */
PB_API int pb_entry_inside(const char *root, const char *rel, const char *what,
                           struct pb_error *err);
/** The folder for temporary files: $TMPDIR when it is an absolute path shorter than 1024
 * bytes, else "/tmp". The one place pipebench reads TMPDIR. Static or environment storage. */
PB_API const char *pb_tmp_dir(void);
/** Where an installed pipebench keeps its shared files for part ("python", "lance"):
 * PREFIX/share/pipebench/PART, PREFIX being the folder above the one that holds libpipebench,
 * when that folder holds the file probe. Returns 1 with the path in buf, else 0 with buf ""
 * (a build tree). */
PB_API int pb_install_path(const char *part, const char *probe, char *buf, size_t size);
/** Puts several finished outputs into place at once, recoverably (lib/common/commit.h explains
 * the journal): stage (a folder inside dir) holds from[i], which becomes dir/to[i]. */
PB_API int pb_commit(const char *dir, const char *name, const char *stage,
                     const char *const *from, const char *const *to, int n,
                     struct pb_error *err);
/** Finishes an interrupted commit of name in dir; *recovered (may be NULL) says whether one was. */
PB_API int pb_commit_recover(const char *dir, const char *name, int *recovered,
                             struct pb_error *err);
/** Before reading path: finishes the interrupted commits that may hold it. */
PB_API int pb_commit_settle(const char *path, struct pb_error *err);
/** Sorted entries of dir (no "." or ".."); free with pb_free_names. */
PB_API int pb_list_dir(const char *dir, char ***names, size_t *count, struct pb_error *err);
PB_API void pb_free_names(char **names, size_t count);
/** @} */

/** @name JSON files (cJSON trees, freed with cJSON_Delete) @{ */
struct cJSON;
/** Parses n bytes as one JSON value followed by white space only: 0 and *out, or PB_EFORMAT
 * naming label with *out NULL. */
PB_API int pb_json_parse(const char *text, size_t n, const char *label, struct cJSON **out,
                         struct pb_error *err);
/** Reads and parses the JSON file at path; NULL with err saying why. */
PB_API struct cJSON *pb_load_json(const char *path, struct pb_error *err);
/** @} */

/** @name Growable strings
 * Zero-initialise (`pb_strbuf b = {0};`); b.p is NULL or NUL-terminated text of b.n bytes, the
 * caller's to free() at the end. A failed allocation sets oom and makes later appends no-ops. @{ */
typedef struct pb_strbuf {
  char *p;
  size_t n, cap;
  int oom;
} pb_strbuf;
PB_API void pb_strbuf_putn(pb_strbuf *b, const char *s, size_t n);
PB_API void pb_strbuf_puts(pb_strbuf *b, const char *s);
PB_API void pb_strbuf_printf(pb_strbuf *b, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/** @} */

/** @name Child processes
 * The one way pipebench runs a program: argv without a shell, stdin /dev/null, in a process
 * group of its own that a timeout, a cancel or a stop request ends as a whole. @{ */

/** What to run: zero-initialise and fill what you need; pointers are borrowed for the call. */
typedef struct pb_proc {
  const char *const *argv;   /**< NULL-terminated; argv[0] is looked up on PATH unless it has '/' */
  const char *cwd;           /**< folder to run in; NULL: ours */
  const char *const *env;    /**< extra "NAME=VALUE" entries, NULL-terminated; NULL: none */
  const char *stdout_path;   /**< file for stdout; NULL: inherit ours */
  const char *stderr_path;   /**< file for stderr; NULL: inherit; == stdout_path: one file */
  int capture_stdout;        /**< non-zero: stdout goes into pb_proc_result.out instead */
  double timeout_s;          /**< wall-clock limit; 0: none */
  volatile sig_atomic_t *cancel; /**< stop the child when *cancel turns non-zero; NULL: a signal
                                      that would end us stops it, then ends us */
  void (*tick)(void *ctx, double elapsed_s); /**< about once a second while it runs; NULL: none */
  void *tick_ctx;
} pb_proc;

/** What the child did. */
typedef struct pb_proc_result {
  int exit_code;    /**< its exit status; -1 when a signal ended it or it never ran */
  int term_signal;  /**< the signal that ended it, or 0 */
  int started;      /**< the program was started */
  int timed_out;    /**< stopped because timeout_s passed */
  int canceled;     /**< stopped because of *cancel or a signal to us */
  double wall_s;    /**< from start to reaped */
  double maxrss_mb; /**< peak resident set of the largest process of its tree, MiB */
  char *out;        /**< captured stdout, NUL-terminated (capture_stdout only); free() it */
  size_t out_len;   /**< bytes in out */
} pb_proc_result;

/** Runs p->argv and waits: 0 on exit status 0, PB_ECANCELED when canceled, PB_ECHILD (saying
 * why, with the tail of stderr_path) otherwise. res may be NULL; when given it is always filled. */
PB_API int pb_proc_run(const pb_proc *p, pb_proc_result *res, struct pb_error *err);
/** Runs fn(ctx) in a forked copy of this process and waits for it as pb_proc_run does (p may be
 * NULL: only its cancel and timeout_s are used). 0, PB_ECANCELED or PB_ECHILD. */
PB_API int pb_proc_fork(int (*fn)(void *ctx), void *ctx, const pb_proc *p, pb_proc_result *res,
                        struct pb_error *err);
/** The last `lines` lines of a text file into buf ("" when path is NULL or unreadable). */
PB_API void pb_proc_tail(const char *path, int lines, char *buf, size_t size);
/** Registers the process's stop flag (what a signal handler sets; NULL: none): children that
 * pb_proc_run waits for stop when it turns non-zero, and pb_stop_requested reports it. */
PB_API void pb_stop_flag_set(volatile sig_atomic_t *flag);
/** The registered flag's value, or 0; async-signal-safe. */
PB_API int pb_stop_requested(void);
/** @} */

/** Registers fn as the source of a library's version (key "<library>_version", a literal) for
 * the environment that pb_env_collect reports; fn NULL removes it. */
PB_API void pb_env_register_version(const char *key, void (*fn)(char *buf, size_t size));

#ifdef __cplusplus
}
#endif
#endif
