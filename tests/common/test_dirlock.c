/* The lock of a results folder (programs/tracks/dirlock.c): another process is refused at once with
 * the holder's pid, takes in one process nest, a dead holder's file blocks nobody, the file goes
 * when the last take lets go, and a link or a folder at the lock's name is refused. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"
#include "tracks/dirlock.h"

static char dir[256], lockpath[320];

/* In a child process: tries the lock; exit 0 taken, 1 busy (with holder, the holder's pid, in
 * the message), 2 anything else. */
static int try_in_child(pid_t holder) {
  pid_t pid = fork();
  if (pid == 0) {
    pb__dirlock *l = NULL;
    struct pb_error e = {{0}};
    int rc = pb__dirlock_take(dir, "test", &l, &e);
    char want[64];
    snprintf(want, sizeof want, "(pid %ld)", (long)holder);
    if (rc == -EWOULDBLOCK) _exit(strstr(e.message, want) && strstr(e.message, dir) ? 1 : 2);
    _exit(rc == PB_OK ? 0 : 2);
  }
  int st = 0;
  waitpid(pid, &st, 0);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 3;
}

static void test_take_release(void) {
  pb__dirlock *a = NULL, *b = NULL;
  struct pb_error e = {{0}};
  CHECK_OK(pb__dirlock_take(dir, "test", &a, &e), &e);
  struct stat st;
  EXPECT(lstat(lockpath, &st) == 0 && S_ISREG(st.st_mode));
  EXPECT_EQ(try_in_child(getpid()), 1); /* another process: busy, named */
  CHECK_OK(pb__dirlock_take(dir, "test", &b, &e), &e); /* this one: nested */
  EXPECT(a == b);
  pb__dirlock_release(b);
  EXPECT_EQ(try_in_child(getpid()), 1); /* still held once */
  pb__dirlock_release(a);
  EXPECT(lstat(lockpath, &st) != 0 && errno == ENOENT); /* the last one removes the file */
  EXPECT_EQ(try_in_child(getpid()), 0);
  pb__dirlock_release(NULL);
}

/* A holder killed with SIGKILL leaves its file, which blocks nobody. */
static void test_dead_holder(void) {
  int ready[2];
  CHECK(pipe(ready) == 0);
  pid_t pid = fork();
  if (pid == 0) {
    pb__dirlock *l = NULL;
    if (pb__dirlock_take(dir, "test", &l, NULL) != PB_OK) _exit(2);
    char one = 1;
    if (write(ready[1], &one, 1) != 1) _exit(2);
    pause();
    _exit(0);
  }
  close(ready[1]);
  char got = 0;
  CHECK(read(ready[0], &got, 1) == 1); /* it holds the lock now */
  close(ready[0]);
  struct stat st;
  EXPECT_EQ(try_in_child(pid), 1);
  kill(pid, SIGKILL);
  waitpid(pid, NULL, 0);
  EXPECT(lstat(lockpath, &st) == 0); /* left behind */
  pb__dirlock *l = NULL;
  struct pb_error e = {{0}};
  EXPECT_OK(pb__dirlock_take(dir, "test", &l, &e), &e);
  pb__dirlock_release(l);
}

static void test_refused_names(void) {
  pb__dirlock *l = NULL;
  struct pb_error e = {{0}};
  char target[400];
  snprintf(target, sizeof target, "%s/elsewhere", dir);
  CHECK(symlink(target, lockpath) == 0);
  EXPECT_EQ(pb__dirlock_take(dir, "test", &l, &e), PB_EIO);
  EXPECT_CONTAINS(e.message, lockpath);
  EXPECT(access(target, F_OK) != 0); /* nothing created through the link */
  unlink(lockpath);
  CHECK(mkdir(lockpath, 0755) == 0);
  EXPECT(pb__dirlock_take(dir, "test", &l, &e) != PB_OK);
  EXPECT_CONTAINS(e.message, lockpath);
  rmdir(lockpath);
  char file[400];
  snprintf(file, sizeof file, "%s/file", dir);
  close(open(file, O_WRONLY | O_CREAT, 0644));
  EXPECT(pb__dirlock_take(file, "test", &l, &e) != PB_OK); /* not a folder */
  unlink(file);
}

int main(void) {
  snprintf(dir, sizeof dir, "/tmp/pb_dirlock_XXXXXX");
  CHECK(mkdtemp(dir) != NULL);
  snprintf(lockpath, sizeof lockpath, "%s/%s", dir, PB__DIRLOCK_NAME);
  test_take_release();
  test_dead_holder();
  test_refused_names();
  unlink(lockpath);
  rmdir(dir);
  return check_failures() != 0;
}
