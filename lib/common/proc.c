/* Child processes: argv without a shell, a process group of their own, a time limit, and a stop
 * that reaches every process the child started. */
#include "common/proc.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common/safe_open.h"

extern char **environ;

enum {
  STOP_GRACE_MS = 2000,              /* SIGTERM to SIGKILL */
  CANCEL_GRACE_MS = 500,             /* the same when a stop was asked for */
  CAPTURE_MAX = 256 * 1024 * 1024    /* a child printing more than this is broken */
};

void pb__proc_tail(const char *path, int lines, char *buf, size_t size) {
  if (size == 0) return;
  buf[0] = '\0';
  if (path == NULL || size < 2) return;
  FILE *f = fopen(path, "rb");
  if (f == NULL) return;
  long start = 0;
  if (fseek(f, 0, SEEK_END) == 0) {
    long n = ftell(f);
    start = n > (long)size - 1 ? n - (long)size + 1 : 0;
  }
  fseek(f, start, SEEK_SET);
  size_t got = fread(buf, 1, size - 1, f);
  buf[got] = '\0';
  fclose(f);
  while (got > 0 && (buf[got - 1] == '\n' || buf[got - 1] == ' ')) buf[--got] = '\0';
  int seen = 0;
  for (size_t i = got; i-- > 0;) {
    if (buf[i] == '\n' && ++seen == lines) {
      memmove(buf, buf + i + 1, got - i);
      break;
    }
  }
}

/* ---- the process's stop flag ---------------------------------------------------------------- */

static volatile sig_atomic_t *stop_flag;

void pb__stop_flag_set(volatile sig_atomic_t *flag) { __atomic_store_n(&stop_flag, flag, __ATOMIC_SEQ_CST); }

int pb__stop_requested(void) {
  volatile sig_atomic_t *f = __atomic_load_n(&stop_flag, __ATOMIC_ACQUIRE);
  return f != NULL ? (int)*f : 0;
}

/* ---- signals while we wait (p->cancel == NULL) -------------------------------------------- */

static const int guard_sigs[3] = {SIGINT, SIGTERM, SIGHUP};
static pthread_mutex_t guard_mu = PTHREAD_MUTEX_INITIALIZER;
static int guard_users;
static int guard_installed[3];
static struct sigaction guard_old[3];
static volatile sig_atomic_t guard_caught;

static void guard_handler(int sig) { guard_caught = sig; }

/* Several threads may wait for children at once: the first installs, the last restores. */
static void guard_enter(void) {
  pthread_mutex_lock(&guard_mu);
  if (guard_users++ == 0) {
    guard_caught = 0;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = guard_handler;
    sigemptyset(&sa.sa_mask);
    for (int i = 0; i < 3; i++) {
      guard_installed[i] = 0;
      if (sigaction(guard_sigs[i], NULL, &guard_old[i]) != 0) continue;
      /* Only a signal that would end us is taken: an ignored one (nohup) stays ignored, and a
       * caller with a handler of its own decides itself what its children do. */
      if ((guard_old[i].sa_flags & SA_SIGINFO) || guard_old[i].sa_handler != SIG_DFL) continue;
      guard_installed[i] = sigaction(guard_sigs[i], &sa, NULL) == 0;
    }
  }
  pthread_mutex_unlock(&guard_mu);
}

/* The last one out puts the caller's handlers back and delivers a caught signal to them. */
static void guard_leave(void) {
  pthread_mutex_lock(&guard_mu);
  int sig = 0;
  if (--guard_users == 0) {
    for (int i = 0; i < 3; i++)
      if (guard_installed[i]) sigaction(guard_sigs[i], &guard_old[i], NULL);
    sig = guard_caught;
    guard_caught = 0;
  }
  pthread_mutex_unlock(&guard_mu);
  if (sig != 0) raise(sig);
}

/* ---- starting ------------------------------------------------------------------------------ */

/* Our environment with extra entries put over it (pointers borrowed; free only the array). */
static char **child_env(const char *const *extra) {
  size_t n = 0, m = 0;
  while (environ[n] != NULL) n++;
  while (extra != NULL && extra[m] != NULL) m++;
  char **env = calloc(n + m + 1, sizeof *env);
  if (env == NULL) return NULL;
  size_t k = 0;
  for (size_t i = 0; i < n; i++) {
    const char *eq = strchr(environ[i], '=');
    size_t kl = eq ? (size_t)(eq - environ[i]) : strlen(environ[i]);
    int replaced = 0;
    for (size_t j = 0; j < m && !replaced; j++)
      replaced = strncmp(extra[j], environ[i], kl) == 0 && extra[j][kl] == '=';
    if (!replaced) env[k++] = environ[i];
  }
  for (size_t j = 0; j < m; j++) env[k++] = (char *)(uintptr_t)extra[j];
  env[k] = NULL;
  return env;
}

/* File descriptors the child gets; -1 means "inherit". Opened here, before the fork, so that a
 * bad path is our error rather than a silent child. */
typedef struct fds {
  int out, err, cap_r, cap_w, report_r, report_w;
} fds;

static void fds_close(fds *f) {
  if (f->err == f->out) f->err = -1; /* stdout and stderr share one file */
  int *all[] = {&f->out, &f->err, &f->cap_r, &f->cap_w, &f->report_r, &f->report_w};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) {
    if (*all[i] >= 0) close(*all[i]);
    *all[i] = -1;
  }
}

/* A link at path is replaced, never written through (safe_open.h). */
static int open_out(const char *path, int *fd, struct pb_error *err) {
  return pb__open_output(path, fd, err);
}

static int fds_open(const pb__proc *p, fds *f, struct pb_error *err) {
  *f = (fds){-1, -1, -1, -1, -1, -1};
  int rc = PB_OK;
  int pipefd[2];
  if (p->capture_stdout) {
    if (pipe2(pipefd, O_CLOEXEC) != 0) return pb_error_set(err, -errno, "pipe: %s", strerror(errno));
    f->cap_r = pipefd[0];
    f->cap_w = pipefd[1];
    fcntl(f->cap_r, F_SETFL, O_NONBLOCK);
  } else if (p->stdout_path != NULL) {
    rc = open_out(p->stdout_path, &f->out, err);
  }
  if (rc == PB_OK && p->stderr_path != NULL) {
    if (f->out >= 0 && strcmp(p->stderr_path, p->stdout_path) == 0) f->err = f->out;
    else rc = open_out(p->stderr_path, &f->err, err);
  }
  /* the child writes here why exec failed; a successful exec closes it (O_CLOEXEC) */
  if (rc == PB_OK) {
    if (pipe2(pipefd, O_CLOEXEC) == 0) {
      f->report_r = pipefd[0];
      f->report_w = pipefd[1];
    } else {
      rc = pb_error_set(err, -errno, "pipe: %s", strerror(errno));
    }
  }
  if (rc != PB_OK) fds_close(f);
  return rc;
}

/* In a child right after fork: it dies with us, so that a SIGKILL of this process (which no
 * handler sees) leaves nothing running in a process group of its own. Our pid is taken before
 * the fork: had we died before the prctl, the child has another parent by now and ends here.
 * Async-signal-safe. */
static void die_with_parent(pid_t parent) {
  if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent) _exit(127);
}

/* In the child: only async-signal-safe calls until exec. */
static void child_main(const pb__proc *p, const fds *f, char **env, pid_t parent) {
  die_with_parent(parent);
  setpgid(0, 0);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, NULL);
  signal(SIGINT, SIG_DFL);
  signal(SIGTERM, SIG_DFL);
  signal(SIGHUP, SIG_DFL);
  signal(SIGPIPE, SIG_DFL);
  int in = open("/dev/null", O_RDONLY);
  if (in >= 0 && in != STDIN_FILENO) dup2(in, STDIN_FILENO);
  int out = f->cap_w >= 0 ? f->cap_w : f->out;
  if (out >= 0) dup2(out, STDOUT_FILENO);
  if (f->err >= 0) dup2(f->err, STDERR_FILENO);
  int why[2] = {0, 0};
  if (p->cwd != NULL && chdir(p->cwd) != 0) {
    why[1] = errno;
  } else {
    execvpe(p->argv[0], (char *const *)(uintptr_t)p->argv, env);
    why[0] = 1;
    why[1] = errno;
  }
  ssize_t w = write(f->report_w, why, sizeof why);
  (void)w;
  _exit(127);
}

/* ---- waiting ------------------------------------------------------------------------------- */

typedef struct waiter {
  pid_t pid;
  int pidfd;
  int cap_fd;
  int reaped;
  int status;
  struct rusage ru;
  char *out;
  size_t len, cap;
  int out_failed; /* out of memory or over CAPTURE_MAX */
} waiter;

static void drain(waiter *w) {
  char buf[65536];
  while (w->cap_fd >= 0) {
    ssize_t got = read(w->cap_fd, buf, sizeof buf);
    if (got < 0 && errno == EINTR) continue;
    if (got == 0 || (got < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) {
      close(w->cap_fd);
      w->cap_fd = -1;
    }
    if (got <= 0) return;
    size_t n = (size_t)got;
    if (w->out_failed) continue;
    if (w->len + n + 1 > w->cap) {
      size_t cap = w->cap ? w->cap * 2 : 65536;
      while (cap < w->len + n + 1) cap *= 2;
      char *t = cap <= CAPTURE_MAX ? realloc(w->out, cap) : NULL;
      if (t == NULL) {
        w->out_failed = 1;
        continue;
      }
      w->out = t;
      w->cap = cap;
    }
    memcpy(w->out + w->len, buf, n);
    w->len += n;
    w->out[w->len] = '\0';
  }
}

/* Waits up to ms for the child to end or output to come, reading what came; reaps when it can. */
static void wait_step(waiter *w, int ms) {
  if (w->reaped) return;
  struct pollfd pf[2];
  nfds_t n = 0;
  if (w->pidfd >= 0) pf[n++] = (struct pollfd){w->pidfd, POLLIN, 0};
  if (w->cap_fd >= 0) pf[n++] = (struct pollfd){w->cap_fd, POLLIN, 0};
  /* without a pidfd nothing tells us of the exit: look again soon */
  if (w->pidfd < 0 && ms > 2) ms = 2;
  if (n > 0) {
    (void)poll(pf, n, ms); /* EINTR or a timeout: look anyway */
  } else if (ms > 0) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
  }
  drain(w);
  for (;;) {
    pid_t r = wait4(w->pid, &w->status, WNOHANG, &w->ru);
    if (r < 0 && errno == EINTR) continue;
    if (r == w->pid || r < 0) w->reaped = 1; /* r < 0: already gone (ECHILD) */
    return;
  }
}

/* SIGTERM to the group, SIGKILL after the grace period; the group goes even when its leader
 * has already left. */
static void stop_group(waiter *w, int grace_ms) {
  kill(-w->pid, SIGTERM);
  if (!w->reaped) kill(w->pid, SIGTERM);
  int64_t until = pb_now_ns() + (int64_t)grace_ms * 1000000;
  while (!w->reaped && pb_now_ns() < until) wait_step(w, 20);
  kill(-w->pid, SIGKILL);
  if (!w->reaped) {
    kill(w->pid, SIGKILL);
    while (wait4(w->pid, &w->status, 0, &w->ru) < 0 && errno == EINTR) {
    }
    w->reaped = 1;
  }
}

static int interrupted(const pb__proc *p) {
  if (pb__stop_requested() != 0) return 1;
  return p->cancel != NULL ? *p->cancel != 0 : guard_caught != 0;
}

static void wait_child(const pb__proc *p, waiter *w, int64_t t0, pb__proc_result *res) {
  int64_t deadline = p->timeout_s > 0 ? t0 + (int64_t)(p->timeout_s * 1e9) : INT64_MAX;
  int64_t next_tick = t0 + 1000000000;
  while (!w->reaped) {
    if (p->tick != NULL && pb_now_ns() >= next_tick) {
      p->tick(p->tick_ctx, (double)(pb_now_ns() - t0) / 1e9);
      next_tick = pb_now_ns() + 1000000000;
    }
    if (interrupted(p)) {
      res->canceled = 1;
      break;
    }
    int64_t left = deadline - pb_now_ns();
    if (left <= 0) {
      res->timed_out = 1;
      break;
    }
    int64_t ms = left / 1000000 + 1;
    wait_step(w, ms < 50 ? (int)ms : 50);
  }
  if (w->reaped) {
    res->wall_s = (double)(pb_now_ns() - t0) / 1e9;
  } else {
    stop_group(w, res->canceled ? CANCEL_GRACE_MS : STOP_GRACE_MS);
    res->wall_s = (double)(pb_now_ns() - t0) / 1e9;
  }
  /* what the child wrote before it ended; a grandchild holding the pipe is not waited for */
  drain(w);
}

/* ---- the call ------------------------------------------------------------------------------ */

static int report(const pb__proc *p, const pb__proc_result *res, struct pb_error *err) {
  if (res->canceled) return pb_error_set(err, PB_ECANCELED, "interrupted");
  if (!res->timed_out && res->exit_code == 0) return PB_OK;
  char tail[700];
  pb__proc_tail(p->stderr_path, 6, tail, sizeof tail);
  const char *sep = tail[0] ? ": " : "";
  if (res->timed_out)
    return pb_error_set(err, PB_ECHILD, "no result after %.0f s, stopped%s%s", p->timeout_s,
                        tail[0] ? "; last output: " : "", tail);
  if (res->term_signal != 0)
    return pb_error_set(err, PB_ECHILD, "killed by signal %d%s%s", res->term_signal, sep, tail);
  return pb_error_set(err, PB_ECHILD, "exit status %d%s%s", res->exit_code, sep, tail);
}

/* The child's report of a failed chdir or exec: 0 when exec went through. */
static int read_report(const pb__proc *p, int fd, struct pb_error *err) {
  int why[2];
  ssize_t got;
  do {
    got = read(fd, why, sizeof why);
  } while (got < 0 && errno == EINTR);
  if (got != (ssize_t)sizeof why) return PB_OK;
  if (why[0] == 0)
    return pb_error_set(err, PB_ECHILD, "cannot enter %s: %s", p->cwd, strerror(why[1]));
  return pb_error_set(err, PB_ECHILD, "cannot run %s: %s", p->argv[0], strerror(why[1]));
}

int pb__proc_run(const pb__proc *p, pb__proc_result *res, struct pb_error *err) {
  pb__proc_result local;
  if (res == NULL) res = &local;
  memset(res, 0, sizeof *res);
  res->exit_code = -1;
  if (p == NULL || p->argv == NULL || p->argv[0] == NULL)
    return pb_error_set(err, PB_EINVAL, "no program to run");
  fds f;
  PB_RETURN_NOT_OK(fds_open(p, &f, err));
  char **env = child_env(p->env);
  if (env == NULL) {
    fds_close(&f);
    return pb_error_set(err, PB_ENOMEM, "out of memory");
  }
  if (p->cancel == NULL) guard_enter();
  int64_t t0 = pb_now_ns();
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid == 0) child_main(p, &f, env, parent);
  int fork_errno = errno;
  free(env);
  if (pid < 0) {
    fds_close(&f);
    if (p->cancel == NULL) guard_leave();
    return pb_error_set(err, PB_ECHILD, "cannot start %s: %s", p->argv[0], strerror(fork_errno));
  }
  setpgid(pid, pid); /* here too, so that a kill of the group cannot come before the child's */
  close(f.report_w);
  f.report_w = -1;
  int rc = read_report(p, f.report_r, err);
  res->started = rc == PB_OK;
  waiter w = {.pid = pid, .pidfd = -1, .cap_fd = f.cap_r};
  f.cap_r = -1;
  fds_close(&f); /* the child has its copies */
#ifdef SYS_pidfd_open
  w.pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
#endif
  wait_child(p, &w, t0, res);
  if (p->cancel == NULL) guard_leave(); /* may raise a caught signal: the child is gone by now */
  if (w.pidfd >= 0) close(w.pidfd);
  if (w.cap_fd >= 0) close(w.cap_fd);
  res->maxrss_mb = (double)w.ru.ru_maxrss / 1024.0;
  if (WIFEXITED(w.status)) res->exit_code = WEXITSTATUS(w.status);
  if (WIFSIGNALED(w.status)) res->term_signal = WTERMSIG(w.status);
  if (p->capture_stdout) {
    res->out = w.out != NULL ? w.out : calloc(1, 1);
    res->out_len = w.len;
    if (res == &local) free(res->out);
  }
  if (rc != PB_OK) return rc;
  if (w.out_failed && !res->canceled)
    return pb_error_set(err, PB_ECHILD, "%s printed more than could be kept (%zu bytes kept)",
                        p->argv[0], w.len);
  return report(p, res, err);
}

/* ---- a function in a forked copy ------------------------------------------------------------ */

int pb__proc_fork(int (*fn)(void *ctx), void *ctx, const pb__proc *p, pb__proc_result *res,
                  struct pb_error *err) {
  static const pb__proc none;
  if (p == NULL) p = &none;
  pb__proc_result local;
  if (res == NULL) res = &local;
  memset(res, 0, sizeof *res);
  res->exit_code = -1;
  if (fn == NULL) return pb_error_set(err, PB_EINVAL, "no function to run");
  if (interrupted(p)) {
    res->canceled = 1;
    return pb_error_set(err, PB_ECANCELED, "interrupted");
  }
  if (p->cancel == NULL) guard_enter();
  fflush(NULL); /* buffered output must not be written twice */
  int64_t t0 = pb_now_ns();
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid == 0) {
    die_with_parent(parent);
    setpgid(0, 0);
    sigset_t all;
    sigemptyset(&all);
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    signal(SIGHUP, SIG_DFL);
    sigprocmask(SIG_SETMASK, &all, NULL);
    int rc = fn(ctx);
    fflush(NULL);
    _exit(rc == 0 ? 0 : 1);
  }
  int fork_errno = errno;
  if (pid < 0) {
    if (p->cancel == NULL) guard_leave();
    return pb_error_set(err, PB_ECHILD, "cannot fork: %s", strerror(fork_errno));
  }
  setpgid(pid, pid);
  res->started = 1;
  waiter w = {.pid = pid, .pidfd = -1, .cap_fd = -1};
#ifdef SYS_pidfd_open
  w.pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
#endif
  wait_child(p, &w, t0, res);
  if (p->cancel == NULL) guard_leave();
  if (w.pidfd >= 0) close(w.pidfd);
  res->maxrss_mb = (double)w.ru.ru_maxrss / 1024.0;
  if (WIFEXITED(w.status)) res->exit_code = WEXITSTATUS(w.status);
  if (WIFSIGNALED(w.status)) res->term_signal = WTERMSIG(w.status);
  return report(p, res, err);
}
