/* Finding pipebench's Python helpers and running them as child processes with a time limit. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pipebench/sys.h"
#include "tools/peer.h"

/* An installed pipebench keeps its helpers in PREFIX/share/pipebench/python (pb_install_path). */
static char installed_python[4200];
static pthread_once_t installed_once = PTHREAD_ONCE_INIT;

static void find_installed(void) {
  pb_install_path("python", "pipebench_peer.py", installed_python, sizeof installed_python);
}

const char *pb__python_dir(void) {
  const char *env = getenv("PIPEBENCH_PYTHON_DIR");
  if (env != NULL && env[0] != '\0') return env;
  pthread_once(&installed_once, find_installed);
  /* not installed: a build, whose helpers are in the source tree */
  return installed_python[0] != '\0' ? installed_python : PB_SOURCE_PYTHON_DIR;
}

int pb__run_child(char *const argv[], double timeout_s, const char *err_path, struct pb_error *err) {
  pb_proc p = {.argv = (const char *const *)argv, .stdout_path = err_path,
                .stderr_path = err_path, .timeout_s = timeout_s};
  pb_proc_result r;
  struct pb_error why = {{0}};
  int rc = pb_proc_run(&p, &r, &why);
  if (rc == PB_OK || rc == PB_ECANCELED || !r.started)
    return rc == PB_OK ? PB_OK : pb_error_set(err, rc, "%s", why.message);
  const char *what = argv[1] ? argv[1] : "";
  if (r.timed_out)
    return pb_error_set(err, PB_ECHILD, "%s %s: no result after %.0f s, stopped", argv[0], what,
                        timeout_s);
  /* the last lines of its output: that is where Python puts the exception */
  char tail[600];
  pb_proc_tail(err_path, 4, tail, sizeof tail);
  if (r.term_signal != 0)
    return pb_error_set(err, PB_ECHILD, "%s %s was killed by signal %d: %s", argv[0], what,
                        r.term_signal, tail);
  return pb_error_set(err, PB_ECHILD, "%s %s failed (exit %d): %s", argv[0], what, r.exit_code,
                      tail);
}
