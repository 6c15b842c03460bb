/* common/proc: exit codes, signals, output to files and captured, environment and folder, and
 * stops (timeout, cancel flag, a signal to us) that reach the child's own children. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "check.h"
#include "common/proc.h"

static char dir[] = "/tmp/pb_test_proc_XXXXXX";

static void path_in(char *buf, size_t size, const char *name) {
  snprintf(buf, size, "%s/%s", dir, name);
}

static void sleep_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

/* The pid written into path by a child, waiting up to 5 s for it to appear. */
static pid_t read_pid(const char *path) {
  for (int i = 0; i < 500; i++) {
    FILE *f = fopen(path, "r");
    long v = 0;
    int got = f != NULL && fscanf(f, "%ld", &v) == 1;
    if (f != NULL) fclose(f);
    if (got && v > 0) return (pid_t)v;
    sleep_ms(10);
  }
  return -1;
}

/* Whether pid has ended (gone, or a zombie waiting for a reaper), waiting up to 3 s. */
static int ended(pid_t pid) {
  for (int i = 0; i < 300; i++) {
    if (kill(pid, 0) != 0 && errno == ESRCH) return 1;
    char path[64], stat[256] = "";
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (f != NULL) {
      size_t n = fread(stat, 1, sizeof stat - 1, f);
      stat[n] = '\0';
      fclose(f);
      const char *close_paren = strrchr(stat, ')');
      if (close_paren != NULL && close_paren[1] == ' ' && close_paren[2] == 'Z') return 1;
    }
    sleep_ms(10);
  }
  return 0;
}

static char *slurp(const char *path) {
  static char buf[4096];
  buf[0] = '\0';
  FILE *f = fopen(path, "rb");
  if (f == NULL) return buf;
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  buf[n] = '\0';
  fclose(f);
  return buf;
}

static int run_sh(const char *script, pb__proc_result *res, struct pb_error *err) {
  const char *argv[] = {"sh", "-c", script, NULL};
  pb__proc p = {.argv = argv};
  return pb__proc_run(&p, res, err);
}

static void test_exit_codes(void) {
  pb__proc_result r;
  struct pb_error e = {{0}};
  EXPECT_EQ(run_sh("exit 0", &r, &e), PB_OK);
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.term_signal, 0);
  EXPECT(r.started);
  EXPECT(r.wall_s > 0);
  EXPECT_EQ(run_sh("exit 3", &r, &e), PB_ECHILD);
  EXPECT_EQ(r.exit_code, 3);
  EXPECT_CONTAINS(e.message, "exit status 3");
  EXPECT_EQ(run_sh("sleep 0.2", &r, &e), PB_OK);
  EXPECT(r.wall_s >= 0.2 && r.wall_s < 5);
  EXPECT(r.maxrss_mb > 0);
  EXPECT_EQ(run_sh("exit 0", NULL, NULL), PB_OK); /* res and err may be NULL */
}

static void test_signals(void) {
  pb__proc_result r;
  struct pb_error e = {{0}};
  EXPECT_EQ(run_sh("kill -USR1 $$", &r, &e), PB_ECHILD);
  EXPECT_EQ(r.term_signal, SIGUSR1);
  EXPECT_EQ(r.exit_code, -1);
  EXPECT_CONTAINS(e.message, "killed by signal");
}

static void test_cannot_start(void) {
  pb__proc_result r;
  struct pb_error e = {{0}};
  const char *argv[] = {"/nonexistent/pb_no_such_program", NULL};
  pb__proc p = {.argv = argv};
  EXPECT_EQ(pb__proc_run(&p, &r, &e), PB_ECHILD);
  EXPECT_CONTAINS(e.message, "cannot run /nonexistent/pb_no_such_program");
  EXPECT_EQ(r.exit_code, 127);
  EXPECT(!r.started);
  const char *argv2[] = {"true", NULL};
  pb__proc q = {.argv = argv2, .cwd = "/nonexistent/pb_no_such_folder"};
  EXPECT_EQ(pb__proc_run(&q, &r, &e), PB_ECHILD);
  EXPECT_CONTAINS(e.message, "cannot enter /nonexistent/pb_no_such_folder");
  pb__proc z = {0};
  EXPECT_EQ(pb__proc_run(&z, &r, &e), PB_EINVAL);
  char log[4200];
  snprintf(log, sizeof log, "%s/no/such/dir/log", dir);
  pb__proc w = {.argv = argv2, .stderr_path = log};
  EXPECT(pb__proc_run(&w, &r, &e) < 0);
  EXPECT_CONTAINS(e.message, log);
}

static void test_outputs(void) {
  char out[4200], err_path[4200], both[4200];
  path_in(out, sizeof out, "out.txt");
  path_in(err_path, sizeof err_path, "err.txt");
  path_in(both, sizeof both, "both.txt");
  pb__proc_result r;
  struct pb_error e = {{0}};
  const char *argv[] = {"sh", "-c", "echo to-out; echo to-err >&2", NULL};
  pb__proc p = {.argv = argv, .stdout_path = out, .stderr_path = err_path};
  EXPECT_EQ(pb__proc_run(&p, &r, &e), PB_OK);
  EXPECT(strcmp(slurp(out), "to-out\n") == 0);
  EXPECT(strcmp(slurp(err_path), "to-err\n") == 0);
  EXPECT(r.out == NULL);
  pb__proc q = {.argv = argv, .stdout_path = both, .stderr_path = both};
  EXPECT_EQ(pb__proc_run(&q, &r, &e), PB_OK);
  EXPECT(strcmp(slurp(both), "to-out\nto-err\n") == 0);
  /* captured stdout; stderr to a file whose last lines the error quotes */
  const char *argv2[] = {"sh", "-c", "echo captured; echo line1 >&2; echo line2 >&2; exit 4", NULL};
  pb__proc c = {.argv = argv2, .capture_stdout = 1, .stderr_path = err_path};
  EXPECT_EQ(pb__proc_run(&c, &r, &e), PB_ECHILD);
  EXPECT(r.out != NULL && strcmp(r.out, "captured\n") == 0);
  EXPECT_EQ((long long)r.out_len, 9);
  EXPECT_CONTAINS(e.message, "exit status 4: line1\nline2");
  free(r.out);
  /* more than one pipe's worth */
  const char *argv3[] = {"head", "-c", "3000000", "/dev/zero", NULL};
  pb__proc big = {.argv = argv3, .capture_stdout = 1};
  EXPECT_EQ(pb__proc_run(&big, &r, &e), PB_OK);
  EXPECT_EQ((long long)r.out_len, 3000000);
  free(r.out);
  /* nothing printed: an empty string, not NULL */
  const char *argv4[] = {"true", NULL};
  pb__proc none = {.argv = argv4, .capture_stdout = 1};
  EXPECT_EQ(pb__proc_run(&none, &r, &e), PB_OK);
  EXPECT(r.out != NULL && r.out[0] == '\0' && r.out_len == 0);
  free(r.out);
}

static void test_env_and_cwd(void) {
  setenv("PIPEBENCH_PROC_TEST_A", "ours", 1);
  setenv("PIPEBENCH_PROC_TEST_B", "kept", 1);
  const char *env[] = {"PIPEBENCH_PROC_TEST_A=theirs", "PIPEBENCH_PROC_TEST_C=new", NULL};
  const char *argv[] = {"sh", "-c", "printf '%s %s %s %s' \"$PIPEBENCH_PROC_TEST_A\" \"$PIPEBENCH_PROC_TEST_B\" "
                        "\"$PIPEBENCH_PROC_TEST_C\" \"$(pwd -P)\"", NULL};
  pb__proc p = {.argv = argv, .env = env, .cwd = dir, .capture_stdout = 1};
  pb__proc_result r;
  struct pb_error e = {{0}};
  EXPECT_EQ(pb__proc_run(&p, &r, &e), PB_OK);
  char want[4300], real[4096];
  EXPECT(realpath(dir, real) != NULL);
  snprintf(want, sizeof want, "theirs kept new %s", real);
  EXPECT(r.out != NULL && strcmp(r.out, want) == 0);
  if (r.out != NULL && strcmp(r.out, want) != 0) fprintf(stderr, "got '%s', want '%s'\n", r.out, want);
  free(r.out);
  EXPECT(strcmp(getenv("PIPEBENCH_PROC_TEST_A"), "ours") == 0); /* ours untouched */
}

/* A timeout stops the child and the grandchild it started, whether or not they honour
 * SIGTERM (a torch DataLoader's workers are grandchildren). */
static void test_timeout_kills_group(int ignore_term) {
  char pidfile[4200], script[8600];
  path_in(pidfile, sizeof pidfile, ignore_term ? "gc_ignore.pid" : "gc.pid");
  unlink(pidfile);
  snprintf(script, sizeof script, "%s sleep 100 & echo $! > '%s'; wait; sleep 100",
           ignore_term ? "trap '' TERM;" : "", pidfile);
  pb__proc_result r;
  struct pb_error e = {{0}};
  const char *argv[] = {"sh", "-c", script, NULL};
  pb__proc p = {.argv = argv, .timeout_s = 0.5};
  EXPECT_EQ(pb__proc_run(&p, &r, &e), PB_ECHILD);
  EXPECT(r.timed_out);
  EXPECT_CONTAINS(e.message, "no result after");
  EXPECT(r.wall_s >= 0.5 && r.wall_s < 5.0);
  if (ignore_term) EXPECT_EQ(r.term_signal, SIGKILL);
  else EXPECT_EQ(r.term_signal, SIGTERM);
  pid_t gc = read_pid(pidfile);
  EXPECT(gc > 0);
  if (gc > 0) {
    EXPECT(ended(gc));
    kill(gc, SIGKILL); /* whatever the check said, leave nothing behind */
  }
}

/* The flag is what a caller's signal handler sets (pipebench revs sets it on Ctrl-C): here a
 * timer's. */
static volatile sig_atomic_t cancel_flag;

static void on_alarm(int sig) {
  (void)sig;
  cancel_flag = 1;
}

static void test_cancel(void) {
  char pidfile[4200], script[4400];
  path_in(pidfile, sizeof pidfile, "cancel.pid");
  unlink(pidfile);
  snprintf(script, sizeof script, "sleep 100 & echo $! > '%s'; wait", pidfile);
  const char *argv[] = {"sh", "-c", script, NULL};
  cancel_flag = 0;
  pb__proc p = {.argv = argv, .cancel = &cancel_flag, .timeout_s = 60};
  struct sigaction sa, old;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_alarm;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGALRM, &sa, &old);
  struct itimerval in300ms = {{0, 0}, {0, 300000}};
  setitimer(ITIMER_REAL, &in300ms, NULL);
  pb__proc_result r;
  struct pb_error e = {{0}};
  EXPECT_EQ(pb__proc_run(&p, &r, &e), PB_ECANCELED);
  sigaction(SIGALRM, &old, NULL);
  EXPECT(r.canceled);
  EXPECT(!r.timed_out);
  EXPECT(r.wall_s < 10);
  pid_t gc = read_pid(pidfile);
  EXPECT(gc > 0);
  if (gc > 0) {
    EXPECT(ended(gc));
    kill(gc, SIGKILL);
  }
}

/* No cancel flag: SIGINT to us stops the group, and then ends us as it would have. */
static void test_interrupt(void) {
  char pidfile[4200], script[4400];
  path_in(pidfile, sizeof pidfile, "int.pid");
  unlink(pidfile);
  snprintf(script, sizeof script, "sleep 100 & echo $! > '%s'; wait", pidfile);
  pid_t helper = fork();
  if (helper == 0) {
    signal(SIGINT, SIG_DFL);
    const char *argv[] = {"sh", "-c", script, NULL};
    pb__proc p = {.argv = argv, .timeout_s = 60};
    pb__proc_run(&p, NULL, NULL);
    _exit(0); /* not reached when SIGINT is delivered again */
  }
  EXPECT(helper > 0);
  pid_t gc = read_pid(pidfile);
  EXPECT(gc > 0);
  kill(helper, SIGINT);
  int status = 0;
  EXPECT(waitpid(helper, &status, 0) == helper);
  EXPECT(WIFSIGNALED(status) && WTERMSIG(status) == SIGINT);
  if (gc > 0) {
    EXPECT(ended(gc));
    kill(gc, SIGKILL);
  }
}

/* A caller with its own SIGINT handler decides itself: the child runs on to its end. */
static volatile sig_atomic_t handled;
static void on_int(int sig) {
  (void)sig;
  handled = 1;
}

static void test_interrupt_handled(void) {
  char pidfile[4200], donefile[4200], script[8600];
  path_in(pidfile, sizeof pidfile, "handled.pid");
  path_in(donefile, sizeof donefile, "handled.done");
  unlink(pidfile);
  unlink(donefile);
  snprintf(script, sizeof script, "echo $$ > '%s'; sleep 0.5; echo done > '%s'", pidfile, donefile);
  pid_t helper = fork();
  if (helper == 0) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_int;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    const char *argv[] = {"sh", "-c", script, NULL};
    pb__proc p = {.argv = argv, .timeout_s = 60};
    int rc = pb__proc_run(&p, NULL, NULL);
    _exit(rc == PB_OK && handled ? 0 : 1);
  }
  EXPECT(helper > 0);
  EXPECT(read_pid(pidfile) > 0);
  kill(helper, SIGINT);
  int status = 0;
  EXPECT(waitpid(helper, &status, 0) == helper);
  EXPECT(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  EXPECT(strcmp(slurp(donefile), "done\n") == 0);
}

static void test_tail(void) {
  char path[4200], buf[64];
  path_in(path, sizeof path, "tail.txt");
  FILE *f = fopen(path, "w");
  EXPECT(f != NULL);
  if (f == NULL) return;
  fputs("a\nb\nc\nd\n\n", f);
  fclose(f);
  pb__proc_tail(path, 2, buf, sizeof buf);
  EXPECT(strcmp(buf, "c\nd") == 0);
  pb__proc_tail(path, 10, buf, sizeof buf);
  EXPECT(strcmp(buf, "a\nb\nc\nd") == 0);
  pb__proc_tail(path, 10, buf, 4); /* the last 3 bytes only */
  EXPECT(strcmp(buf, "d") == 0);
  pb__proc_tail(NULL, 2, buf, sizeof buf);
  EXPECT(buf[0] == '\0');
}

/* The process's stop flag (what pipebench run's signal handler sets) stops a child whatever its
 * own cancel says, within half a second's grace even when the child ignores SIGTERM. */
static volatile sig_atomic_t stop_flag;

static void on_alarm_stop(int sig) { stop_flag = sig; }

static void arm_stop_in_300ms(struct sigaction *old) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_alarm_stop;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGALRM, &sa, old);
  struct itimerval in300ms = {{0, 0}, {0, 300000}};
  setitimer(ITIMER_REAL, &in300ms, NULL);
}

static void test_stop_flag(void) {
  char pidfile[4200], script[4400];
  path_in(pidfile, sizeof pidfile, "stop.pid");
  unlink(pidfile);
  snprintf(script, sizeof script, "trap '' TERM; sleep 100 & echo $! > '%s'; wait", pidfile);
  const char *argv[] = {"sh", "-c", script, NULL};
  static volatile sig_atomic_t never;
  pb__proc p = {.argv = argv, .cancel = &never, .timeout_s = 60};
  stop_flag = 0;
  pb__stop_flag_set(&stop_flag);
  EXPECT_EQ(pb__stop_requested(), 0);
  struct sigaction old;
  arm_stop_in_300ms(&old);
  pb__proc_result r;
  struct pb_error e = {{0}};
  EXPECT_EQ(pb__proc_run(&p, &r, &e), PB_ECANCELED);
  sigaction(SIGALRM, &old, NULL);
  EXPECT_EQ(pb__stop_requested(), SIGALRM);
  EXPECT(r.canceled);
  EXPECT(r.wall_s >= 0.25 && r.wall_s < 1.5); /* 0.3 s, then at most 0.5 s of grace */
  EXPECT_EQ(r.term_signal, SIGKILL);            /* it ignored SIGTERM */
  pid_t gc = read_pid(pidfile);
  EXPECT(gc > 0);
  if (gc > 0) {
    EXPECT(ended(gc));
    kill(gc, SIGKILL);
  }
  /* A child started once the flag is set is stopped at once. */
  EXPECT_EQ(pb__proc_run(&p, &r, &e), PB_ECANCELED);
  pb__stop_flag_set(NULL);
  EXPECT_EQ(pb__stop_requested(), 0);
}

/* A function in a forked copy: its result comes back through shared memory, its failure as
 * PB_ECHILD, and a stop ends it at once, with its process group. */
typedef struct shared {
  int value;
  pid_t pid, grandchild;
} shared;

static int put_value(void *ctx) {
  shared *sh = ctx;
  sh->value = 42;
  sh->pid = getpid();
  return 0;
}

static int fail_fn(void *ctx) {
  (void)ctx;
  return 7;
}

static int hang(void *ctx) {
  shared *sh = ctx;
  sh->pid = getpid();
  pid_t g = fork(); /* a process of its own: the stop must reach it too */
  if (g == 0) {
    for (;;) pause();
  }
  sh->grandchild = g;
  for (;;) pause();
  return 0;
}

static void test_fork(void) {
  shared *sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  CHECK(sh != MAP_FAILED);
  memset(sh, 0, sizeof *sh);
  pb__proc_result r;
  struct pb_error e = {{0}};
  EXPECT_EQ(pb__proc_fork(put_value, sh, NULL, &r, &e), PB_OK);
  EXPECT_EQ(sh->value, 42);
  EXPECT(sh->pid > 0 && sh->pid != getpid());
  EXPECT_EQ(r.exit_code, 0);

  EXPECT_EQ(pb__proc_fork(fail_fn, sh, NULL, &r, &e), PB_ECHILD);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_CONTAINS(e.message, "exit status 1");

  memset(sh, 0, sizeof *sh);
  stop_flag = 0;
  pb__stop_flag_set(&stop_flag);
  struct sigaction old;
  arm_stop_in_300ms(&old);
  EXPECT_EQ(pb__proc_fork(hang, sh, NULL, &r, &e), PB_ECANCELED);
  sigaction(SIGALRM, &old, NULL);
  pb__stop_flag_set(NULL);
  EXPECT(r.canceled);
  EXPECT(r.wall_s < 1.5);
  EXPECT_EQ(r.term_signal, SIGTERM);
  EXPECT(sh->pid > 0 && sh->grandchild > 0);
  if (sh->grandchild > 0) {
    EXPECT(ended(sh->grandchild));
    kill(sh->grandchild, SIGKILL);
  }
  /* a time limit applies as to a program */
  pb__proc p = {.timeout_s = 0.3};
  memset(sh, 0, sizeof *sh);
  EXPECT_EQ(pb__proc_fork(hang, sh, &p, &r, &e), PB_ECHILD);
  EXPECT(r.timed_out);
  if (sh->grandchild > 0) {
    EXPECT(ended(sh->grandchild));
    kill(sh->grandchild, SIGKILL);
  }
  munmap(sh, sizeof *sh);
}

int main(void) {
  if (mkdtemp(dir) == NULL) {
    perror("mkdtemp");
    return 1;
  }
  test_exit_codes();
  test_signals();
  test_cannot_start();
  test_outputs();
  test_env_and_cwd();
  test_timeout_kills_group(0);
  test_timeout_kills_group(1);
  test_cancel();
  test_interrupt();
  test_interrupt_handled();
  test_stop_flag();
  test_fork();
  test_tail();
  const char *rm[] = {"rm", "-rf", dir, NULL};
  pb__proc p = {.argv = rm};
  if (pb__proc_run(&p, NULL, NULL) != PB_OK) fprintf(stderr, "could not remove %s\n", dir);
  if (check_failures()) fprintf(stderr, "%d check(s) failed\n", check_failures());
  else printf("test_proc: all checks passed\n");
  return check_failures() ? 1 : 0;
}
