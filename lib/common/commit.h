/* Putting several finished outputs into place so that, at every instant, either all the old ones
 * or all the new ones are complete and findable, even across a SIGKILL.
 *
 * A commit in folder DIR under the name J (DIR/.J.pbcommit, the journal):
 *   1. the journal is made complete under a temporary name and linked to its own name (link()
 *      fails when another commit holds it: one commit per name at a time);
 *   2. the staging folder that holds the new outputs is renamed to DIR/.J.pbcommit.d;
 *   3. each output name in turn: what stands there moves into .J.pbcommit.d, the new one moves in;
 *   4. the journal is removed, then .J.pbcommit.d with the earlier outputs in it.
 * Recovery (the next commit under J, or a reader of one of its outputs) rolls an interrupted
 * commit forward: every step above can be finished from what is on disk, because the new outputs
 * were complete before the journal existed. A journal whose writer is still alive is left alone. */
#ifndef PB_COMMON_COMMIT_H
#define PB_COMMON_COMMIT_H

#include "pipebench/core.h"

/** Renames stage (a folder inside dir holding the new outputs) to dir's commit folder for name,
 * then moves stage/from[i] to dir/to[i] for i < n (names relative to stage and dir, no '/'),
 * what stood at dir/to[i] going into the commit folder, which is removed at the end. SIGINT,
 * SIGTERM and SIGHUP are held until it returns. Another commit of name already in dir is
 * recovered first, or refused (PB_EIO) when its writer still runs. On an error before any move
 * nothing has changed; an error during the moves is finished by the next recovery. */
int pb__commit(const char *dir, const char *name, const char *stage, const char *const *from,
               const char *const *to, int n, struct pb_error *err);

/** Finishes an interrupted commit of name in dir, if there is one: *recovered (may be NULL) is
 * set to 1 when one was finished. PB_EIO when its writer (pid, this host) still runs or when the
 * journal is unusable; the message names the journal and what to do. */
int pb__commit_recover(const char *dir, const char *name, int *recovered, struct pb_error *err);

/** Before reading path: finishes the interrupted commits that may hold it (of path's own name,
 * as convert writes, and of "gen", as gen writes in path's folder). */
int pb__commit_settle(const char *path, struct pb_error *err);

#endif
