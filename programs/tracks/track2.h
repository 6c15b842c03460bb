/* Track 2 (loader throughput): the names of its table's columns, shared by track2.c and its
 * torch DataLoader peer (track2_peer.c). */
#ifndef PB_TRACK2_H
#define PB_TRACK2_H

#include "tracks/harness.h"

#define T2_LOADER "loader"
/* where each image was decoded: "cpu" (the loader's workers, the peer's, the Lance engine's; track
 * 2 has no GPU path, track 3 has its own column) */
#define T2_DECODE "decode"
#define T2_CACHE "cache"
#define T2_BATCH_SIZE "batch_size"
#define T2_NUM_WORKERS "num_workers"
#define T2_FIRST_BATCH_TIME "first_batch_time"
#define T2_SAMPLES_PER_SEC "samples_per_sec"
#define T2_MB_PER_SEC "mb_per_sec"
#define T2_MEMCPY_FRACTION "memcpy_fraction"
#define T2_OVER_PEER "pipebench_over_peer" /* rows of the torch DataLoader peer (track2_peer.c) */
#define T2_SUMMARY_PREFIX "batch_time_"

/** Track 2's torch DataLoader peer: adds rows with loader = "torch-dataloader" and, for every
 * peer row, the ratio pipebench / peer of samples per second in the same configuration. */
int pb__track2_peer(pb_run_ctx *c, pb_table *t, const int *bss, int nb, const int *ws, int nw,
                    struct pb_error *err);

#endif
