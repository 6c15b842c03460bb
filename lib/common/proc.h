/* The one way pipebench runs a child process (Python peers, git, pipebench itself for revs):
 * argv without a shell, in a process group of its own so that a timeout or an interrupt stops
 * the child and everything it started (a torch DataLoader's workers too). Internal. */
#ifndef PB_COMMON_PROC_H
#define PB_COMMON_PROC_H

#include <signal.h>
#include <stddef.h>

#include "pipebench/core.h"
#include "pipebench/sys.h"

/** What to run and what the child did: the public pb_proc and pb_proc_result
 * (pipebench/sys.h). Zero-initialise and fill what you need; every pointer is borrowed for the
 * call only. */
typedef pb_proc pb__proc;
typedef pb_proc_result pb__proc_result;

/** Runs p->argv and waits for it. stdin is /dev/null. The child leads a new process group
 * (setpgid); when timeout_s passes or it is canceled, the whole group gets SIGTERM, then
 * SIGKILL two seconds later (half a second when canceled: a stop asked for by a signal must be
 * quick), and is reaped, so grandchildren never outlive the call. The child is killed when the
 * thread that started it ends (PR_SET_PDEATHSIG: this call waits, so that is when the process
 * dies, by SIGKILL too); what it started in its group sees no such signal. With p->cancel NULL, the
 * call catches those of SIGINT, SIGTERM and SIGHUP that are at their default action (they would
 * end us, and the child, in a group of its own, no longer sees a terminal's Ctrl-C): on one, it
 * stops the group, puts the default back and raises the signal again, so the process ends as it
 * would have. Signals the caller handles or ignores are left alone, and so is the child.
 * Returns 0 when the child exited with status 0. PB_ECANCELED when canceled. PB_ECHILD when it
 * could not start, exited non-zero, was killed or timed out: the message says which ("exit
 * status 3", "killed by signal 9", "no result after 5 s, stopped") followed by the last lines
 * of stderr_path when there is one. res may be NULL; when given it is always filled (its out
 * too, even on failure). */
int pb__proc_run(const pb__proc *p, pb__proc_result *res, struct pb_error *err);

/** Registers the process's stop flag (what a SIGINT/SIGTERM handler sets; NULL: none). While
 * one is registered, every child that pb__proc_run or pb__proc_fork waits for is stopped as
 * soon as *flag turns non-zero, whatever the call's own cancel says, and so is every loop that
 * asks pb__stop_requested. The flag is borrowed until it is unregistered. */
void pb__stop_flag_set(volatile sig_atomic_t *flag);
/** The registered flag's value (a signal number, by convention), or 0: async-signal-safe,
 * cheap enough for a timing loop. */
int pb__stop_requested(void);

/** Runs fn(ctx) in a forked copy of this process, in a process group of its own, and waits
 * for it as pb__proc_run waits for a program (p->cancel, p->timeout_s and the stop flag; p->argv
 * and the redirections are not used, p may be NULL). For work that cannot stop half-way by
 * itself (a library call with no cancel of its own): a stop ends the copy at once. The copy's
 * signals are back at their defaults, it is killed when the caller dies (SIGKILL included, as
 * in pb__proc_run), it exits with status 0 when fn returned 0, and it shares
 * with the caller only what the caller mapped MAP_SHARED before the call (where fn puts its
 * results). Returns 0, PB_ECANCELED when stopped, PB_ECHILD when the copy failed or died. */
int pb__proc_fork(int (*fn)(void *ctx), void *ctx, const pb__proc *p, pb__proc_result *res,
                  struct pb_error *err);

/** The last `lines` lines (at most size-1 bytes) of a text file into buf, trailing newlines and
 * spaces dropped: where a tool says what went wrong. "" when path is NULL or unreadable. */
void pb__proc_tail(const char *path, int lines, char *buf, size_t size);

#endif
