/* The processes of one run (ranks.h): MPI when built with it (PB_HAVE_MPI) and launched by an MPI
 * launcher, one process otherwise. The collective waits poll non-blocking MPI requests so each can
 * give up after a bound; a blocking MPI_Barrier could not. */
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "pipebench/bench.h"
#include "pipebench/sys.h"
#include "pipebench/results.h"
#include "tracks/ranks.h"

#ifdef PB_HAVE_MPI
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wpedantic"
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#include <mpi.h>
#pragma GCC diagnostic pop
#endif

static int g_rank = 0, g_size = 1, g_joined = 0, g_mpi = 0;
static int g_failed = 0, g_failed_rc = 0;
static char g_failed_msg[sizeof((struct pb_error *)0)->message];

int pb__ranks_rank(void) { return g_rank; }
int pb__ranks_size(void) { return g_size; }
const char *pb__ranks_kind(void) { return g_mpi ? "mpi" : "none"; }
int pb__ranks_failed(void) { return g_failed; }

int pb_mpi_env_size(void) {
  static const char *const vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE", NULL};
  for (int k = 0; vars[k] != NULL; k++) {
    const char *v = getenv(vars[k]);
    if (v != NULL && atoi(v) > 0) return atoi(v);
  }
  return getenv("PMIX_RANK") != NULL ? 1 : 0;
}

int pb_mpi_env_rank(void) {
  static const char *const vars[] = {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", NULL};
  for (int k = 0; vars[k] != NULL; k++) {
    const char *v = getenv(vars[k]);
    if (v != NULL && v[0] != '\0') return atoi(v);
  }
  return 0;
}

int pb__ranks_local_gpu(void) {
  int n = 0;
  const char *vis = getenv("CUDA_VISIBLE_DEVICES");
  if (vis != NULL) {
    for (const char *p = vis; *p;) {
      while (*p == ',' || *p == ' ') p++;
      if (*p == '\0') break;
      n++;
      while (*p && *p != ',') p++;
    }
  } else {
    DIR *d = opendir("/dev");
    struct dirent *e;
    while (d != NULL && (e = readdir(d)) != NULL) {
      const char *s = e->d_name;
      if (strncmp(s, "nvidia", 6) != 0 || s[6] < '0' || s[6] > '9') continue;
      s += 6;
      while (*s >= '0' && *s <= '9') s++;
      if (*s == '\0') n++; /* nvidia0, nvidia1, ... (not nvidiactl, nvidia-uvm) */
    }
    if (d != NULL) closedir(d);
  }
  if (n == 0) return -1;
  const char *lr = getenv("OMPI_COMM_WORLD_LOCAL_RANK");
  if (lr == NULL) lr = getenv("MPI_LOCALRANKID");
  int local = lr != NULL ? atoi(lr) : g_rank;
  return (local < 0 ? 0 : local) % n;
}

void pb__ranks_abort(int status, const char *msg) {
  fprintf(stderr, "pipebench: rank %d of %d: %s\n", g_rank, g_size, msg);
  fflush(stderr);
#ifdef PB_HAVE_MPI
  if (g_mpi) MPI_Abort(MPI_COMM_WORLD, status);
#endif
  _exit(status);
}

#ifdef PB_HAVE_MPI

static int g_we_initialised = 0;

static double timeout_s(void) {
  const char *v = getenv("PIPEBENCH_RANKS_TIMEOUT_S");
  double t = v != NULL ? atof(v) : 0;
  return t > 0 ? t : 1800;
}

static void finalize_at_exit(void) {
  int fin = 0;
  MPI_Finalized(&fin);
  if (!fin) MPI_Finalize();
}

/* Waits for req, polling: a first few tries at once (a collective among ranks that are all there
 * completes in microseconds), then every 50 us so that ranks oversubscribing cores leave them to
 * the ranks still working. Past the bound the job is aborted. */
static void wait_req(MPI_Request *req, const char *what) {
  int64_t deadline = pb_now_ns() + (int64_t)(timeout_s() * 1e9);
  for (unsigned tries = 0;; tries++) {
    int done = 0;
    MPI_Test(req, &done, MPI_STATUS_IGNORE);
    if (done) return;
    if (pb_now_ns() > deadline) {
      char msg[256];
      snprintf(msg, sizeof msg, "the other ranks did not reach %s within %.0f s "
               "(PIPEBENCH_RANKS_TIMEOUT_S); stopping the job", what, timeout_s());
      pb__ranks_abort(2, msg);
    }
    if (tries > 200) nanosleep(&(struct timespec){0, 50000}, NULL);
  }
}

int pb__ranks_init(struct pb_error *err) {
  g_failed = 0; /* every rank starts a new collective call (pb_run) here */
  if (g_joined) return PB_OK;
  int inited = 0;
  MPI_Initialized(&inited);
  if (!inited && pb_mpi_env_size() == 0) { /* a plain process: MPI stays untouched */
    g_joined = 1;
    return PB_OK;
  }
  if (!inited) {
    int provided = 0;
    if (MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS)
      return pb_error_set(err, PB_EUNSUPPORTED, "MPI_Init failed");
    g_we_initialised = 1;
    atexit(finalize_at_exit);
  }
  MPI_Comm_rank(MPI_COMM_WORLD, &g_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &g_size);
  if (g_size == 1 && pb_mpi_env_size() > 1)
    /* each process would measure and write alone, as if it were the only one */
    return pb_error_set(err, PB_EUNSUPPORTED, "started as one of %d ranks, but MPI sees one: the "
                        "launcher is not the one of the MPI library pipebench loaded (use that "
                        "library's mpirun)", pb_mpi_env_size());
  g_mpi = 1;
  g_joined = 1;
  return PB_OK;
}

static void mpi_version(char *buf, size_t size) {
  char v[MPI_MAX_LIBRARY_VERSION_STRING];
  int len = 0;
  if (MPI_Get_library_version(v, &len) != MPI_SUCCESS) len = 0;
  v[len < (int)sizeof v ? len : (int)sizeof v - 1] = '\0';
  char *nl = strpbrk(v, ",\n"); /* "Open MPI v4.1.4, package: ..." -> "Open MPI v4.1.4" */
  if (nl != NULL) *nl = '\0';
  snprintf(buf, size, "%s", v);
}
__attribute__((constructor)) static void register_mpi_version(void) {
  pb_env_register_version("mpi_version", mpi_version);
}

#else

int pb__ranks_init(struct pb_error *err) {
  g_failed = 0; /* every rank starts a new collective call (pb_run) here */
  if (g_joined) return PB_OK;
  int n = pb_mpi_env_size();
  if (n > 1)
    return pb_error_set(err, PB_EUNSUPPORTED, "started as one of %d ranks by an MPI launcher, but "
                        "this pipebench was built without MPI (install libopenmpi-dev and "
                        "configure again)", n);
  g_joined = 1;
  return PB_OK;
}

#endif

int pb__ranks_agree(int rc, struct pb_error *err) {
  if (g_failed) { /* err keeps what the caller added to the agreed message (its context) */
    if (err != NULL && err->message[0] == '\0')
      snprintf(err->message, sizeof err->message, "%s", g_failed_msg);
    return g_failed_rc;
  }
  if (g_size == 1) return rc;
#ifdef PB_HAVE_MPI
  int *codes = calloc((size_t)g_size, sizeof *codes);
  if (codes == NULL) pb__ranks_abort(2, "out of memory agreeing on the ranks' status");
  MPI_Request req;
  MPI_Iallgather(&rc, 1, MPI_INT, codes, 1, MPI_INT, MPI_COMM_WORLD, &req);
  wait_req(&req, "the same point of the run");
  int first = -1;
  for (int r = 0; r < g_size && first < 0; r++)
    if (codes[r] != PB_OK) first = r;
  int code = first >= 0 ? codes[first] : PB_OK;
  free(codes);
  if (first < 0) return PB_OK;
  char msg[sizeof g_failed_msg];
  memset(msg, 0, sizeof msg);
  if (g_rank == first)
    snprintf(msg, sizeof msg, "%s", err != NULL && err->message[0] ? err->message : pb_strerror(rc));
  MPI_Ibcast(msg, (int)sizeof msg, MPI_CHAR, first, MPI_COMM_WORLD, &req);
  wait_req(&req, "the exchange of a rank's error");
  msg[sizeof msg - 1] = '\0';
  snprintf(g_failed_msg, sizeof g_failed_msg, "rank %d: %s", first, msg);
  g_failed = 1;
  g_failed_rc = code;
  if (err != NULL) snprintf(err->message, sizeof err->message, "%s", g_failed_msg);
  return code;
#else
  return rc;
#endif
}

int pb__ranks_allgather_f64(const double *mine, int n, double *all, struct pb_error *err) {
  (void)err;
  if (g_size == 1) {
    memmove(all, mine, (size_t)n * sizeof *all);
    return PB_OK;
  }
#ifdef PB_HAVE_MPI
  MPI_Request req;
  MPI_Iallgather(mine, n, MPI_DOUBLE, all, n, MPI_DOUBLE, MPI_COMM_WORLD, &req);
  wait_req(&req, "a gathering of timings");
#endif
  return PB_OK;
}

int pb__ranks_allgather_i64(const int64_t *mine, int n, int64_t *all, struct pb_error *err) {
  (void)err;
  if (g_size == 1) {
    memmove(all, mine, (size_t)n * sizeof *all);
    return PB_OK;
  }
#ifdef PB_HAVE_MPI
  MPI_Request req;
  MPI_Iallgather(mine, n, MPI_INT64_T, all, n, MPI_INT64_T, MPI_COMM_WORLD, &req);
  wait_req(&req, "a gathering of counts");
#endif
  return PB_OK;
}

int pb__ranks_gather_f64(const double *mine, size_t n, double **all, size_t *total,
                         struct pb_error *err) {
  *all = NULL;
  *total = 0;
  int64_t cnt = (int64_t)n;
  int64_t *counts = calloc((size_t)g_size, sizeof *counts);
  if (counts == NULL) return pb_error_set(err, PB_ENOMEM, "out of memory");
  int rc = pb__ranks_allgather_i64(&cnt, 1, counts, err);
  size_t sum = 0;
  for (int r = 0; r < g_size; r++) sum += (size_t)counts[r];
  if (rc == PB_OK && sum > (size_t)0x7fffffff) /* MPI counts are int */
    rc = pb_error_set(err, PB_ERANGE, "%zu timings are too many to gather", sum);
  double *buf = NULL;
  if (rc == PB_OK && g_rank == 0 && (buf = malloc((sum ? sum : 1) * sizeof *buf)) == NULL)
    rc = pb_error_set(err, PB_ENOMEM, "out of memory");
  /* the checks above give the same answer on every rank but the allocation; a rank 0 that could
   * not allocate still takes part, receiving nothing */
  if (g_size == 1) {
    if (buf != NULL) memcpy(buf, mine, n * sizeof *buf);
  }
#ifdef PB_HAVE_MPI
  else if (sum <= (size_t)0x7fffffff) {
    int *rcounts = NULL, *displs = NULL;
    if (g_rank == 0 && buf != NULL) {
      rcounts = calloc((size_t)g_size, sizeof *rcounts);
      displs = calloc((size_t)g_size, sizeof *displs);
      if (rcounts == NULL || displs == NULL) pb__ranks_abort(2, "out of memory gathering timings");
      int off = 0;
      for (int r = 0; r < g_size; r++) {
        rcounts[r] = (int)counts[r];
        displs[r] = off;
        off += rcounts[r];
      }
    } else if (g_rank == 0) {
      pb__ranks_abort(2, "out of memory gathering timings");
    }
    MPI_Request req;
    MPI_Igatherv(mine, (int)n, MPI_DOUBLE, buf, rcounts, displs, MPI_DOUBLE, 0, MPI_COMM_WORLD,
                 &req);
    wait_req(&req, "a gathering of timings");
    free(rcounts);
    free(displs);
  }
#endif
  free(counts);
  if (rc != PB_OK) {
    free(buf);
    return rc;
  }
  *all = buf;
  *total = g_rank == 0 ? sum : 0;
  return PB_OK;
}

int pb__ranks_bcast(void *buf, size_t size, struct pb_error *err) {
  if (g_size == 1) return PB_OK;
  if (size > (size_t)0x7fffffff) return pb_error_set(err, PB_ERANGE, "%zu bytes: too many to send", size);
#ifdef PB_HAVE_MPI
  MPI_Request req;
  MPI_Ibcast(buf, (int)size, MPI_BYTE, 0, MPI_COMM_WORLD, &req);
  wait_req(&req, "a broadcast from rank 0");
#else
  (void)buf;
#endif
  return PB_OK;
}

/* ---- the common window -------------------------------------------------------------------- */

void pb__ranks_list(const double *v, int n, char *buf, size_t size) {
  size_t u = 0;
  buf[0] = '\0';
  for (int r = 0; r < n && u < size; r++) {
    char num[64]; /* counts as integers, others as the tables write doubles: shortest exact */
    if (v[r] == floor(v[r]) && fabs(v[r]) < 9007199254740992.0) snprintf(num, sizeof num, "%.0f", v[r]);
    else pb_format_double(v[r], num, sizeof num);
    int k = snprintf(buf + u, size - u, "%s%s", r ? "," : "", num);
    if (k < 0) break;
    u += (size_t)k;
  }
}

int pb__ranks_window_gather(int64_t samples, double own_s, double window_s, pb__ranks_window *w,
                           struct pb_error *err) {
  memset(w, 0, sizeof *w);
  int n = g_size;
  double mine[3] = {(double)samples, own_s, window_s};
  double *all = malloc((size_t)n * 3 * sizeof *all);
  double *col = malloc((size_t)n * sizeof *col);
  int rc = all != NULL && col != NULL ? PB_OK : pb_error_set(err, PB_ENOMEM, "out of memory");
  /* every rank takes part even when its allocation failed: the status is agreed right after */
  rc = pb__ranks_agree(rc, err);
  if (rc == PB_OK) rc = pb__ranks_allgather_f64(mine, 3, all, err);
  if (rc != PB_OK) {
    free(all);
    free(col);
    return rc;
  }
  w->n = n;
  w->slowest = 0;
  double sum_rate = 0;
  for (int r = 0; r < n; r++) {
    /* the longest of the ranks' windows: a rank that left the opening agreement late (an
     * oversubscribed core) has a shorter one than the ranks that started first */
    if (!(all[3 * r + 2] <= w->window_s)) w->window_s = all[3 * r + 2];
    w->samples += (int64_t)all[3 * r];
    double rate = all[3 * r + 1] > 0 ? all[3 * r] / all[3 * r + 1] : NAN;
    col[r] = rate;
    sum_rate += rate;
    if (r == 0 || rate < w->slowest_rate) w->slowest_rate = rate, w->slowest = r;
    if (r == 0 || rate > w->fastest_rate) w->fastest_rate = rate;
  }
  w->mean_rate = sum_rate / n;
  w->imbalance = w->slowest_rate > 0 ? w->fastest_rate / w->slowest_rate : NAN;
  w->rate = w->window_s > 0 ? (double)w->samples / w->window_s : NAN;
  pb__ranks_list(col, n, w->rate_list, sizeof w->rate_list);
  for (int r = 0; r < n; r++) col[r] = all[3 * r];
  pb__ranks_list(col, n, w->samples_list, sizeof w->samples_list);
  free(all);
  free(col);
  return PB_OK;
}

void pb__ranks_window_columns(pb_table *t, const pb__ranks_window *w) {
  pb_table_set_i64(t, PB__RANK_COL_RANKS, w->n);
  pb_table_set_f64(t, PB__RANK_COL_WINDOW, w->window_s);
  pb_table_set_i64(t, PB__RANK_COL_SAMPLES, w->samples);
  pb_table_set_str(t, PB__RANK_COL_PER_RANK_SAMPLES, w->samples_list);
  pb_table_set_str(t, PB__RANK_COL_PER_RANK_RATE, w->rate_list);
  pb_table_set_i64(t, PB__RANK_COL_SLOWEST, w->slowest);
  pb_table_set_f64(t, PB__RANK_COL_SLOWEST_RATE, w->slowest_rate);
  pb_table_set_f64(t, PB__RANK_COL_IMBALANCE, w->imbalance);
}
