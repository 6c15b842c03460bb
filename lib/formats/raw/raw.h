/* The raw backend's internal entry points beyond the vtable: what the loader's shared cache
 * mode uses to read pixels straight out of the memory map. Internal. */
#ifndef PB_RAW_H
#define PB_RAW_H

#include "formats/format_internal.h"

extern const pb_format_vtable pb__format_raw;

/** Pixels of image i inside the read-only map of an open raw file (state from
 * pb__format_raw.open), valid until close. *nbytes receives their size. i must be in range
 * (the caller checks); the offsets were validated against the file size at open. Thread-safe:
 * the map is only read. */
const void *pb__raw_pixels(void *state, int64_t i, size_t *nbytes);

/** Test seam: when not NULL, called before every read of a raw file (not by
 * pb__raw_pixels); a non-zero return fails that read with its code. Set it before any reader
 * starts. Lets tests make a slow or failing dataset without a separate backend. */
extern int (*pb__raw_read_hook)(const char *path, int64_t i, struct pb_error *err);

/** pb__format_raw.open with the file mapped (whatever the options and the environment say), as
 * pb__raw_pixels needs: PB_EUNSUPPORTED naming the file when it cannot be. */
int pb__raw_open_mapped(const char *path, void **state, struct pb_error *err);

/** Pixels of image i, as above, or NULL when the file is read, not mapped (the options turned
 * mapping off): see pb__raw_open_mapped. */

/** Size of the mapped file in bytes. */
size_t pb__raw_file_size(void *state);

#endif
