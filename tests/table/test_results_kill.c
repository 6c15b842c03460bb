/* Kill test: a child rewrites a big table over a good file in a loop and is SIGKILLed in the
 * middle of a write; the file must still be whole and readable (the old one, or the last one a
 * finished write put there), and the temporary the child left must be swept by the next write.
 *
 * Nothing here depends on timing: the child is frozen with SIGSTOP while a temporary of the
 * path is seen, the frozen state is checked (the temporary still there, which write it belongs
 * to from the child's announcements on a pipe), and only then is the child killed. A temporary
 * that vanished before the freeze (the write finished) just means: let it go on and look again. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>

#include "results_test.h"

#define BIG_ROWS 200000

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

/* The big table, built once before the children are forked (each inherits it): building it
 * in every child cost more than the writes being tested. */
static pb_table *big;

static pb_table *big_table(void) {
  struct pb_error err = {{0}};
  pb_table *t;
  CHECK_OK(pb_table_new(&t), &err);
  char s[64];
  for (int i = 0; i < BIG_ROWS; i++) {
    snprintf(s, sizeof s, "row %d of the big table", i);
    CHECK_OK(pb_table_append_row(t), &err);
    CHECK_OK(pb_table_set_i64(t, "i", i), &err);
    CHECK_OK(pb_table_set_str(t, "s", s), &err);
    CHECK_OK(pb_table_set_f64(t, "x", i * 0.5), &err);
  }
  CHECK_OK(pb_table_set_meta(t, "which", "big"), &err);
  return t;
}

/* The child: announce each write of the big table on the pipe and do it. */
static void child(const char *path, int wfd) {
  struct pb_error err = {{0}};
  for (;;) {
    if (write(wfd, "w", 1) != 1) _exit(3);
    if (pb_table_write(big, path, PB_SINK_AUTO, &err) != 0) _exit(4);
  }
}

/* Is name a temporary of base ("." base ".pbtmp-..." or DuckDB's "tmp_" copy of one)? */
static int is_temp_of(const char *name, const char *base) {
  if (strncmp(name, "tmp_", 4) == 0) name += 4;
  size_t n = strlen(base);
  return name[0] == '.' && strncmp(name + 1, base, n) == 0 &&
         strncmp(name + 1 + n, ".pbtmp-", 7) == 0;
}

/* The temporaries of base in dir: how many, and the largest size seen. */
static int temps_of(const char *dir, const char *base, long long *largest) {
  DIR *d = opendir(dir);
  if (d == NULL) return -1;
  int n = 0;
  if (largest) *largest = -1;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (!is_temp_of(e->d_name, base)) continue;
    n++;
    char p[1200];
    struct stat st;
    snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
    if (largest && stat(p, &st) == 0 && (long long)st.st_size > *largest) *largest = st.st_size;
  }
  closedir(d);
  return n;
}

static void pause_a_little(void) {
  struct timespec ts = {0, 200000}; /* only to yield the CPU while polling */
  nanosleep(&ts, NULL);
}

/* Announcements the child has made so far (each one opens a write). */
static int drain_announcements(int rfd, int *count) {
  char buf[256];
  for (;;) {
    ssize_t got = read(rfd, buf, sizeof buf);
    if (got > 0) {
      *count += (int)got;
      continue;
    }
    if (got < 0 && errno == EINTR) continue;
    return got == 0 ? -1 : 0; /* 0 bytes: the child is gone */
  }
}

/* One round: the child is frozen inside write number `write_no` (1: the first, whose old file
 * is the small one) once a temporary of the path holds at least min_bytes, then killed. */
static int round_trip(const char *dir, const char *name, int write_no, long long min_bytes) {
  struct pb_error err = {{0}};
  char path[1024];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  pb_table *good = small_table();
  CHECK_OK(pb_table_write(good, path, PB_SINK_AUTO, &err), &err);
  size_t good_n = 0;
  char *good_bytes = rt_slurp(path, &good_n);
  EXPECT(good_bytes != NULL);
  CHECK_EQ(temps_of(dir, name, NULL), 0);

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
  fcntl(fds[0], F_SETFL, O_NONBLOCK);

  int announced = 0, caught = 0, status = 0;
  long long largest = -1;
  /* No bound in time or tries: the child either reaches the write wanted or moves past it (then
   * the round is run again); a child that hangs is CTest's TIMEOUT to catch. */
  while (!caught) {
    if (drain_announcements(fds[0], &announced) < 0) break; /* the child died */
    if (announced < write_no || temps_of(dir, name, &largest) < 1 || largest < min_bytes) {
      pause_a_little();
      continue;
    }
    /* Seen: freeze the child and look again at what is there now. */
    kill(pid, SIGSTOP);
    if (waitpid(pid, &status, WUNTRACED) != pid || !WIFSTOPPED(status)) break;
    drain_announcements(fds[0], &announced);
    if (announced == write_no && temps_of(dir, name, &largest) >= 1 && largest >= min_bytes)
      caught = 1;
    else if (announced > write_no) /* past the write wanted: start over with a new child */
      break;
    else
      kill(pid, SIGCONT);
  }
  kill(pid, SIGKILL);
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  close(fds[0]);
  if (!caught) {
    /* Not a result about the writer: the child moved on (or died) before it could be frozen
     * where wanted; the file is still checked below, and the caller runs the round again. */
    fprintf(stderr, "  %s: write %d not caught with a temporary of %lld bytes (announced %d)\n",
            name, write_no, min_bytes, announced);
  }
  EXPECT(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);

  /* Frozen inside write number write_no: the file is the one before it, whole. */
  size_t now_n = 0;
  char *now = rt_slurp(path, &now_n);
  EXPECT(now != NULL);
  int same = now != NULL && now_n == good_n && memcmp(now, good_bytes, good_n) == 0;
  pb_table *back = NULL;
  CHECK_OK(pb_table_read(path, PB_SINK_AUTO, &back, &err), &err);
  const char *which = pb_table_get_meta(back, "which");
  int temps = temps_of(dir, name, NULL);
  fprintf(stderr, "  %s killed in write %d (announced %d), temporary >= %lld bytes: %d left, file is the %s one (%zu rows)\n",
          name, write_no, announced, min_bytes, temps, same ? "old" : "new", pb_table_rows(back));
  if (caught) {
    EXPECT(temps >= 1);
    if (write_no == 1) {
      EXPECT(same);
      EXPECT_STREQ(which, "good");
      EXPECT_EQ(pb_table_rows(back), 10);
    } else {
      EXPECT(!same);
      EXPECT_STREQ(which, "big");
      EXPECT_EQ(pb_table_rows(back), BIG_ROWS);
    }
  } else if (same) {
    EXPECT_STREQ(which, "good");
  } else {
    EXPECT_STREQ(which, "big");
    EXPECT_EQ(pb_table_rows(back), BIG_ROWS);
  }
  pb_table_free(back);
  free(now);
  free(good_bytes);

  /* The next write to the same path removes what the dead writer left. Its pid is free now
   * (reaped above), unless another process was given it since: then the sweep must keep the
   * files, as they may be that process's. */
  int reused = kill(pid, 0) == 0;
  CHECK_OK(pb_table_write(good, path, PB_SINK_AUTO, &err), &err);
  if (!reused) EXPECT_EQ(temps_of(dir, name, NULL), 0);
  else fprintf(stderr, "  pid %ld was reused: its temporaries are rightly kept\n", (long)pid);
  pb_table_free(good);
  return caught;
}

/* A round until the child is caught where wanted (a bounded number of times). */
static void caught_round(const char *dir, const char *name, int write_no, long long min_bytes) {
  for (int attempt = 0; attempt < 10; attempt++)
    if (round_trip(dir, name, write_no, min_bytes)) return;
  EXPECT_FAIL("%s: write %d never caught with a temporary of %lld bytes", name, write_no,
              min_bytes);
}

int main(void) {
  const char *dir = rt_tmpdir();
  big = big_table();
  const char *names[] = {"k.parquet", "k.csv", "k.json"};
  for (int k = 0; k < 3; k++) {
    caught_round(dir, names[k], 1, 0);    /* the first write, its temporary just made */
    caught_round(dir, names[k], 1, 4096); /* the first write, part of it on disk */
    caught_round(dir, names[k], 2, 4096); /* a later write: the last finished one stays */
  }
  pb_table_free(big);
  rt_rmdir(dir);
  if (check_failures()) fprintf(stderr, "%d check(s) failed\n", check_failures());
  else fprintf(stderr, "all checks passed\n");
  return check_failures() ? 1 : 0;
}
