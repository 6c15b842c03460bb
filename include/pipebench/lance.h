/* pipebench lance: the Lance engine itself (lancedb, through the lance format's Node helper),
 * for measuring reads inside the engine as the lance rows of a run do. Datasets are read and
 * written through pipebench/format.h like every other format; this is only the engine's own
 * timing. */
#ifndef PIPEBENCH_LANCE_H
#define PIPEBENCH_LANCE_H

#include <stddef.h>
#include <stdint.h>

#include "pipebench/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/** Whether the Lance engine can run here: PB_OK and its name ("lancedb-node 0.31.0") in engine
 * (may be NULL); otherwise PB_EUNSUPPORTED with one line saying why. */
PB_API int pb_lance_engine(char *engine, size_t size, struct pb_error *err);

/** The engine serving one Lance dataset (a helper process). */
typedef struct pb_lance pb_lance;

/** Starts the engine over the dataset at path. *out is freed with pb_lance_free. */
PB_API int pb_lance_open(const char *path, pb_lance **out, struct pb_error *err);
/** Stops the engine; NULL is fine. */
PB_API void pb_lance_free(pb_lance *l);
/** Rows of the dataset. */
PB_API int64_t pb_lance_count(const pb_lance *l);
/** Times reads inside the engine over the rows of order (n offsets, in order): batch 0 takes one
 * row per call, batch >= 1 that many rows per call. *times (malloc'd, the caller frees it) gets
 * each call's time in ns, *ncalls their number, *bytes the pixel bytes the calls returned. */
PB_API int pb_lance_take_times(pb_lance *l, const int64_t *order, size_t n, int batch,
                               int64_t **times, size_t *ncalls, int64_t *bytes,
                               struct pb_error *err);

#ifdef __cplusplus
}
#endif
#endif
