/* Atomic writes onto special targets and full disks. A character device is written in place
 * (never renamed over) and /dev/full's ENOSPC is an error; a FIFO, socket, folder or dangling
 * link is refused and left as it was; a link to a file replaces the file and keeps the link.
 * On a full file system every sink fails and leaves no temporary (DuckDB's tmp_ copy
 * included). Temporaries of dead writers, files and folders alike, are swept.
 * Device nodes (mknod) and the small file system (a tmpfs mount) need root: without root those
 * cases print a skip line; as root a failing mknod or mount fails the test. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/un.h>
#include <sys/wait.h>

#include "common/fs.h"
#include "results_test.h"
#include "table/results_internal.h"

static char g_mnt[1024];

static void unmount_at_exit(void) {
  if (g_mnt[0] != '\0') umount2(g_mnt, MNT_DETACH);
}

static mode_t kind(const char *path) {
  struct stat st;
  return lstat(path, &st) == 0 ? st.st_mode & S_IFMT : 0;
}

/* Entries of dir whose name contains needle. */
static int count_named(const char *dir, const char *needle) {
  DIR *d = opendir(dir);
  if (d == NULL) return -1;
  int n = 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL)
    if (strstr(e->d_name, needle) != NULL) n++;
  closedir(d);
  return n;
}

static int count_entries(const char *dir) {
  return count_named(dir, "") - 2; /* less "." and ".." */
}

static pb_table *small_table(int rows) {
  struct pb_error err = {{0}};
  pb_table *t;
  CHECK_OK(pb_table_new(&t), &err);
  for (int i = 0; i < rows; i++) {
    CHECK_OK(pb_table_append_row(t), &err);
    CHECK_OK(pb_table_set_i64(t, "i", i), &err);
    CHECK_OK(pb_table_set_str(t, "text", "a string that makes each row a little longer"), &err);
    CHECK_OK(pb_table_set_f64(t, "x", i * 0.25), &err);
  }
  return t;
}

static void devices(const char *dir, const char *tmpdir) {
  char null_path[1100], full_path[1100];
  snprintf(null_path, sizeof null_path, "%s/null", dir);
  snprintf(full_path, sizeof full_path, "%s/full", dir);
  if (geteuid() != 0) {
    printf("skip: device targets need root for mknod\n");
    return;
  }
  if (mknod(null_path, S_IFCHR | 0666, makedev(1, 3)) != 0 ||
      mknod(full_path, S_IFCHR | 0666, makedev(1, 7)) != 0)
    FAIL("mknod in %s failed as root: %s", dir, strerror(errno));
  struct pb_error err = {{0}};
  /* /dev/null: every writer succeeds and the node stays a device. */
  EXPECT_OK(pb_write_file_atomic(null_path, "hello", 5, &err), &err);
  pb_table *t = small_table(50);
  EXPECT_OK(pb_table_write(t, null_path, PB_SINK_CSV, &err), &err);
  EXPECT_OK(pb_table_write(t, null_path, PB_SINK_JSON, &err), &err);
  EXPECT_OK(pb_table_write(t, null_path, PB_SINK_PARQUET, &err), &err);
  EXPECT_EQ(kind(null_path), S_IFCHR);
  char tmp[4096];
  EXPECT_OK(pb__atomic_begin(null_path, tmp, sizeof tmp, &err), &err);
  EXPECT(strncmp(tmp, tmpdir, strlen(tmpdir)) == 0); /* not beside the device */
  EXPECT_OK(pb__write_file(tmp, "x", 1, &err), &err);
  EXPECT_OK(pb__atomic_finish(tmp, null_path, PB_OK, &err), &err);
  EXPECT_EQ(kind(null_path), S_IFCHR);
  /* /dev/full: ENOSPC is an error, and the node stays a device. */
  err.message[0] = '\0';
  EXPECT_EQ(pb_write_file_atomic(full_path, "hello", 5, &err), -ENOSPC);
  EXPECT_CONTAINS(err.message, "No space left on device");
  EXPECT_CONTAINS(err.message, full_path);
  err.message[0] = '\0';
  EXPECT_EQ(pb_table_write(t, full_path, PB_SINK_PARQUET, &err), -ENOSPC);
  EXPECT_EQ(kind(full_path), S_IFCHR);
  pb_table_free(t);
  /* The temporaries of device writes went to TMPDIR and are all gone. */
  EXPECT_EQ(count_named(tmpdir, ".pbtmp-"), 0);
  EXPECT_EQ(count_named(tmpdir, "tmp_"), 0);
  unlink(null_path);
  unlink(full_path);
}

static void refused(const char *dir) {
  struct pb_error err = {{0}};
  char p[1100];
  /* A FIFO: refused without blocking, left a FIFO. */
  snprintf(p, sizeof p, "%s/fifo", dir);
  CHECK(mkfifo(p, 0666) == 0);
  EXPECT_EQ(pb_write_file_atomic(p, "x", 1, &err), PB_EIO);
  EXPECT_CONTAINS(err.message, "a FIFO");
  EXPECT_EQ(kind(p), S_IFIFO);
  unlink(p);
  /* A socket. */
  snprintf(p, sizeof p, "%s/sock", dir);
  int s = socket(AF_UNIX, SOCK_STREAM, 0);
  struct sockaddr_un a = {.sun_family = AF_UNIX};
  snprintf(a.sun_path, sizeof a.sun_path, "%s", p);
  CHECK(s >= 0 && bind(s, (struct sockaddr *)&a, sizeof a) == 0);
  EXPECT_EQ(pb_write_file_atomic(p, "x", 1, &err), PB_EIO);
  EXPECT_CONTAINS(err.message, "a socket");
  EXPECT_EQ(kind(p), S_IFSOCK);
  close(s);
  unlink(p);
  /* A folder, also through the table writer. */
  snprintf(p, sizeof p, "%s/folder.csv", dir);
  CHECK(mkdir(p, 0777) == 0);
  pb_table *t = small_table(3);
  EXPECT_EQ(pb_table_write(t, p, PB_SINK_CSV, &err), PB_EIO);
  EXPECT_CONTAINS(err.message, "a folder");
  EXPECT_EQ(kind(p), S_IFDIR);
  pb_table_free(t);
  rmdir(p);
  /* A link that leads nowhere: the link is replaced, nothing is made where it pointed. */
  char target[1100];
  snprintf(p, sizeof p, "%s/dangling.json", dir);
  snprintf(target, sizeof target, "%s/missing.json", dir);
  CHECK(symlink(target, p) == 0);
  EXPECT_OK(pb_write_file_atomic(p, "x", 1, &err), &err);
  EXPECT_EQ(kind(p), S_IFREG);
  EXPECT_EQ(kind(target), 0);
  unlink(p);
  /* A link to a file (here one in another folder): the link is replaced by the new file and
   * the file it named is left as it was, never written through. */
  char other[1100];
  snprintf(other, sizeof other, "%s/elsewhere", dir);
  CHECK(mkdir(other, 0777) == 0);
  snprintf(p, sizeof p, "%s/link.json", dir);
  snprintf(target, sizeof target, "%s/real.json", other);
  rt_spit(target, "old", 3);
  CHECK(symlink(target, p) == 0);
  EXPECT_OK(pb_write_file_atomic(p, "new!", 4, &err), &err);
  EXPECT_EQ(kind(p), S_IFREG);
  void *data;
  size_t n;
  CHECK_OK(pb__read_file(target, &data, &n, &err), &err);
  EXPECT(n == 3 && memcmp(data, "old", 3) == 0);
  pb_free(data, n);
  CHECK_OK(pb__read_file(p, &data, &n, &err), &err);
  EXPECT(n == 4 && memcmp(data, "new!", 4) == 0);
  pb_free(data, n);
  unlink(p);
  /* The same through the table writer. */
  CHECK(symlink(target, p) == 0);
  pb_table *t2 = small_table(3);
  EXPECT_OK(pb_table_write(t2, p, PB_SINK_JSON, &err), &err);
  pb_table_free(t2);
  EXPECT_EQ(kind(p), S_IFREG);
  CHECK_OK(pb__read_file(target, &data, &n, &err), &err);
  EXPECT(n == 3 && memcmp(data, "old", 3) == 0);
  pb_free(data, n);
  unlink(p);
  unlink(target);
  /* A link to a folder: refused, the link left. */
  CHECK(symlink(other, p) == 0);
  EXPECT_EQ(pb_write_file_atomic(p, "x", 1, &err), PB_EIO);
  EXPECT_CONTAINS(err.message, "symbolic link to a folder");
  EXPECT_EQ(kind(p), S_IFLNK);
  unlink(p);
  rmdir(other);
  /* A name-based writer that failed, or wrote nothing, leaves no temporary and no file. */
  char tmp[4096];
  snprintf(p, sizeof p, "%s/plot.png", dir);
  CHECK_OK(pb__atomic_begin(p, tmp, sizeof tmp, &err), &err);
  EXPECT_EQ(pb__atomic_finish(tmp, p, PB_EIO, &err), PB_EIO);
  CHECK_OK(pb__atomic_begin(p, tmp, sizeof tmp, &err), &err);
  EXPECT_EQ(pb__atomic_finish(tmp, p, PB_OK, &err), PB_EIO);
  EXPECT_CONTAINS(err.message, "nothing was written");
  EXPECT_EQ(kind(p), 0);
  EXPECT_EQ(count_named(dir, ".pbtmp-"), 0);
  EXPECT_EQ(count_entries(dir), 0);
}

static void full_disk(const char *dir) {
  snprintf(g_mnt, sizeof g_mnt, "%s/small", dir);
  CHECK(mkdir(g_mnt, 0777) == 0);
  if (mount("tmpfs", g_mnt, "tmpfs", 0, "size=256k") != 0) {
    if (errno == EPERM || geteuid() != 0)
      printf("skip: full file system: mounting a tmpfs is not permitted here (%s)\n",
             strerror(errno));
    else
      FAIL("mount -t tmpfs on %s failed as root: %s", g_mnt, strerror(errno));
    rmdir(g_mnt);
    g_mnt[0] = '\0';
    return;
  }
  /* Fill it but for a few pages. */
  char fill[1100];
  snprintf(fill, sizeof fill, "%s/filler", g_mnt);
  static unsigned char block[4096];
  int fd = open(fill, O_WRONLY | O_CREAT | O_TRUNC, 0644);
  CHECK(fd >= 0);
  for (int i = 0; i < 60; i++) CHECK(write(fd, block, sizeof block) == (ssize_t)sizeof block);
  close(fd);
  struct pb_error err = {{0}};
  pb_table *t = small_table(20000);
  static const pb_sink sinks[] = {PB_SINK_CSV, PB_SINK_JSON, PB_SINK_PARQUET};
  static const char *const names[] = {"t.csv", "t.json", "t.parquet"};
  for (int k = 0; k < 3; k++) {
    char p[1200];
    snprintf(p, sizeof p, "%s/%s", g_mnt, names[k]);
    err.message[0] = '\0';
    int rc = pb_table_write(t, p, sinks[k], &err);
    fprintf(stderr, "  %s on a full disk -> %d: %s\n", names[k], rc, err.message);
    EXPECT(rc != PB_OK);
    EXPECT_CONTAINS(err.message, p);
    EXPECT_EQ(kind(p), 0);
  }
  pb_table_free(t);
  static unsigned char big[256 * 1024];
  char p[1200];
  snprintf(p, sizeof p, "%s/big.json", g_mnt);
  err.message[0] = '\0';
  EXPECT_EQ(pb_write_file_atomic(p, big, sizeof big, &err), -ENOSPC);
  EXPECT_CONTAINS(err.message, "No space left on device");
  /* Only the filler is left: no temporary of ours, no tmp_ of DuckDB's. */
  EXPECT_EQ(count_entries(g_mnt), 1);
  umount2(g_mnt, 0);
  rmdir(g_mnt);
  g_mnt[0] = '\0';
}

/* A pid that is certainly not running: a child that has exited and been reaped. */
static pid_t dead_pid(void) {
  pid_t c = fork();
  if (c == 0) _exit(0);
  CHECK(c > 0);
  waitpid(c, NULL, 0);
  return c;
}

/* name with our pid swapped for pid (the scheme puts "-<pid>-" after the host hash). */
static void with_pid(const char *name, pid_t pid, char *out, size_t size) {
  char mine[32];
  snprintf(mine, sizeof mine, "-%ld-", (long)getpid());
  const char *at = strstr(name, mine);
  CHECK(at != NULL);
  snprintf(out, size, "%.*s-%ld-%s", (int)(at - name), name, (long)pid, at + strlen(mine));
}

static void sweep(const char *dir) {
  struct pb_error err = {{0}};
  char path[1100], name[4096], dead_dir[4200], dead_file[4200], duck[4300], live[4200];
  snprintf(path, sizeof path, "%s/summary.json", dir);
  pid_t gone = dead_pid();
  /* A dead writer's folder with files in it (as a format writer leaves one), a dead writer's
   * file, DuckDB's tmp_ copy, and a live process's file (pid 1). */
  CHECK_OK(pb__temp_sibling(path, name, sizeof name), NULL);
  with_pid(name, gone, dead_dir, sizeof dead_dir);
  CHECK(mkdir(dead_dir, 0777) == 0);
  char inner[4300];
  snprintf(inner, sizeof inner, "%s/part-0", dead_dir);
  rt_spit(inner, "data", 4);
  CHECK_OK(pb__temp_sibling(path, name, sizeof name), NULL);
  with_pid(name, gone, dead_file, sizeof dead_file);
  rt_spit(dead_file, "data", 4);
  char duck_of[4200];
  CHECK_OK(pb__temp_sibling(path, name, sizeof name), NULL);
  with_pid(name, gone, duck_of, sizeof duck_of);
  const char *slash = strrchr(duck_of, '/');
  snprintf(duck, sizeof duck, "%.*s/tmp_%s", (int)(slash - duck_of), duck_of, slash + 1);
  rt_spit(duck, "data", 4);
  CHECK_OK(pb__temp_sibling(path, name, sizeof name), NULL);
  with_pid(name, 1, live, sizeof live);
  rt_spit(live, "data", 4);
  EXPECT_EQ(count_named(dir, ".pbtmp-"), 4);
  EXPECT_OK(pb_write_file_atomic(path, "{}", 2, &err), &err);
  EXPECT_EQ(kind(dead_dir), 0);
  EXPECT_EQ(kind(dead_file), 0);
  EXPECT_EQ(kind(duck), 0);
  EXPECT_EQ(kind(live), S_IFREG); /* pid 1 runs: its temporary stays */
  unlink(live);
  unlink(path);
}

int main(void) {
  char *d = rt_tmpdir();
  char dir[512];
  snprintf(dir, sizeof dir, "%s", d);
  atexit(unmount_at_exit);
  /* Device temporaries go to TMPDIR: a folder of our own, to see that none stay. */
  char tmpdir[600];
  snprintf(tmpdir, sizeof tmpdir, "%s/tmp", dir);
  CHECK(mkdir(tmpdir, 0777) == 0);
  CHECK(setenv("TMPDIR", tmpdir, 1) == 0);
  char work[600];
  snprintf(work, sizeof work, "%s/w", dir);
  CHECK(mkdir(work, 0777) == 0);
  devices(work, tmpdir);
  refused(work);
  sweep(work);
  full_disk(work);
  pb__remove_tree(dir);
  return check_failures() != 0;
}
