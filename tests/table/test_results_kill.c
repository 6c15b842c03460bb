/* Kill test: a child rewrites a big table over a good file in a loop and is SIGKILLed
 * mid-write; the good file must still be there, whole and readable, and the temporary the
 * child left must be swept by the next write. */
#include <errno.h>
#include <signal.h>
#include <sys/wait.h>
#include <time.h>

#include "results_test.h"

#define BIG_ROWS 400000

static void sleep_ms(int ms) {
  struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
  while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
  }
}

static pb_table *small_table(void) {
  struct pb_error err = {{0}};
  pb_table *t;
  CHECK_OK(pb_table_new(&t), &err);
  for (int i = 0; i < 10; i++) {
    CHECK_OK(pb_table_append_row(t), &err);
    CHECK_OK(pb_table_set_i64(t, "i", i), &err);
    CHECK_OK(pb_table_set_str(t, "s", "good"), &err);
  }
  CHECK_OK(pb_table_set_meta(t, "which", "good"), &err);
  return t;
}

/* The child: build the big table, then announce each write on the pipe and do it. */
static void child(const char *path, int wfd) {
  struct pb_error err = {{0}};
  pb_table *t;
  if (pb_table_new(&t) != 0) _exit(2);
  char s[64];
  for (int i = 0; i < BIG_ROWS; i++) {
    if (pb_table_append_row(t) != 0) _exit(2);
    snprintf(s, sizeof s, "row %d of the big table", i);
    if (pb_table_set_i64(t, "i", i) != 0 || pb_table_set_str(t, "s", s) != 0 ||
        pb_table_set_f64(t, "x", i * 0.5) != 0)
      _exit(2);
  }
  pb_table_set_meta(t, "which", "big");
  for (;;) {
    if (write(wfd, "w", 1) != 1) _exit(3);
    if (pb_table_write(t, path, PB_SINK_AUTO, &err) != 0) _exit(4);
  }
}

/* One round: returns 1 if the kill landed mid-write (a temporary was left). */
static int round_trip(const char *dir, const char *name, int delay_ms) {
  struct pb_error err = {{0}};
  char path[1024];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  pb_table *good = small_table();
  CHECK_OK(pb_table_write(good, path, PB_SINK_AUTO, &err), &err);
  size_t good_n = 0;
  char *good_bytes = rt_slurp(path, &good_n);
  EXPECT(good_bytes != NULL);

  int fds[2];
  if (pipe(fds) != 0) {
    perror("pipe");
    exit(1);
  }
  fflush(NULL);
  pid_t pid = fork();
  if (pid < 0) {
    perror("fork");
    exit(1);
  }
  if (pid == 0) {
    close(fds[0]);
    child(path, fds[1]);
    _exit(0);
  }
  close(fds[1]);
  char c;
  ssize_t got = read(fds[0], &c, 1); /* the child has started its first write */
  EXPECT_EQ(got, 1);
  sleep_ms(delay_ms);
  kill(pid, SIGKILL);
  int status = 0;
  waitpid(pid, &status, 0);
  close(fds[0]);
  EXPECT(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);

  int temps = rt_count(dir, ".pbtmp-");
  /* Either the old file, byte for byte, or (if a whole write finished) the complete new one. */
  size_t now_n = 0;
  char *now = rt_slurp(path, &now_n);
  EXPECT(now != NULL);
  int same = now != NULL && now_n == good_n && memcmp(now, good_bytes, good_n) == 0;
  pb_table *back = NULL;
  CHECK_OK(pb_table_read(path, PB_SINK_AUTO, &back, &err), &err);
  const char *which = pb_table_get_meta(back, "which");
  fprintf(stderr, "  %s killed after %d ms: temporaries left %d, file is the %s one (%zu rows)\n",
          name, delay_ms, temps, same ? "old" : "new", pb_table_rows(back));
  if (same) {
    EXPECT_STREQ(which, "good");
    EXPECT_EQ(pb_table_rows(back), 10);
  } else {
    EXPECT_STREQ(which, "big");
    EXPECT_EQ(pb_table_rows(back), BIG_ROWS);
  }
  pb_table_free(back);
  free(now);
  free(good_bytes);

  /* The next write to the same path removes what the dead writer left. */
  CHECK_OK(pb_table_write(good, path, PB_SINK_AUTO, &err), &err);
  EXPECT_EQ(rt_count(dir, ".pbtmp-"), 0);
  pb_table_free(good);
  return temps > 0;
}

int main(void) {
  const char *dir = rt_tmpdir();
  const char *names[] = {"k.parquet", "k.csv", "k.json"};
  const int delays[] = {5, 40, 150};
  for (int k = 0; k < 3; k++) {
    int mid = 0;
    for (int d = 0; d < 3; d++) mid += round_trip(dir, names[k], delays[d]);
    /* At least one kill must have hit a write in progress, or the test proved nothing. */
    if (mid == 0) {
      EXPECT_FAIL("%s: no kill landed mid-write", names[k]);
    }
  }
  rt_rmdir(dir);
  if (check_failures()) fprintf(stderr, "%d check(s) failed\n", check_failures());
  else fprintf(stderr, "all checks passed\n");
  return check_failures() ? 1 : 0;
}
