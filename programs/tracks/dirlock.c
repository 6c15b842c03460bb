/* The lock of a results folder (dirlock.h). */
#include "tracks/dirlock.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "pipebench/sys.h"

struct pb__dirlock {
  struct pb__dirlock *next;
  dev_t dir_dev; /* the folder: what makes two takes of this process the same lock */
  ino_t dir_ino;
  dev_t dev; /* the lock file locked */
  ino_t ino;
  pid_t owner; /* a forked copy of the holder holds nothing (its flock is the holder's) */
  int fd;
  int count;
  char path[4200];
};

static pthread_mutex_t held_mu = PTHREAD_MUTEX_INITIALIZER;
static struct pb__dirlock *held; /* the locks this process holds */

/* The pid the holder wrote into the lock file, or 0. */
static long holder_pid(int fd) {
  char buf[32];
  ssize_t got = pread(fd, buf, sizeof buf - 1, 0);
  if (got <= 0) return 0;
  buf[got] = '\0';
  return strtol(buf, NULL, 10);
}

/* Opens and locks path; 1 when the lock was had but path names another file by now (the holder
 * removed it as it let go): the caller tries again. */
static int lock_once(struct pb__dirlock *l, const char *dir, const char *what, struct pb_error *err) {
  int fd = open(l->path, O_RDWR | O_CREAT | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0644);
  if (fd < 0 && errno == ELOOP)
    return pb_error_set(err, PB_EIO, "%s is a symbolic link, not pipebench's lock file: "
                        "remove it", l->path);
  if (fd < 0) return pb_error_set(err, -errno, "cannot create the lock file %s: %s", l->path, strerror(errno));
  struct stat st;
  if (fstat(fd, &st) != 0) {
    int rc = pb_error_set(err, -errno, "%s: %s", l->path, strerror(errno));
    close(fd);
    return rc;
  }
  if (!S_ISREG(st.st_mode)) {
    int rc = pb_error_set(err, PB_EIO, "%s is %s, not pipebench's lock file: remove it", l->path,
                          pb_file_kind((unsigned)st.st_mode));
    close(fd);
    return rc;
  }
  if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
    int e = errno;
    long pid = e == EWOULDBLOCK ? holder_pid(fd) : 0;
    close(fd);
    if (e != EWOULDBLOCK)
      return pb_error_set(err, -e, "cannot lock %s: %s", l->path, strerror(e));
    char who[48] = "";
    if (pid > 0) snprintf(who, sizeof who, " (pid %ld)", pid);
    return pb_error_set(err, -EWOULDBLOCK, "%s is in use by another pipebench%s that writes "
                        "there: wait for it to end, or choose another folder (this %s would mix "
                        "its files with that one's)", dir, who, what);
  }
  struct stat now;
  if (lstat(l->path, &now) != 0 || now.st_dev != st.st_dev || now.st_ino != st.st_ino) {
    close(fd);
    return 1;
  }
  char text[32];
  int n = snprintf(text, sizeof text, "%ld\n", (long)getpid());
  if (ftruncate(fd, 0) == 0 && n > 0) {
    ssize_t w = pwrite(fd, text, (size_t)n, 0); /* for messages only: a failure is harmless */
    (void)w;
  }
  l->fd = fd;
  l->dev = st.st_dev;
  l->ino = st.st_ino;
  return PB_OK;
}

int pb__dirlock_take(const char *dir, const char *what, pb__dirlock **out, struct pb_error *err) {
  *out = NULL;
  struct stat ds;
  if (stat(dir, &ds) != 0) return pb_error_set(err, -errno, "%s: %s", dir, strerror(errno));
  if (!S_ISDIR(ds.st_mode)) return pb_error_set(err, PB_EIO, "%s is not a folder", dir);
  pthread_mutex_lock(&held_mu);
  for (struct pb__dirlock *h = held; h != NULL; h = h->next) {
    if (h->owner == getpid() && h->dir_dev == ds.st_dev && h->dir_ino == ds.st_ino) {
      h->count++;
      *out = h;
      pthread_mutex_unlock(&held_mu);
      return PB_OK;
    }
  }
  struct pb__dirlock *l = calloc(1, sizeof *l);
  int rc = l == NULL ? pb_error_set(err, PB_ENOMEM, "out of memory") : PB_OK;
  if (rc == PB_OK && (size_t)snprintf(l->path, sizeof l->path, "%s/%s", dir, PB__DIRLOCK_NAME) >= sizeof l->path)
    rc = pb_error_set(err, PB_EINVAL, "%s: path too long", dir);
  /* A holder letting go between our open and our lock makes us try again; a few times is
   * plenty, as every retry means some process got the lock meanwhile. */
  for (int tries = 0; rc == PB_OK; tries++) {
    rc = lock_once(l, dir, what, err);
    if (rc == 1 && tries == 100) rc = pb_error_set(err, PB_EIO, "cannot lock %s: it keeps changing", l->path);
    if (rc != 1) break;
    rc = PB_OK;
  }
  if (rc == PB_OK) {
    l->dir_dev = ds.st_dev;
    l->dir_ino = ds.st_ino;
    l->count = 1;
    l->owner = getpid();
    l->next = held;
    held = l;
    *out = l;
  } else {
    free(l);
  }
  pthread_mutex_unlock(&held_mu);
  return rc;
}

void pb__dirlock_release(pb__dirlock *l) {
  if (l == NULL || l->owner != getpid()) return; /* a forked copy lets its parent's alone */
  pthread_mutex_lock(&held_mu);
  if (--l->count > 0) {
    pthread_mutex_unlock(&held_mu);
    return;
  }
  for (struct pb__dirlock **p = &held; *p != NULL; p = &(*p)->next) {
    if (*p == l) {
      *p = l->next;
      break;
    }
  }
  pthread_mutex_unlock(&held_mu);
  /* Removed while still locked, and only when the name is still ours: a taker that opened it
   * before finds its file gone from the name once it has the lock, and takes a new one. */
  struct stat now;
  if (lstat(l->path, &now) == 0 && now.st_dev == l->dev && now.st_ino == l->ino) unlink(l->path);
  close(l->fd);
  free(l);
}
