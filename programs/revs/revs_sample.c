/* While a task of pipebench revs runs: the summed resident set of every process descended from
 * this one (the task and whatever it started: data-loader workers, DDP ranks), and, where
 * nvidia-smi answers, the GPU memory those processes hold. A thread samples /proc every 200 ms
 * and nvidia-smi about every second. Linux only; elsewhere nothing is sampled. */
#include <ctype.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "pipebench/sys.h"
#include "revs/revs_internal.h"

#define SAMPLE_MS 200
#define GPU_EVERY 5 /* samples between two nvidia-smi queries */

typedef struct proc_entry {
  int pid, ppid;
  long rss_pages;
  int mine; /* descends from us */
} proc_entry;

/* Reads /proc/PID/stat: ppid, rss (pages) and whether the command is nvidia-smi (our own
 * sampler's, never counted). Returns 1 when read. */
static int read_stat(int pid, int *ppid, long *rss, int *is_smi) {
  char path[64], buf[1024];
  snprintf(path, sizeof path, "/proc/%d/stat", pid);
  FILE *f = fopen(path, "r");
  if (f == NULL) return 0;
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  fclose(f);
  buf[n] = '\0';
  char *open = strchr(buf, '('), *close = strrchr(buf, ')');
  if (open == NULL || close == NULL || close < open) return 0;
  *is_smi = (size_t)(close - open - 1) == strlen("nvidia-smi") &&
            strncmp(open + 1, "nvidia-smi", 10) == 0;
  /* after the command: state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt
   * utime stime cutime cstime priority nice threads itrealvalue starttime vsize rss */
  char *p = close + 2;
  int field = 3;
  long v = 0;
  for (char *tok = strtok(p, " "); tok != NULL; tok = strtok(NULL, " "), field++) {
    if (field == 4) *ppid = atoi(tok);
    if (field == 24) {
      v = atol(tok);
      break;
    }
  }
  *rss = v;
  return field == 24;
}

/* The processes descended from us, into *list (grown as needed); returns how many entries. */
static size_t scan(proc_entry **list, size_t *cap, double *tree_mb, int self) {
  size_t n = 0;
  DIR *d = opendir("/proc");
  if (d == NULL) return 0;
  struct dirent *e;
  while ((e = readdir(d)) != NULL) {
    if (!isdigit((unsigned char)e->d_name[0])) continue;
    int pid = atoi(e->d_name), ppid = 0, smi = 0;
    long rss = 0;
    if (!read_stat(pid, &ppid, &rss, &smi) || smi) continue;
    if (n == *cap) {
      size_t nc = *cap ? *cap * 2 : 512;
      proc_entry *nl = realloc(*list, nc * sizeof *nl);
      if (nl == NULL) break;
      *list = nl;
      *cap = nc;
    }
    (*list)[n++] = (proc_entry){pid, ppid, rss, pid == self};
  }
  closedir(d);
  /* mark descendants: passes until nothing changes (depth of the tree) */
  for (int changed = 1; changed;) {
    changed = 0;
    for (size_t i = 0; i < n; i++) {
      if ((*list)[i].mine) continue;
      for (size_t j = 0; j < n; j++)
        if ((*list)[j].mine && (*list)[j].pid == (*list)[i].ppid) {
          (*list)[i].mine = changed = 1;
          break;
        }
    }
  }
  long page = sysconf(_SC_PAGESIZE);
  double sum = 0;
  for (size_t i = 0; i < n; i++)
    if ((*list)[i].mine && (*list)[i].pid != self)
      sum += (double)(*list)[i].rss_pages * (double)page;
  *tree_mb = sum / (1024.0 * 1024.0);
  return n;
}

/* GPU memory (MiB) held by our descendants per nvidia-smi; -1 when it does not answer. */
static double gpu_mb(const proc_entry *list, size_t n, int self) {
  const char *argv[] = {"nvidia-smi", "--query-compute-apps=pid,used_memory",
                        "--format=csv,noheader,nounits", NULL};
  pb_proc p = {.argv = argv, .capture_stdout = 1, .stderr_path = "/dev/null", .timeout_s = 10};
  /* a cancel flag nobody sets: without one, pb_proc_run would take over SIGINT/SIGTERM */
  static volatile sig_atomic_t never = 0;
  p.cancel = &never;
  pb_proc_result r;
  if (pb_proc_run(&p, &r, NULL) != PB_OK) {
    free(r.out);
    return -1;
  }
  double sum = 0;
  for (char *line = r.out; line != NULL && *line;) {
    char *next = strchr(line, '\n');
    if (next) *next++ = '\0';
    int pid = 0;
    double mb = 0;
    if (sscanf(line, "%d , %lf", &pid, &mb) == 2)
      for (size_t i = 0; i < n; i++)
        if (list[i].pid == pid && list[i].mine && pid != self) sum += mb;
    line = next;
  }
  free(r.out);
  return sum;
}

static int have_nvidia_smi(void) {
  const char *path = getenv("PATH");
  if (path == NULL) return 0;
  char buf[4096];
  for (const char *p = path; *p;) {
    const char *e = strchr(p, ':');
    size_t len = e ? (size_t)(e - p) : strlen(p);
    snprintf(buf, sizeof buf, "%.*s/nvidia-smi", (int)len, p);
    if (len > 0 && access(buf, X_OK) == 0) return 1;
    if (e == NULL) break;
    p = e + 1;
  }
  return 0;
}

static void *sampler_main(void *arg) {
  pb__revs_sampler *s = arg;
  int self = (int)getpid();
  proc_entry *list = NULL;
  size_t cap = 0;
  for (long k = 0; !atomic_load(&s->stop); k++) {
    double tree = 0;
    size_t n = scan(&list, &cap, &tree, self);
    if (tree > s->peak_tree_mb) s->peak_tree_mb = tree;
    if (s->gpu_tried && k % GPU_EVERY == 0) {
      double g = gpu_mb(list, n, self);
      if (g >= 0) {
        s->gpu_answered = 1;
        if (g > s->peak_gpu_mb) s->peak_gpu_mb = g;
      }
    }
    struct timespec ts = {0, SAMPLE_MS * 1000000L};
    nanosleep(&ts, NULL);
  }
  free(list);
  return NULL;
}

void pb__revs_sampler_start(pb__revs_sampler *s) {
  memset(s, 0, sizeof *s);
  atomic_init(&s->stop, 0);
  s->gpu_tried = have_nvidia_smi();
#ifdef __linux__
  s->running = pthread_create(&s->thread, NULL, sampler_main, s) == 0;
#endif
}

void pb__revs_sampler_stop(pb__revs_sampler *s) {
  if (!s->running) return;
  atomic_store(&s->stop, 1);
  pthread_join(s->thread, NULL);
  s->running = 0;
}
