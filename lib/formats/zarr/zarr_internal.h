/* The ome-zarr backend's internals: parsed array metadata, codec pipelines, chunk decoding.
 * Split out of the backend so the fuzz targets can reach the parsers directly. */
#ifndef PB_ZARR_INTERNAL_H
#define PB_ZARR_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "codecs/codec.h"
#include "formats/format_internal.h"
#include "io/io.h"

#define PB__ZARR_MAX_B2B 4
/* Largest decoded chunk accepted (guards allocations driven by hostile metadata). */
#define PB__ZARR_MAX_CHUNK_BYTES ((int64_t)1 << 32)
/* Largest image accepted: keeps every size product far from overflow. */
#define PB__ZARR_MAX_IMAGE_BYTES ((int64_t)1 << 48)
/* Most chunk (or shard) files an array's grid may have. A missing chunk is legitimate (it reads
 * as the fill value), so the grid is held to this before anything is read; a 64 GiB image (the
 * default PIPEBENCH_MAX_IMAGE_BYTES) in this many chunks has 4 KiB chunks. docs/format-ome-zarr.md. */
#define PB__ZARR_MAX_GRID_CHUNKS ((int64_t)1 << 24)

enum { PB__ZC_NONE = 0, PB__ZC_BLOSC, PB__ZC_ZSTD, PB__ZC_GZIP, PB__ZC_ZLIB, PB__ZC_CRC32C };

/** One bytes-to-bytes codec. */
typedef struct pb__zarr_codec {
  int id;         /**< PB__ZC_* */
  int level;      /**< compression level (writers); 0 default */
  int shuffle;    /**< blosc: 0 none, 1 byte, 2 bit */
  char cname[12]; /**< blosc inner compressor */
} pb__zarr_codec;

/** What turns a chunk's stored bytes into its elements: byte-to-byte codecs (in encode order)
 * and the byte order of the elements. */
typedef struct pb__zarr_pipe {
  int big_endian;
  int n;
  pb__zarr_codec c[PB__ZARR_MAX_B2B];
} pb__zarr_pipe;

/** One array, as stored ("file dims") and as seen through T,C,Z,Y,X. */
typedef struct pb__zarr_array {
  int version;               /**< 2 or 3 */
  int ndim;                  /**< dimensions in the file, 1..5 */
  int64_t fshape[PB_NDIM];   /**< per file dim */
  int64_t fchunk[PB_NDIM];   /**< per file dim: the stored unit (the shard when sharded) */
  int64_t finner[PB_NDIM];   /**< per file dim: inner chunk when sharded */
  int has_dim_names;
  char dim_names[PB_NDIM];   /**< v3 dimension_names (first letter), 0 when unnamed */
  int axis[PB_NDIM];         /**< file dim -> PB_T..PB_X (set by pb__zarr_map_axes) */
  int64_t shape[PB_NDIM];    /**< TCZYX; 1 on axes the file lacks */
  int64_t chunk[PB_NDIM];    /**< TCZYX */
  int64_t inner[PB_NDIM];    /**< TCZYX; equals chunk when not sharded */
  pb_dtype dtype;
  size_t esize;
  unsigned char fill[8];     /**< one element in native byte order */
  int fill_zero;
  char sep;                  /**< chunk key separator */
  int key_prefix_c;          /**< v3 "default" key encoding: keys start with "c" */
  pb__zarr_pipe pipe;        /**< chunk codecs (the inner chunks' when sharded) */
  int sharded;
  int index_at_end, index_crc, index_big_endian;
  int64_t grid_chunks;       /**< chunk (or shard) files in the grid, at most the bound above */
  int64_t max_stored;        /**< largest chunk (or shard) file its decoded size can need */
} pb__zarr_array;

/** What the OME attributes of an image group say (transient; big because of channels). */
typedef struct pb__zarr_ome {
  int naxes;                       /**< 0 when the attributes name no axes */
  char axes[PB_NDIM];              /**< 't','c','z','y','x' per file dim */
  char unit[PB_NDIM][24];
  double scale[PB_NDIM];
  char path[256];                  /**< first (full-resolution) dataset path */
  int n_channels;
  pb_channel channels[PB_MAX_CHANNELS];
} pb__zarr_ome;

/** Reusable buffers of one reader (a dataset handle, or a fuzz run). */
typedef struct pb__zarr_scratch {
  unsigned char *buf[2];
  size_t cap[2];
  unsigned char *file;   /**< raw bytes of a chunk file */
  size_t file_cap;
  unsigned char *chunk;  /**< a decoded chunk */
  size_t chunk_cap;
  unsigned char *index;  /**< a shard index */
  size_t index_cap;
  unsigned char *shard;  /**< a whole shard file, when a region needs all of it */
  size_t shard_cap;
  unsigned char *ranges; /**< the pieces of an uncompressed chunk's scattered read */
  size_t ranges_cap;
  pb__codec_ctx codec;   /**< zstd context and zlib stream, set up once */
} pb__zarr_scratch;

void pb__zarr_scratch_destroy(pb__zarr_scratch *s);
/** Makes *buf hold at least need bytes (pb_alloc'd). */
int pb__zarr_reserve(unsigned char **buf, size_t *cap, size_t need);

/** Parses .zarray (version 2) or an array's zarr.json (version 3). label names the file in
 * messages. Leaves axis/shape/chunk TCZYX fields for pb__zarr_map_axes. */
int pb__zarr_parse_array(const char *json, size_t n, int version, const char *label,
                         pb__zarr_array *out, struct pb_error *err);
/** Refuses (PB_EUNSUPPORTED, naming label, the count and the bound) an array whose grid has
 * more than PB__ZARR_MAX_GRID_CHUNKS chunk or shard files. */
int pb__zarr_check_grid(const pb__zarr_array *a, const char *label, struct pb_error *err);
/** Parses a v2 .zattrs or a v3 group zarr.json for OME multiscales and omero channels. */
int pb__zarr_parse_ome(const char *json, size_t n, int version, const char *label,
                       pb__zarr_ome *out, struct pb_error *err);
/** Maps the array's file dims onto T,C,Z,Y,X using the OME axes (or v3 dimension_names, or
 * the trailing axes of TCZYX when nothing names them). */
int pb__zarr_map_axes(pb__zarr_array *a, const pb__zarr_ome *ome, const char *label,
                      struct pb_error *err);

/** Decodes one chunk's stored bytes through pipe into out (exactly out_size bytes, native byte
 * order). Errors are PB_ECODEC (a codec failed) or PB_EFORMAT (wrong decoded size). */
int pb__zarr_decode(const pb__zarr_pipe *pipe, size_t esize, pb__zarr_scratch *s,
                    const unsigned char *in, size_t n, unsigned char *out, size_t out_size,
                    struct pb_error *err);
/** Encodes n bytes through pipe (little-endian elements) into *out (grown as needed). */
int pb__zarr_encode(const pb__zarr_pipe *pipe, size_t esize, void *zstd_cctx,
                    const unsigned char *in, size_t n, unsigned char **out, size_t *out_cap,
                    size_t *out_n, struct pb_error *err);

/** CRC-32C (Castagnoli) of data, as the sharding index and crc32c codec use. */
uint32_t pb__crc32c(uint32_t crc, const void *data, size_t n);

/** Where a chunk or shard's bytes come from: an open file or memory. */
typedef struct pb__zarr_src {
  pb__io_file *file;
  const unsigned char *mem;
  size_t size;
} pb__zarr_src;

/** Reads the part of one stored unit (chunk or shard, at grid position g in TCZYX) that the
 * region (dst's box) needs, decoding into dst. src NULL: the unit is missing (fill value).
 * times may be NULL. */
int pb__zarr_place_unit(const pb__zarr_array *a, pb__zarr_scratch *s, const pb__zarr_src *src,
                        const int64_t g[PB_NDIM], const pb_region *region, unsigned char *dst,
                        pb_stage_times *times, struct pb_error *err);

/** Fills with the fill value the part of the region that nx missing units in a row along X,
 * from grid position g (TCZYX), cover. */
void pb__zarr_fill_units(const pb__zarr_array *a, const int64_t g[PB_NDIM], int64_t nx,
                         const pb_region *region, unsigned char *dst);

/* The writer (zarr_writer.c); the vtable lives in zarr_dataset.c. */
int pb__zarr_writer_open(const char *path, const pb_write_params *params, void **wstate,
                         struct pb_error *err);
int pb__zarr_writer_add(void *wstate, const pb_image_meta *meta, const void *pixels,
                        struct pb_error *err);
int pb__zarr_writer_finish(void *wstate, struct pb_error *err);
void pb__zarr_writer_free(void *wstate);
/** How sure we are that path is an OME-Zarr dataset or image (0..100). */
int pb__zarr_probe(const char *path);

#endif
