/* Lance measured inside its own engine (lancedb for Node): rows of tracks 1 and 2 beside
 * pipebench's, marked with the engine that produced them. */
#ifndef PB_TRACK_LANCE_H
#define PB_TRACK_LANCE_H

#include "tracks/harness.h"

/** The column naming the engine of a row ("lancedb-node 0.31.0"); empty on pipebench's rows. */
#define PB__COL_ENGINE "engine"

/** For every lance dataset of the run, adds track 1 rows (track == 1: single-row takeOffsets in
 * pipebench's sequential and shuffled sample orders, per-sample times) or track 2 rows
 * (track == 2: takeOffsets of batch_sizes[k] rows in the shuffled order, per-batch times), timed
 * by the helper and summarised here by pipebench's statistics. No lance dataset: nothing. */
int pb__track_lance(pb_run_ctx *c, pb_table *t, int track, const int *batch_sizes, int nb,
                    struct pb_error *err);

#endif
