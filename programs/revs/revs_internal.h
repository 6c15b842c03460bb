/* Internals of pipebench revs shared by its files. */
#ifndef PB_REVS_INTERNAL_H
#define PB_REVS_INTERNAL_H

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stddef.h>

#include "pipebench/revs.h"

/** Splits "a=1 b=2;c=3" into owned "key=value" strings (free with pb__revs_free_strings).
 * PB_EFORMAT when an item is not key=value. */
int pb__revs_split_overrides(const char *text, char ***items, size_t *n, struct pb_error *err);
void pb__revs_free_strings(char **items, size_t n);

/** What one child process did. */
typedef struct pb__revs_child {
  double wall_s;     /**< fork to reaped, monotonic clock */
  double maxrss_mb;  /**< peak resident set of the largest process in its tree (wait4), MiB */
  int exit_code;     /**< -1 when killed by a signal */
  int signal;        /**< the signal that ended it, or 0 */
  int timed_out;
  int canceled;
} pb__revs_child;

/** Runs argv (found on PATH) in cwd (NULL: here) in a process group of its own, with env_add
 * ("KEY=value" entries, NULL-terminated, may be NULL) added to the environment, stdin from
 * /dev/null, stdout to out_path and stderr to err_path (the same path: both into one file;
 * NULL: /dev/null). Past timeout_s, or when *cancel becomes non-zero, the whole group is sent
 * SIGTERM, then SIGKILL after two seconds. Returns 0 when it exited 0; PB_ECANCELED when
 * canceled; PB_ECHILD (message with the last lines of err_path) otherwise. res may be NULL. */
int pb__revs_exec(char *const argv[], const char *cwd, char *const env_add[], double timeout_s,
                  const char *out_path, const char *err_path, volatile sig_atomic_t *cancel,
                  pb__revs_child *res, struct pb_error *err);

/** Samples, while a task runs, the summed resident set of our descendant processes and (where
 * nvidia-smi answers) the GPU memory they hold. Start before the task, stop after it. */
typedef struct pb__revs_sampler {
  pthread_t thread;
  atomic_int stop;
  int running;
  int gpu_tried;       /**< nvidia-smi is on the PATH */
  int gpu_answered;    /**< it answered at least once */
  double peak_tree_mb; /**< largest summed RSS seen, MiB (0: no sample saw the task) */
  double peak_gpu_mb;  /**< largest GPU memory of our processes seen, MiB */
} pb__revs_sampler;

void pb__revs_sampler_start(pb__revs_sampler *s);
void pb__revs_sampler_stop(pb__revs_sampler *s);

/** Short labels for n names (branch names) of at most max_chars characters each, distinct
 * when the names are: the parts all names share (a common prefix, a common suffix such as a
 * "-014viXtwt7gNsiG4xedaMKNA" id) go first, written "...", so that a label keeps the part that
 * tells the names apart; only then is that part cut at its end. out[i] gets the label of
 * names[i] (out_size bytes each). */
void pb__revs_short_labels(const char *const *names, size_t n, size_t max_chars, char *out,
                           size_t out_size);

#endif
