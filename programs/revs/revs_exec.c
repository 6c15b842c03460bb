/* Child processes of pipebench revs: timed, limited, killable as a whole process group. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "revs/revs_internal.h"

extern char **environ;

void pb__revs_tail(const char *path, char *buf, size_t size) {
  buf[0] = '\0';
  if (path == NULL || size < 2) return;
  FILE *f = fopen(path, "rb");
  if (f == NULL) return;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  long start = n > (long)size - 1 ? n - (long)size + 1 : 0;
  fseek(f, start, SEEK_SET);
  size_t got = fread(buf, 1, size - 1, f);
  buf[got] = '\0';
  fclose(f);
  while (got > 0 && (buf[got - 1] == '\n' || buf[got - 1] == ' ')) buf[--got] = '\0';
  /* the last few lines are where tools say what went wrong */
  int lines = 0;
  for (long i = (long)got - 1; i >= 0; i--) {
    if (buf[i] == '\n' && ++lines == 6) {
      memmove(buf, buf + i + 1, got - (size_t)i);
      break;
    }
  }
}

/* The environment of the child: ours with env_add put over it. */
static char **child_env(char *const env_add[]) {
  size_t n = 0, m = 0;
  while (environ[n] != NULL) n++;
  while (env_add != NULL && env_add[m] != NULL) m++;
  char **env = calloc(n + m + 1, sizeof *env);
  if (env == NULL) return NULL;
  size_t k = 0;
  for (size_t i = 0; i < n; i++) {
    const char *eq = strchr(environ[i], '=');
    size_t kl = eq ? (size_t)(eq - environ[i]) : strlen(environ[i]);
    int replaced = 0;
    for (size_t j = 0; j < m && !replaced; j++)
      replaced = strncmp(env_add[j], environ[i], kl) == 0 && env_add[j][kl] == '=';
    if (!replaced) env[k++] = environ[i];
  }
  for (size_t j = 0; j < m; j++) env[k++] = env_add[j];
  env[k] = NULL;
  return env;
}

static void sleep_ms(long ms) {
  struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&ts, NULL);
}

/* Waits for pid up to wait_ms (-1: forever); 1 when reaped, 0 when still running. */
static int reap(pid_t pid, int pidfd, long wait_ms, int *status, struct rusage *ru) {
  if (pidfd >= 0 && wait_ms != 0) {
    struct pollfd pf = {pidfd, POLLIN, 0};
    int r = poll(&pf, 1, wait_ms < 0 ? -1 : (int)wait_ms);
    (void)r; /* EINTR or a timeout: fall through to a non-blocking look */
  } else if (wait_ms > 0) {
    sleep_ms(wait_ms < 2 ? wait_ms : 2);
  }
  for (;;) {
    pid_t w = wait4(pid, status, (wait_ms < 0 && pidfd < 0) ? 0 : WNOHANG, ru);
    if (w == pid) return 1;
    if (w < 0 && errno == EINTR) continue;
    if (w < 0) return 1; /* already gone (ECHILD): nothing to wait for */
    return 0;
  }
}

int pb__revs_exec(char *const argv[], const char *cwd, char *const env_add[], double timeout_s,
                  const char *out_path, const char *err_path, volatile sig_atomic_t *cancel,
                  pb__revs_child *res, struct pb_error *err) {
  pb__revs_child local;
  if (res == NULL) res = &local;
  memset(res, 0, sizeof *res);
  res->exit_code = -1;
  char **env = child_env(env_add);
  if (env == NULL) return pb_error_set(err, PB_ENOMEM, "out of memory");
  int same = out_path != NULL && err_path != NULL && strcmp(out_path, err_path) == 0;
  int64_t t0 = pb_now_ns();
  pid_t pid = fork();
  if (pid < 0) {
    free(env);
    return pb_error_set(err, PB_ECHILD, "cannot start %s: %s", argv[0], strerror(errno));
  }
  if (pid == 0) {
    setpgid(0, 0);
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    int in = open("/dev/null", O_RDONLY);
    if (in >= 0) dup2(in, STDIN_FILENO);
    int fo = open(out_path ? out_path : "/dev/null", O_WRONLY | O_CREAT | O_TRUNC, 0666);
    int fe = same ? fo : open(err_path ? err_path : "/dev/null", O_WRONLY | O_CREAT | O_TRUNC, 0666);
    if (fo >= 0) dup2(fo, STDOUT_FILENO);
    if (fe >= 0) dup2(fe, STDERR_FILENO);
    if (cwd != NULL && chdir(cwd) != 0) {
      fprintf(stderr, "cannot enter %s: %s\n", cwd, strerror(errno));
      _exit(127);
    }
    execvpe(argv[0], argv, env);
    fprintf(stderr, "cannot run %s: %s\n", argv[0], strerror(errno));
    _exit(127);
  }
  setpgid(pid, pid); /* also here, so a kill of the group cannot come before the child's own */
  free(env);
  int pidfd = -1;
#ifdef SYS_pidfd_open
  pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
#endif
  int64_t deadline = t0 + (int64_t)(timeout_s * 1e9);
  int status = 0;
  struct rusage ru;
  memset(&ru, 0, sizeof ru);
  int done = 0;
  while (!done) {
    if (cancel != NULL && *cancel) {
      res->canceled = 1;
      break;
    }
    int64_t left = deadline - pb_now_ns();
    if (left <= 0) {
      res->timed_out = 1;
      break;
    }
    long ms = (long)(left / 1000000) + 1;
    done = reap(pid, pidfd, ms < 50 ? ms : 50, &status, &ru);
  }
  if (done) {
    res->wall_s = (double)(pb_now_ns() - t0) / 1e9;
  } else {
    /* Stop the whole group: a shell's children go too. */
    kill(-pid, SIGTERM);
    kill(pid, SIGTERM);
    for (int i = 0; i < 100 && !done; i++) done = reap(pid, pidfd, 20, &status, &ru);
    res->wall_s = (double)(pb_now_ns() - t0) / 1e9;
    kill(-pid, SIGKILL);
    if (!done) {
      kill(pid, SIGKILL);
      reap(pid, -1, -1, &status, &ru);
    }
  }
  if (pidfd >= 0) close(pidfd);
  res->maxrss_mb = (double)ru.ru_maxrss / 1024.0;
  if (WIFEXITED(status)) res->exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) res->signal = WTERMSIG(status);
  if (res->canceled) return pb_error_set(err, PB_ECANCELED, "interrupted");
  char tail[700];
  pb__revs_tail(err_path, tail, sizeof tail);
  if (res->timed_out)
    return pb_error_set(err, PB_ECHILD, "no result after %.0f s (--timeout), stopped%s%s",
                        timeout_s, tail[0] ? "; last output: " : "", tail);
  if (res->exit_code == 0) return PB_OK;
  if (res->signal != 0)
    return pb_error_set(err, PB_ECHILD, "killed by signal %d%s%s", res->signal,
                        tail[0] ? ": " : "", tail);
  return pb_error_set(err, PB_ECHILD, "exit status %d%s%s", res->exit_code, tail[0] ? ": " : "",
                      tail);
}
