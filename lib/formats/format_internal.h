/* The interface every storage backend implements, and helpers they share. Internal. */
#ifndef PB_FORMAT_INTERNAL_H
#define PB_FORMAT_INTERNAL_H

#include "common/fs.h"
#include "pipebench/format.h"

/** One backend. Read functions get the state `open` made; write functions the state
 * `writer_open` made. A backend that cannot read or write leaves those pointers NULL and
 * fills `refuse` with the reason to give users. */
typedef struct pb_format_vtable {
  pb_format_info info;
  /** How sure the backend is that path holds its format: 0 no, 1..100 yes. Cheap: looks at
   * names and a few bytes only. */
  int (*probe)(const char *path);
  /** opts: resolved (pb__io_options_resolve), never NULL; the state may keep the pointer
   * only until open returns. */
  int (*open)(const char *path, const pb_read_options *opts, void **state, struct pb_error *err);
  void (*close)(void *state);
  int64_t (*count)(void *state);
  int (*meta)(void *state, int64_t i, pb_image_meta *out, struct pb_error *err);
  /** region NULL: the whole image. dst holds exactly the region's pixels in C order. format.c
   * has checked i, the region (inside the shape meta gives) and dst_size before: a reader
   * trusts them and checks only what its file's own contents could get wrong. */
  int (*read)(void *state, int64_t i, const pb_region *region, void *dst, size_t dst_size,
              pb_stage_times *times, struct pb_error *err);
  int (*writer_open)(const char *path, const pb_write_params *params, void **wstate,
                     struct pb_error *err);
  int (*writer_add)(void *wstate, const pb_image_meta *meta, const void *pixels,
                    struct pb_error *err);
  /** Makes the output visible at path (e.g. renames a temporary folder into place). */
  int (*writer_finish)(void *wstate, struct pb_error *err);
  /** Frees wstate; when finish did not succeed, removes everything written. */
  void (*writer_free)(void *wstate);
  const char *refuse; /**< for names that are known but not available (vortex) */
  /** The --options keys the writer knows, each as "key=what it takes", NULL-terminated; NULL
   * when it takes none. pb_writer_new refuses any other key. */
  const char *const *write_options;
  /** The class label of image i (0-based), or -1; NULL for formats without labels. */
  int64_t (*label)(void *state, int64_t i);
  /** Region of image i decoded at reduced resolution: *scale asks for 1/1, 1/2, 1/4 or 1/8 and
   * returns what was done (a backend may do less, e.g. 1). Writes the box `out` of the scaled
   * image (pb__scaled_box of region and the returned scale) in C order; dst_size holds the
   * region at scale 1. NULL: the format decodes at full resolution only (pb__read_scaled then
   * reads the region with `read`). */
  int (*read_scaled)(void *state, int64_t i, const pb_region *region, int *scale, void *dst,
                     size_t dst_size, pb_region *out, pb_stage_times *times, struct pb_error *err);
  /** Files passed over at open (pb_dataset_ignored); NULL: none. */
  int64_t (*ignored)(void *state);
  /** The dtype and shape of image i: the part of meta that format.c checks every read against,
   * for formats whose full meta costs more than the read it guards. NULL: meta is used. */
  int (*shape)(void *state, int64_t i, pb_dtype *dtype, int64_t shape[PB_NDIM],
               struct pb_error *err);
  /** A second handle on the same dataset from an open one, keeping what the first has learnt
   * (listings, parsed metadata) so it costs no storage request; scratch buffers are its own.
   * state is only read, by one thread. NULL: a second handle is opened from the path. */
  int (*clone)(const void *state, void **out, struct pb_error *err);
} pb_format_vtable;

/** Metadata read ahead (lib/formats/meta_ahead.c): load(ctx, i) for every i in [from, from + n)
 * on up to `reads` threads at once (opts->meta_in_flight: 0 is PB__AHEAD_READS, at most
 * PB__AHEAD_MAX), returning when all are done. load must touch only image i's own state and
 * keep any failure to itself (the caller loads a failed image again in the foreground, where
 * its error is reported as before). For folders of images over a URL, whose images cost a
 * request or two each. pb__meta_ahead_images: how many images a scan should hand it at once
 * (0: none, read one image after another). */
enum { PB__AHEAD_READS = 32 };
int64_t pb__meta_ahead_images(const pb_read_options *opts);
void pb__meta_ahead(const pb_read_options *opts, void *ctx, int64_t from, int64_t n,
                    void (*load)(void *ctx, int64_t i));

/** The box of an image scaled by 1/scale that covers region: on Y and X from floor(start / scale)
 * to ceil((start + count) / scale), clipped to ceil(size / scale); T, C, Z unchanged. */
void pb__scaled_box(const pb_region *region, const int64_t shape[PB_NDIM], int scale, pb_region *out);
/** pb_dataset_read_region at reduced resolution through the format's read_scaled (*scale in and
 * out as there); formats without it read the region at scale 1. */
int pb__read_scaled(pb_dataset *ds, int64_t i, const pb_region *region, int *scale, void *dst,
                    size_t dst_size, pb_region *out, pb_stage_times *times, struct pb_error *err);

/** A second handle on ds for another thread: the format's clone where it has one (no storage
 * request), else the path opened again with opts. ds is only read; *out is freed with
 * pb_dataset_free. */
int pb__dataset_clone(const pb_dataset *ds, const pb_read_options *opts, pb_dataset **out,
                      struct pb_error *err);

/** Over a URL: the format found from one stat and one listing or one range of the first bytes
 * (lib/formats/detect_url.c); an error names the URL and why (not found, not a dataset). */
int pb__format_detect_url(const char *path, const pb_read_options *ro,
                          const pb_format_vtable **vt, struct pb_error *err);
/** PB_OK when format can be read over a URL; PB_EUNSUPPORTED naming why not (duckdb,
 * oa-dataset, lance). */
int pb__format_url_check(const char *path, const char *format, struct pb_error *err);

/* Registered backends (src/formats/registry.c lists them). */
int pb__format_vtable_count(void);
const pb_format_vtable *pb__format_vtable_at(int i);
const pb_format_vtable *pb__format_vtable_find(const char *name);


/** Checks a "k=v,k=v" option string against the keys a format knows (NULL-terminated): an
 * unknown key or an item without '=' is PB_EINVAL naming the item and listing the valid keys
 * (or saying that the format takes none). */
int pb__opt_check(const char *format, const char *options, const char *const *keys,
                  struct pb_error *err);

/** Looks up key in a "k=v,k=v" option string; copies its value into buf. 1 found, 0 not. */
int pb__opt_get(const char *options, const char *key, char *buf, size_t size);

/** Whole-image region of shape. */
void pb__region_full(pb_region *r, const int64_t shape[PB_NDIM]);

/** Copies the intersection of a source box and a destination box (both TCZYX C-order arrays of
 * element size esize). src_origin/src_shape: where the source block sits in image coordinates;
 * dst_origin/dst_shape likewise. Used to place chunks into images and regions. */
void pb__copy_box(void *dst, const int64_t dst_origin[PB_NDIM], const int64_t dst_shape[PB_NDIM],
                  const void *src, const int64_t src_origin[PB_NDIM],
                  const int64_t src_shape[PB_NDIM], size_t esize);

/* Files and folders (file kinds, opening only regular files, mkdirs, remove_tree, read_file,
 * write_file, list_dir, temp_sibling, temp_sweep) come from common/fs.h. */

#endif
