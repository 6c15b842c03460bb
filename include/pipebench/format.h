/* pipebench formats: one image model, one interface over every storage format. */
#ifndef PIPEBENCH_FORMAT_H
#define PIPEBENCH_FORMAT_H

#include <stddef.h>
#include <stdint.h>

#include "pipebench/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/** Pixel types. Values are stable (they appear in files of the raw format). */
typedef enum {
  PB_UINT8 = 0,
  PB_UINT16 = 1,
  PB_UINT32 = 2,
  PB_INT16 = 3,
  PB_FLOAT32 = 4,
  PB_FLOAT64 = 5,
  PB_DTYPE_COUNT = 6
} pb_dtype;

/** Bytes per pixel; 0 for an invalid dtype. */
PB_API size_t pb_dtype_size(pb_dtype d);
/** numpy-style name: "uint8", "uint16", "uint32", "int16", "float32", "float64". */
PB_API const char *pb_dtype_name(pb_dtype d);
/** Parses a numpy-style name (also OME names "float" and "double"). PB_EINVAL if unknown. */
PB_API int pb_dtype_parse(const char *name, pb_dtype *out);

/** Axis order everywhere: T, C, Z, Y, X. */
enum { PB_T = 0, PB_C = 1, PB_Z = 2, PB_Y = 3, PB_X = 4, PB_NDIM = 5 };

#define PB_MAX_CHANNELS 32

typedef struct pb_channel {
  char id[48];
  char name[64];
  float emission_um, excitation_um; /**< 0 when unknown */
  char illumination[24];
  uint32_t color_rgba;              /**< 0xRRGGBBAA */
} pb_channel;

/** What is known about one image. Plain data: copy freely. */
typedef struct pb_image_meta {
  char name[256];          /**< e.g. "img_00000.zarr", "img_00000.ome.tif", or the row's name */
  char id[64];
  pb_dtype dtype;
  int64_t shape[PB_NDIM];  /**< t, c, z, y, x; each >= 1 */
  double physical_size[3]; /**< x, y, z; 0 when unknown */
  char physical_unit[3][16]; /**< "µm" etc.; "" when unknown */
  int n_channels;          /**< entries used in channels (<= PB_MAX_CHANNELS) */
  pb_channel channels[PB_MAX_CHANNELS];
} pb_image_meta;

/** Fills meta with a name, dtype and shape and clears everything else. */
PB_API void pb_image_meta_init(pb_image_meta *meta, const char *name, pb_dtype dtype,
                               const int64_t shape[PB_NDIM]);
/** Number of pixels (product of the shape) and bytes of the whole image. */
PB_API int64_t pb_image_pixels(const pb_image_meta *meta);
PB_API size_t pb_image_bytes(const pb_image_meta *meta);

/** A box in T,C,Z,Y,X: start and count per axis. */
typedef struct pb_region {
  int64_t start[PB_NDIM];
  int64_t count[PB_NDIM];
} pb_region;

/** Where one read's time went, in nanoseconds; a backend fills what it can tell apart and
 * leaves the rest 0. bytes_read: bytes fetched from storage; bytes_decoded: pixel bytes out. */
typedef struct pb_stage_times {
  int64_t read_ns, decompress_ns, decode_ns;
  int64_t bytes_read, bytes_decoded;
} pb_stage_times;

/** An open dataset: a set of images in one storage format.
 * A handle is used by one thread at a time; to read from several threads, open one handle per
 * thread (the loader does). */
typedef struct pb_dataset pb_dataset;

/** How a dataset is read. Start from PB_READ_OPTIONS_DEFAULTS; zero fields take the defaults.
 * The environment variables documented in docs/io.md override them. */
typedef struct pb_read_options {
  int map;            /**< local files: -1 map where safe (default), 0 never, 1 prefer */
  int direct;         /**< 1: O_DIRECT where the file system allows it (no page cache) */
  size_t block_size;  /**< bytes per read of a large range; 0: the backend's default */
  int in_flight;      /**< remote: requests in flight per reader; 0: the default */
  double timeout_s;   /**< remote: limit per request in seconds; 0: the default */
  int retries;        /**< remote: repeats after a transient failure; -1: the default */
  int insecure;       /**< https: 1 accepts a certificate that does not verify */
  int trace_requests; /**< 1: one line per storage request on stderr */
  const char *cache;  /**< "disk:PATH": a local copy filled on first read; NULL: none */
  int page_reader;    /**< OME-Arrow Parquet: -1 (default) or 1 pixel pages read by pipebench's
                           own page reader where the file's layout allows; 0 always DuckDB */
  int tiff_strips;    /**< TIFF: -1 (default) or 1 uncompressed contiguous strips read straight
                           from the file; 0 every page through libtiff */
  int64_t cache_mb;   /**< OME-Arrow DuckDB reads: block cache per handle in MiB; -1: default */
  int meta_in_flight; /**< remote folders of OME-Zarr or TIFF images: images whose metadata a
                           scan in index order reads at once; 0: the default (32), 1: one
                           image after another (docs/remote.md) */
} pb_read_options;
#define PB_READ_OPTIONS_DEFAULTS                                                                \
  {.map = -1, .direct = 0, .block_size = 0, .in_flight = 0, .timeout_s = 0, .retries = -1,      \
   .insecure = 0, .trace_requests = 0, .cache = NULL, .page_reader = -1, .tiff_strips = -1,     \
   .cache_mb = -1, .meta_in_flight = 0}

/** Opens path. format: a format name, or NULL to detect it from the path. *out is freed with
 * pb_dataset_free. Errors name the file and the problem. */
PB_API int pb_dataset_open(const char *path, const char *format, pb_dataset **out,
                           struct pb_error *err);
/** pb_dataset_open with read options (NULL: the defaults). path may be a URL where the build
 * reads remote storage (docs/remote.md). */
PB_API int pb_dataset_open_opts(const char *path, const char *format, const pb_read_options *opts,
                                pb_dataset **out, struct pb_error *err);
PB_API void pb_dataset_free(pb_dataset *ds);

/** @name Locations: local paths or URLs (http://, https://, s3://; docs/remote.md)
 * Read with the defaults and the PIPEBENCH_* overrides of docs/io.md (the CLI's --insecure,
 * --timeout, --retries, --in-flight and --trace-requests set those). @{ */
/** 1 when location is a URL a remote backend reads (not a local path or file://). */
PB_API int pb_location_is_url(const char *location);
/** What stands at location: *kind 0 nothing, 1 a file, 2 a folder, 3 something else; *size (may
 * be NULL) a file's bytes. An error (refused, timed out) names the location and the cause. */
PB_API int pb_location_stat(const char *location, int *kind, uint64_t *size,
                            struct pb_error *err);
/** The whole file at location (at most max bytes, else PB_EUNSUPPORTED) into *data, freed with
 * pb_free(*data, *size). Missing: PB_ENOTFOUND. */
PB_API int pb_location_read(const char *location, size_t max, void **data, size_t *size,
                            struct pb_error *err);
/** Storage requests and bytes fetched so far by this process, all threads and datasets
 * together: range requests, HEADs and listings over HTTP and S3, preads of local files (a
 * mapped file's reads are not counted). Deltas around a read give requests per image. */
PB_API void pb_io_counters(int64_t *requests, int64_t *bytes);
/** The summed durations (request to last byte, nanoseconds) of this process's requests over
 * HTTP and S3, counted as each request ends. Its delta over a window divided by the window's
 * length is the mean number of requests in flight during it (Little's law, exact for requests
 * that start and end inside the window). */
PB_API void pb_io_request_time(int64_t *ns);
/** The largest object this process has opened so far at the endpoint of the URL at (its scheme
 * and authority: http://host:port, s3://bucket), into location (as given, which may hold
 * credentials: show it through pb_location_shown): 1 and *bytes its size, else 0. */
PB_API int pb_io_largest_object(const char *at, char *location, size_t size, uint64_t *bytes);
/** The kind of storage at location: "file", "http", "https" or "s3" (static storage). */
PB_API const char *pb_location_endpoint(const char *location);
/** location as messages and results show it: a URL's "user:password@" written "***@" (S3
 * keys never stand in a URL). Into buf (size bytes, cut short when it does not fit). */
PB_API void pb_location_shown(const char *location, char *buf, size_t size);
/** Rewrites err's message so that location's "user:password@" (wherever it appears, also in
 * the URLs under it) reads "***@". err may be NULL. */
PB_API void pb_location_mask_error(const char *location, struct pb_error *err);
/** @} */
/** Name of the format of an open dataset ("ome-zarr", ...). */
PB_API const char *pb_dataset_format(const pb_dataset *ds);
PB_API const char *pb_dataset_path(const pb_dataset *ds);
/** Number of images. */
PB_API int64_t pb_dataset_count(const pb_dataset *ds);
/** Metadata of image i. */
PB_API int pb_dataset_meta(pb_dataset *ds, int64_t i, pb_image_meta *out, struct pb_error *err);
/** Reads image i (all of it) into dst as native pixels, T,C,Z,Y,X C order, native byte order.
 * dst_size must be at least pb_image_bytes(meta). times may be NULL. */
PB_API int pb_dataset_read(pb_dataset *ds, int64_t i, void *dst, size_t dst_size,
                           pb_stage_times *times, struct pb_error *err);
/** Reads a region of image i into dst (C order over the region's counts), touching only the
 * chunks, tiles or rows the region needs. */
PB_API int pb_dataset_read_region(pb_dataset *ds, int64_t i, const pb_region *region,
                                  void *dst, size_t dst_size, pb_stage_times *times,
                                  struct pb_error *err);

/** Class label of image i: its class index for formats that have classes (imagefolder: the
 * position of its class folder's name in sorted order, as torchvision's ImageFolder), -1 for
 * formats without labels or an index out of range. */
PB_API int64_t pb_dataset_label(pb_dataset *ds, int64_t i);

/** Files the format passed over in the dataset's folder (imagefolder: files whose names do not
 * end in .jpg, .jpeg or .png, files at the top level, dangling links); 0 for formats that skip
 * nothing. */
PB_API int64_t pb_dataset_ignored(const pb_dataset *ds);

/** How to write. Zero/NULL fields take the format's defaults. */
typedef struct pb_write_params {
  const char *compression; /**< "none", "zstd", "lz4", "gzip", "deflate", "blosc-lz4",
                                "blosc-zstd", ... as the format allows; NULL: its default */
  int level;               /**< compression level; 0: the codec's default */
  int64_t chunk[PB_NDIM];  /**< chunk/tile shape in T,C,Z,Y,X; 0 on an axis: the default */
  const char *options;     /**< format-specific "key=value,key=value" (see docs/formats.md) */
  int force;               /**< gen and convert: replace a regular file at an output name even
                                when no manifest proves pipebench wrote it (never a folder) */
} pb_write_params;
#define PB_WRITE_PARAMS_DEFAULTS {NULL, 0, {0, 0, 0, 0, 0}, NULL, 0}

/** A writer builds a dataset from images added one at a time. Output appears at path only
 * when pb_writer_finish succeeds; pb_writer_free before that removes what was written. */
typedef struct pb_writer pb_writer;
PB_API int pb_writer_new(const char *path, const char *format, const pb_write_params *params,
                         pb_writer **out, struct pb_error *err);
/** Adds one image: meta and its pixels (T,C,Z,Y,X C order, pb_image_bytes(meta) bytes). */
PB_API int pb_writer_add(pb_writer *w, const pb_image_meta *meta, const void *pixels,
                         struct pb_error *err);
PB_API int pb_writer_finish(pb_writer *w, struct pb_error *err);
PB_API void pb_writer_free(pb_writer *w);

/** Registered formats. */
typedef struct pb_format_info {
  const char *name;
  const char *description;
  int can_read, can_write;
} pb_format_info;
PB_API int pb_format_count(void);
PB_API const pb_format_info *pb_format_at(int i);
/** Info of a format by name, or NULL. */
PB_API const pb_format_info *pb_format_find(const char *name);

/** zlib CRC-32 of an image's pixel bytes (little-endian, T,C,Z,Y,X C order). */
PB_API uint32_t pb_image_crc32(const pb_image_meta *meta, const void *pixels);

/** @name Option strings ("k=v,k=v", as pb_write_params.options) @{ */
/** Checks options against the keys known to `format` (NULL-terminated; "key=a|b" entries name
 * the values): an unknown key or an item without '=' is PB_EINVAL naming it and the valid keys. */
PB_API int pb_opt_check(const char *format, const char *options, const char *const *keys,
                        struct pb_error *err);
/** Copies the value of key in options into buf: 1 when found, 0 when not. */
PB_API int pb_opt_get(const char *options, const char *key, char *buf, size_t size);
/** @} */

/** @name The Parquet readers' decoded-block cache
 * Readers (ome-parquet, oa-dataset) opened by a thread keep decoded blocks up to a byte budget:
 * PB_OA_CACHE_MB (MiB) from the environment when set, else the thread's own setting, else their
 * default. @{ */
/** The budget a reader opening now on this thread uses (dflt when nothing sets one). */
PB_API size_t pb_pq_cache_budget(size_t dflt);
/** Sets this thread's budget for readers it opens from now on (-1: none set); returns the
 * previous setting, to be put back. */
PB_API long long pb_pq_cache_budget_set(long long bytes);
/** @} */

#ifdef __cplusplus
}
#endif
#endif
