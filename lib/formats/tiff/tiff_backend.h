/* The tiff backend's shared internals: file I/O for libtiff, the IFD chain walker, and the
 * OME-XML / description parsers and writer. Internal to src/formats/tiff/. */
#ifndef PB_TIFF_BACKEND_H
#define PB_TIFF_BACKEND_H

#include <stddef.h>
#include <stdint.h>
#include <tiffio.h>

#include "formats/format_internal.h"
#include "io/io.h"

/* ---- I/O ------------------------------------------------------------------------------------ */

/** One open file seen through libtiff. Small reads (IFDs, tag arrays) are served from a window
 * that is refilled with one pread, so parsing a directory costs one or two system calls. */
typedef struct pb__tiff_io {
  pb__io_file *file;
  struct stat st;         /**< the file's fstat at open (or at the scan it was given from) */
  uint64_t size;          /**< file size at open */
  uint64_t pos;           /**< libtiff's file position */
  unsigned char *win;     /**< read window (malloc'd) */
  uint64_t win_off;
  size_t win_len, win_cap;
  int64_t bytes_io;       /**< bytes fetched from the file so far */
  const char *path;       /**< for messages; not owned */
  char msg[512];          /**< first message libtiff reported on this handle ("" if none) */
  int header_known;       /**< the header was read: byte order and kind below */
  int big_endian, bigtiff;
} pb__tiff_io;

/** Opens path for reading through the I/O layer (opts NULL: the defaults); no libtiff yet.
 * known: the fstat kept from when the file was scanned (spares one; a file cut short since
 * then reads short, an error), or NULL. seen: over a URL, what the scan's open learnt (spares
 * the HEAD; the reads still check the size and validator), or NULL. */
int pb__tiff_io_open(pb__tiff_io *io, const char *path, const pb_read_options *opts,
                     const struct stat *known, const pb__io_known *seen, struct pb_error *err);
void pb__tiff_io_close(pb__tiff_io *io);
/** Reads exactly n bytes at off (through the window when small). PB_EFORMAT when the file ends
 * first, with a message naming what was read (what; NULL: "data"). */
int pb__tiff_io_pread(pb__tiff_io *io, void *buf, size_t n, uint64_t off, const char *what,
                      struct pb_error *err);

/** Runs libtiff over an open io. header_only: load no directory (TIFFSetSubDirectory picks
 * one). Errors and warnings go to io->msg, never to stderr. NULL on failure (err is set). */
TIFF *pb__tiff_client_open(pb__tiff_io *io, int header_only, struct pb_error *err);

/** Opens a file for writing through libtiff with the same silent error handling. */
TIFF *pb__tiff_open_write(const char *path, int bigtiff, char *msg, size_t msg_size,
                          struct pb_error *err);

/** libtiff's message for io, or "no details" when it gave none. */
const char *pb__tiff_msg(const pb__tiff_io *io);

/** Checks the TIFF header and walks the main IFD chain, storing the offsets of the first
 * max_ifds directories (all of them when max_ifds is 0) in *offsets (malloc'd). Loops and
 * offsets beyond the file are PB_EFORMAT. */
int pb__tiff_walk_ifds(pb__tiff_io *io, uint64_t max_ifds, uint64_t **offsets, uint64_t *count,
                       struct pb_error *err);

/** Checks the directory at ifd_off (page `page`, for messages) against the image it describes:
 * RowsPerStrip or TileWidth/TileLength non-zero, StripOffsets and StripByteCounts (or
 * TileOffsets and TileByteCounts) present with exactly as many entries as the image needs, and
 * every block with data inside the file. PB_EFORMAT names the file, the page and the tag. */
int pb__tiff_check_layout(pb__tiff_io *io, uint64_t ifd_off, int64_t page, struct pb_error *err);

/* ---- descriptions ---------------------------------------------------------------------------- */

/** One TiffData element of OME-XML. */
typedef struct pb__ome_tiffdata {
  int64_t ifd, first[3]; /**< first: T, C, Z */
  int64_t plane_count;   /**< -1 when absent */
  int has_ifd;
  char file[256];        /**< UUID FileName, "" when absent */
} pb__ome_tiffdata;

/** What pipebench takes from an OME-XML document (its first Image). */
typedef struct pb__ome_info {
  int64_t size[PB_NDIM]; /**< T, C, Z, Y, X */
  char order[8];         /**< DimensionOrder, e.g. "XYZCT" */
  char type[16];         /**< Pixels Type */
  double physical_size[3];
  char physical_unit[3][16];
  char image_id[64];
  char image_name[256];
  int n_channels;
  pb_channel channels[PB_MAX_CHANNELS];
  int channel_spp;       /**< SamplesPerPixel of the first Channel, 0 when absent */
  int n_images;          /**< Image elements in the document */
  int binary_only;       /**< metadata lives in another file */
  size_t n_tiffdata;
  pb__ome_tiffdata *tiffdata; /**< malloc'd; free with pb__ome_info_destroy */
} pb__ome_info;

/** Parses OME-XML. 1: parsed, 0: not OME-XML (no OME root), negative: malformed (why says). */
int pb__ome_parse(const char *xml, pb__ome_info *out, char *why, size_t why_size);
void pb__ome_info_destroy(pb__ome_info *info);
/** Is OME Pixels Type `type` the pixel type dtype ("uint16", "float" for float32, "double")? */
int pb__ome_type_is(const char *type, pb_dtype dtype);

/** Writes OME-XML for one image stored as pages in XYZCT order in one file (file_name: its
 * name, for the TiffData). Returns a malloc'd string, NULL when out of memory. */
char *pb__ome_write(const pb_image_meta *meta, const char *file_name);

/** Plane order from a tifffile "shaped" JSON description or an ImageJ description.
 * Fills sizes (T, C, Z; page-level, samples excluded) and order ("XY" + fastest..slowest).
 * separate: samples are stored as separate planes (their axis precedes Y, X).
 * 1: understood, 0: not such a description, negative: inconsistent (why says). */
int pb__tiff_parse_shaped(const char *desc, int spp, int separate, int64_t n_pages, int64_t sizes[3],
                          char order[8], char *why, size_t why_size);
int pb__tiff_parse_imagej(const char *desc, int64_t sizes[3], char order[8]);

/* ---- writer (tiff_write.c) ------------------------------------------------------------------ */

int pb__tiff_writer_open(const char *path, const pb_write_params *params, void **wstate,
                         struct pb_error *err);
int pb__tiff_writer_add(void *wstate, const pb_image_meta *meta, const void *pixels,
                        struct pb_error *err);
int pb__tiff_writer_finish(void *wstate, struct pb_error *err);
void pb__tiff_writer_free(void *wstate);

/** How many reads so far took the cached uncompressed-strip layout instead of libtiff. */
long pb__tiff_direct_reads(void);
/* Files whose layout was scanned (directories walked, tags read) since the process started:
 * tests check that a clone scans nothing its source had scanned. */
long pb__tiff_scans(void);

#endif
