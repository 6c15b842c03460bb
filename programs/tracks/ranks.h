/* The processes of one run: MPI ranks when pipebench was built with MPI and launched by mpirun,
 * otherwise one process that is rank 0 of 1. This is the only interface to MPI: nothing else
 * includes mpi.h, and every call here works (as a no-op or a copy) in a single process.
 *
 * Collective calls must be made by every rank in the same order. Failures are agreed at
 * pb__ranks_agree: a rank that fails reaches the next agree call (wherever it is) and every rank
 * leaves that call with the failing rank's message, so no rank waits on one that has stopped.
 * Every collective wait is bounded (PIPEBENCH_RANKS_TIMEOUT_S seconds, default 1800): past it the rank
 * prints why and aborts the whole job with exit status 2, the last resort against a rank stuck
 * outside pipebench. */
#ifndef PB_RANKS_H
#define PB_RANKS_H

#include <stddef.h>
#include <stdint.h>

#include "pipebench/core.h"
#include "pipebench/results.h"

/** Joins the job: MPI_Init when the process was started by an MPI launcher (mpirun sets
 * OMPI_COMM_WORLD_SIZE, PMIx launchers PMIX_RANK) and MPI is not initialised yet; nothing for a
 * plain process. Idempotent. Fails when a launcher asks for more than one rank but this build
 * has no MPI. MPI_Finalize runs at exit when this call initialised MPI. Each call forgets a
 * failure agreed before (every rank calls it at the start of a run). */
int pb__ranks_init(struct pb_error *err);
/** This process's rank and the number of ranks (0 and 1 before pb__ranks_init or without MPI). */
int pb__ranks_rank(void);
int pb__ranks_size(void);
/** "mpi" when ranks are MPI processes, "none" otherwise. */
const char *pb__ranks_kind(void);

/** Collective: every rank passes its own status (rc, and err's message when rc != 0). Returns
 * PB_OK on every rank when all passed PB_OK; otherwise the status of the lowest failing rank on
 * every rank, with err set to "rank R: <its message>". Once a failure has been agreed across
 * ranks, later calls return it at once without communicating (every rank knows it). With one
 * rank it returns rc as it is and remembers nothing. */
int pb__ranks_agree(int rc, struct pb_error *err);
/** Has a failure been agreed? */
int pb__ranks_failed(void);

/** Collective: every rank's n values, in rank order, into all (n * size values, on every rank). */
int pb__ranks_allgather_f64(const double *mine, int n, double *all, struct pb_error *err);
int pb__ranks_allgather_i64(const int64_t *mine, int n, int64_t *all, struct pb_error *err);
/** Collective: every rank's n values (n may differ) concatenated in rank order on rank 0, into
 * *all (malloc'ed, the caller frees; NULL on other ranks) with *total values. */
int pb__ranks_gather_f64(const double *mine, size_t n, double **all, size_t *total,
                         struct pb_error *err);
/** Collective: size bytes of buf from rank 0 to every rank. */
int pb__ranks_bcast(void *buf, size_t size, struct pb_error *err);
/** Stops every rank of the job with this exit status after printing msg (rank-prefixed) to
 * stderr; a plain process exits. For failures that cannot be agreed (a collective timed out). */
void pb__ranks_abort(int status, const char *msg) __attribute__((noreturn));

/** The GPU this rank should use: its rank on this host modulo the GPUs visible here
 * (CUDA_VISIBLE_DEVICES, else /dev/nvidiaN), or -1 when none is visible. */
int pb__ranks_local_gpu(void);

/* ---- what a track's table says about the ranks ---------------------------------------------- */

#define PB__RANK_COL_RANKS "ranks"
#define PB__RANK_COL_WINDOW "window_s"
#define PB__RANK_COL_SAMPLES "samples_all_ranks"
#define PB__RANK_COL_PER_RANK_SAMPLES "rank_samples"
#define PB__RANK_COL_PER_RANK_RATE "rank_samples_per_sec"
#define PB__RANK_COL_SLOWEST "slowest_rank"
#define PB__RANK_COL_SLOWEST_RATE "slowest_rank_samples_per_sec"
#define PB__RANK_COL_IMBALANCE "rank_imbalance"
/* Columns of every row of a track measured across ranks (tracks 2 and 3). */
#define PB__RANK_COLUMNS                                                                       \
  PB__RANK_COL_RANKS, PB__RANK_COL_WINDOW, PB__RANK_COL_SAMPLES, PB__RANK_COL_PER_RANK_SAMPLES, \
      PB__RANK_COL_PER_RANK_RATE, PB__RANK_COL_SLOWEST, PB__RANK_COL_SLOWEST_RATE,             \
      PB__RANK_COL_IMBALANCE

/** What each rank measured in one common window, gathered to every rank. */
typedef struct pb__ranks_window {
  int n;              /**< ranks */
  double window_s;    /**< the longest of the ranks' times from the window's opening agree to
                           its closing one (every rank's timed work lies inside its own) */
  int64_t samples;    /**< over all ranks */
  double rate;        /**< samples / window_s: the aggregate throughput */
  int slowest;        /**< the rank of the lowest own rate */
  double slowest_rate, fastest_rate, mean_rate;
  double imbalance;   /**< fastest / slowest own rate (1 = balanced) */
  char samples_list[512], rate_list[512]; /**< per rank, comma-separated, rank order */
} pb__ranks_window;

/** Collective: combines each rank's samples and own time (seconds it measured them over) into
 * w. window_s is this rank's length of the common window (the longest is used). */
int pb__ranks_window_gather(int64_t samples, double own_s, double window_s, pb__ranks_window *w,
                           struct pb_error *err);
/** Sets the PB__RANK_COLUMNS of t's current row from w. */
void pb__ranks_window_columns(pb_table *t, const pb__ranks_window *w);
/** Formats n values as "a,b,c" into buf, each the shortest text that reads back exactly. */
void pb__ranks_list(const double *v, int n, char *buf, size_t size);

#endif
