/* Child processes of pipebench revs: common/proc's runner, with /dev/null for the outputs revs
 * does not keep and its own word for a timeout (the --timeout option). */
#include <signal.h>
#include <string.h>

#include "pipebench/sys.h"
#include "revs/revs_internal.h"

int pb__revs_exec(char *const argv[], const char *cwd, char *const env_add[], double timeout_s,
                  const char *out_path, const char *err_path, volatile sig_atomic_t *cancel,
                  pb__revs_child *res, struct pb_error *err) {
  pb_proc p = {
      .argv = (const char *const *)argv,
      .cwd = cwd,
      .env = (const char *const *)env_add,
      .stdout_path = out_path != NULL ? out_path : "/dev/null",
      .stderr_path = err_path != NULL ? err_path : "/dev/null",
      .timeout_s = timeout_s,
      .cancel = cancel,
  };
  pb_proc_result r;
  int rc = pb_proc_run(&p, &r, err);
  if (res != NULL) {
    *res = (pb__revs_child){.wall_s = r.wall_s, .maxrss_mb = r.maxrss_mb,
                            .exit_code = r.exit_code, .signal = r.term_signal,
                            .timed_out = r.timed_out, .canceled = r.canceled};
  }
  if (r.timed_out) {
    char tail[700];
    pb_proc_tail(err_path, 6, tail, sizeof tail);
    return pb_error_set(err, PB_ECHILD, "no result after %.0f s (--timeout), stopped%s%s",
                        timeout_s, tail[0] ? "; last output: " : "", tail);
  }
  return rc;
}
