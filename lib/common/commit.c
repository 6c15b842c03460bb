/* Journaled commits of finished outputs (commit.h). */
#include "common/commit.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/fs.h"

/* A journal names a handful of outputs; anything larger is not one of ours. */
#define MAX_JOURNAL_BYTES (1 << 20)
#define MAX_MOVES 64
/* write_journal's answer when another commit holds the name (not an error code: positive) */
#define JOURNAL_TAKEN 1

static int journal_paths(const char *dir, const char *name, char *j, size_t js, char *d, size_t ds) {
  int a = snprintf(j, js, "%s/.%s.pbcommit", dir, name);
  int b = snprintf(d, ds, "%s/.%s.pbcommit.d", dir, name);
  return a < 0 || (size_t)a >= js || b < 0 || (size_t)b >= ds ? PB_EINVAL : PB_OK;
}

/* Tests stop a commit with SIGKILL after its k-th step (journal written, folder renamed, each
 * rename of an output): PIPEBENCH_TEST_COMMIT_KILL_AT=k. Nothing else reads it. */
static void test_kill_point(void) {
  static int steps;
  const char *at = getenv("PIPEBENCH_TEST_COMMIT_KILL_AT");
  if (at != NULL && atoi(at) == steps++) raise(SIGKILL);
}

static int exists(const char *p) {
  struct stat st;
  return lstat(p, &st) == 0;
}

static void sync_dir(const char *dir) {
  int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  (void)fsync(fd); /* best effort: some file systems refuse fsync on folders */
  close(fd);
}

static void this_host(char *buf, size_t size) {
  if (gethostname(buf, size - 1) != 0) buf[0] = '\0';
  buf[size - 1] = '\0';
}

/* Rolls the journal's moves forward, then removes journal and commit folder. */
static int roll_forward(const char *dir, const char *jpath, const char *dpath, const cJSON *moves,
                        struct pb_error *err) {
  int i = 0;
  const cJSON *m;
  cJSON_ArrayForEach(m, moves) {
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(m, "from");
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(m, "to");
    if (!cJSON_IsString(f) || !cJSON_IsString(t) || strchr(f->valuestring, '/') ||
        strchr(t->valuestring, '/') || t->valuestring[0] == '\0' || f->valuestring[0] == '\0' ||
        strcmp(t->valuestring, "..") == 0 || strcmp(t->valuestring, ".") == 0 ||
        strcmp(f->valuestring, "..") == 0 || strcmp(f->valuestring, ".") == 0)
      return pb_error_set(err, PB_EFORMAT, "%s: move %d is malformed; not a journal pipebench wrote",
                          jpath, i);
    char from[8192], to[8192], aside[8192];
    snprintf(from, sizeof from, "%s/%s", dpath, f->valuestring);
    snprintf(to, sizeof to, "%s/%s", dir, t->valuestring);
    snprintf(aside, sizeof aside, "%s/earlier-%d", dpath, i);
    if (exists(from)) { /* not moved in yet */
      if (exists(to)) {
        if (exists(aside))
          return pb_error_set(err, PB_EIO,
                              "%s: both %s and the earlier one in %s exist; move one away by hand, "
                              "then remove %s",
                              jpath, to, aside, jpath);
        if (rename(to, aside) != 0)
          return pb_error_set(err, -errno, "%s: cannot move %s aside: %s", jpath, to, strerror(errno));
        test_kill_point();
      }
      if (rename(from, to) != 0)
        return pb_error_set(err, -errno, "%s: cannot move %s into place: %s", jpath, to, strerror(errno));
      test_kill_point();
    }
    i++;
  }
  sync_dir(dir);
  if (unlink(jpath) != 0 && errno != ENOENT)
    return pb_error_set(err, -errno, "%s: cannot remove: %s", jpath, strerror(errno));
  sync_dir(dir);
  pb__remove_tree(dpath);
  return PB_OK;
}

int pb__commit_recover(const char *dir, const char *name, int *recovered, struct pb_error *err) {
  if (recovered != NULL) *recovered = 0;
  char jpath[4200], dpath[4200];
  if (journal_paths(dir, name, jpath, sizeof jpath, dpath, sizeof dpath) != PB_OK)
    return pb_error_set(err, PB_EINVAL, "%s: path too long", dir);
  int fd = open(jpath, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    if (errno != ENOENT)
      return pb_error_set(err, PB_EIO, "%s: cannot open: %s", jpath, strerror(errno));
    /* No journal: a commit folder left is one whose journal was removed (the commit was done)
     * or never written (nothing moved): its contents are no one's. */
    if (exists(dpath)) pb__remove_tree(dpath);
    return PB_OK;
  }
  struct stat st;
  char *text = NULL;
  ssize_t got = -1;
  if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size <= MAX_JOURNAL_BYTES &&
      (text = malloc((size_t)st.st_size + 1)) != NULL) {
    got = pread(fd, text, (size_t)st.st_size, 0);
    if (got >= 0) text[got] = '\0';
  }
  close(fd);
  cJSON *j = got == (ssize_t)st.st_size && text != NULL ? cJSON_Parse(text) : NULL;
  free(text);
  const cJSON *kind = cJSON_GetObjectItemCaseSensitive(j, "kind");
  const cJSON *pid = cJSON_GetObjectItemCaseSensitive(j, "pid");
  const cJSON *host = cJSON_GetObjectItemCaseSensitive(j, "host");
  const cJSON *moves = cJSON_GetObjectItemCaseSensitive(j, "moves");
  if (!cJSON_IsString(kind) || strcmp(kind->valuestring, "pipebench.commit") != 0 ||
      !cJSON_IsNumber(pid) || !cJSON_IsString(host) || !cJSON_IsArray(moves) ||
      cJSON_GetArraySize(moves) > MAX_MOVES) {
    cJSON_Delete(j);
    return pb_error_set(err, PB_EIO,
                        "%s is not a commit journal pipebench can finish; the earlier outputs are "
                        "in %s: look there, then remove both",
                        jpath, dpath);
  }
  char me[256];
  this_host(me, sizeof me);
  long p = (long)pid->valuedouble;
  int alive = strcmp(host->valuestring, me) != 0 || p == (long)getpid() ||
              (p > 0 && (kill((pid_t)p, 0) == 0 || errno != ESRCH));
  if (alive) {
    int err_rc = pb_error_set(err, PB_EIO,
                              "%s: pid %ld on %s is putting new outputs into place here; wait for "
                              "it (if it is gone, remove %s and run again)",
                              dir, p, host->valuestring, jpath);
    cJSON_Delete(j);
    return err_rc;
  }
  int rc = roll_forward(dir, jpath, dpath, moves, err);
  cJSON_Delete(j);
  if (rc == PB_OK && recovered != NULL) *recovered = 1;
  return rc;
}

int pb__commit_settle(const char *path, struct pb_error *err) {
  if (path == NULL || path[0] == '\0') return PB_OK;
  char t[4096], dir[4096];
  size_t n = strlen(path);
  while (n > 1 && path[n - 1] == '/') n--;
  if (n >= sizeof t) return PB_OK;
  memcpy(t, path, n);
  t[n] = '\0';
  const char *base;
  pb__path_split(t, dir, sizeof dir, &base);
  if (base[0] == '\0' || strcmp(base, ".") == 0 || strcmp(base, "..") == 0) return PB_OK;
  /* Cheap when there is nothing to do: two failed lstat calls. */
  char j[8192];
  snprintf(j, sizeof j, "%s/.%s.pbcommit", dir, base);
  if (exists(j)) PB_RETURN_NOT_OK(pb__commit_recover(dir, base, NULL, err));
  snprintf(j, sizeof j, "%s/.gen.pbcommit", dir);
  if (exists(j)) PB_RETURN_NOT_OK(pb__commit_recover(dir, "gen", NULL, err));
  return PB_OK;
}

/* Writes the journal complete under a temporary name, then links it to jpath: link() fails with
 * EEXIST when another commit holds the name, and a reader never sees half a journal. */
static int write_journal(const char *dir, const char *jpath, const char *const *from,
                         const char *const *to, int n, struct pb_error *err) {
  cJSON *j = cJSON_CreateObject();
  char host[256];
  this_host(host, sizeof host);
  cJSON_AddStringToObject(j, "kind", "pipebench.commit");
  cJSON_AddStringToObject(j, "host", host);
  cJSON_AddNumberToObject(j, "pid", (double)getpid());
  cJSON *moves = cJSON_AddArrayToObject(j, "moves");
  for (int i = 0; i < n; i++) {
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "from", from[i]);
    cJSON_AddStringToObject(m, "to", to[i]);
    cJSON_AddItemToArray(moves, m);
  }
  char *text = cJSON_PrintUnformatted(j);
  cJSON_Delete(j);
  if (text == NULL) return pb_error_set(err, PB_ENOMEM, "out of memory");
  char tmp[8192];
  if (pb__temp_name_in(dir, jpath, tmp, sizeof tmp) != PB_OK) {
    free(text);
    return pb_error_set(err, PB_EINVAL, "%s: path too long", jpath);
  }
  int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
  if (fd < 0) {
    int e = errno;
    free(text);
    return pb_error_set(err, -e, "%s: cannot create: %s", tmp, strerror(e));
  }
  int rc = pb__write_all(fd, text, strlen(text), tmp, err);
  free(text);
  if (rc == PB_OK && fsync(fd) != 0) rc = pb_error_set(err, -errno, "%s: fsync: %s", tmp, strerror(errno));
  close(fd);
  if (rc == PB_OK && link(tmp, jpath) != 0)
    rc = errno == EEXIST ? JOURNAL_TAKEN : pb_error_set(err, -errno, "%s: cannot create: %s", jpath, strerror(errno));
  unlink(tmp);
  if (rc == PB_OK) sync_dir(dir);
  return rc;
}

int pb__commit(const char *dir, const char *name, const char *stage, const char *const *from,
               const char *const *to, int n, struct pb_error *err) {
  if (n < 1 || n > MAX_MOVES) return pb_error_set(err, PB_EINVAL, "a commit moves 1 to %d outputs", MAX_MOVES);
  char jpath[4200], dpath[4200];
  if (journal_paths(dir, name, jpath, sizeof jpath, dpath, sizeof dpath) != PB_OK)
    return pb_error_set(err, PB_EINVAL, "%s: path too long", dir);
  sigset_t hold, prev;
  sigemptyset(&hold);
  sigaddset(&hold, SIGINT);
  sigaddset(&hold, SIGTERM);
  sigaddset(&hold, SIGHUP);
  sigprocmask(SIG_BLOCK, &hold, &prev);
  int rc = PB_OK;
  for (int attempt = 0; attempt < 2; attempt++) {
    /* An earlier commit's leftovers first: its journal (finished here) or its folder. */
    rc = pb__commit_recover(dir, name, NULL, err);
    if (rc != PB_OK) break;
    rc = write_journal(dir, jpath, from, to, n, err);
    if (rc != JOURNAL_TAKEN) break;
  }
  if (rc == PB_OK) test_kill_point();
  if (rc == JOURNAL_TAKEN)
    rc = pb_error_set(err, PB_EIO, "%s: another program keeps committing here", jpath);
  if (rc == PB_OK && rename(stage, dpath) != 0) {
    rc = pb_error_set(err, -errno, "%s: cannot move %s to %s: %s", dir, stage, dpath, strerror(errno));
    unlink(jpath); /* nothing has moved: the journal stands for nothing */
  }
  if (rc == PB_OK) test_kill_point();
  if (rc == PB_OK) {
    cJSON *moves = cJSON_CreateArray();
    for (int i = 0; i < n && moves != NULL; i++) {
      cJSON *m = cJSON_CreateObject();
      cJSON_AddStringToObject(m, "from", from[i]);
      cJSON_AddStringToObject(m, "to", to[i]);
      cJSON_AddItemToArray(moves, m);
    }
    rc = moves != NULL ? roll_forward(dir, jpath, dpath, moves, err)
                       : pb_error_set(err, PB_ENOMEM, "out of memory");
    cJSON_Delete(moves);
  }
  sigprocmask(SIG_SETMASK, &prev, NULL);
  return rc;
}
