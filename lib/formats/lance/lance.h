/* The lance format's engine: a Node helper running lancedb (lib/formats/lance/helper/pb_lance.js),
 * started through common/proc and spoken to over a Unix socket. Internal; the tracks use it to
 * measure Lance inside its own engine. */
#ifndef PB_FORMATS_LANCE_H
#define PB_FORMATS_LANCE_H

#include <stddef.h>
#include <stdint.h>

#include "pipebench/core.h"
#include "pipebench/format.h"

/** Whether the Lance engine can run here: PB_OK and its name ("lancedb-node 0.31.0") in
 * engine; otherwise PB_EUNSUPPORTED with one line saying why (no node, helper or package
 * missing: run scripts/setup.sh). engine may be NULL. */
int pb__lance_engine(char *engine, size_t size, struct pb_error *err);

/** A helper serving one Lance dataset. */
typedef struct pb__lance pb__lance;

/** Starts a helper over the dataset at path and reads what it holds. opts (may be NULL): for
 * s3://, its timeout_s and retries go to lancedb's object store (0 and -1: lancedb's own).
 * Free with pb__lance_free. */
int pb__lance_open(const char *path, const pb_read_options *opts, pb__lance **out,
                   struct pb_error *err);
void pb__lance_free(pb__lance *l);
int64_t pb__lance_count(const pb__lance *l);

/** Times reads inside the engine over the rows of order (n offsets, in that order): batch 0
 * takes one row per takeOffsets call, batch >= 1 that many rows per call. *times (malloc'd,
 * the caller frees it) gets each call's time in ns, *ncalls their number, *bytes the bytes of
 * the pixel column the calls returned. */
int pb__lance_take_times(pb__lance *l, const int64_t *order, size_t n, int batch, int64_t **times,
                         size_t *ncalls, int64_t *bytes, struct pb_error *err);

#endif
