/* Track 3 with the user's framework (run --tracks 3 --framework torch): a torch model fed by
 * pipebench's loader, by torch's DataLoader over the same files, and by device-resident input
 * (the compute bound), in interleaved rounds (python/pipebench_track3_torch.py, run as a child
 * process). Its rows go into track 3's table with the columns below; track3.c hands over to it
 * where --framework is given. docs/track3-torch.md says what the rows mean. */
#ifndef PB_TRACK3_TORCH_H
#define PB_TRACK3_TORCH_H

#include "tracks/tracks.h"

/* The columns only these rows carry (track 3's schema lists them); they also fill window_s,
 * the synchronised window images/s is over (a column of the ranks). */
#define PB__T3_FRAMEWORK "framework"
#define PB__T3_FEEDER "feeder"
#define PB__T3_SHARE "compute_bound_share"
#define PB__T3_TORCH_COLUMNS                                                                   \
  PB__T3_FRAMEWORK, PB__T3_FEEDER, "loader", "device_name", "device_busy_s",                   \
      PB__T3_SHARE, "over_dataloader", "drained_batches"

/** Whether the run asks for a framework's model (params->framework set). */
int pb__t3_torch_wanted(const pb_run_params *p);
/** Checks --framework and --torch-model before anything runs: an unknown framework, or
 * --torch-model / --emulate-ms where they do not fit, is PB_EINVAL (a usage error); a model file
 * that is not there is PB_ENOTFOUND. */
int pb__t3_torch_validate(const pb_run_params *p, struct pb_error *err);
/** Measures every format of the run and writes track 3's table, summary and console line. */
int pb__t3_torch_run(pb_run_ctx *c, struct pb_error *err);
/** Whether t holds rows of a framework's model (a feeder column with values). */
int pb__t3_torch_table(const pb_table *t);
/** The answer in one sentence, from the table's medians over rounds. */
void pb__t3_torch_headline(const pb_table *t, char *text, size_t size);
/** The report's section: one table row per format and feeder. */
void pb__t3_torch_section(pb__report_doc *d, const pb_table *t, char (*cells)[64]);

#endif
