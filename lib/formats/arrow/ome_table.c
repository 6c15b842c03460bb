/* OME-Arrow tables: one image per row in a column `ome_arrow` holding the OME-Arrow nested
 * struct. This file holds the table's writer and reader, which two containers share (see
 * ome_table.h), and the Parquet container itself (`ome-parquet`: its footer, the direct page
 * reads, the COPY that writes it). The DuckDB container is lib/formats/duckdb/. See
 * docs/format-ome-arrow.md. */
#include <errno.h>
#include <stddef.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/checked.h"
#include "common/duck_msg.h"
#include "common/vec.h"
#include "formats/arrow/oa_common.h"
#include "formats/arrow/oa_pq.h"
#include "formats/arrow/ome_table.h"
#include "io/io.h"
#include "parquet/pq_cache.h"

/* Layouts: planes (one Y*X list per t, c, z), numeric chunks (the current ome-arrow writer's
 * default) and byte chunks (OME_ARROW_BYTE_STRUCT). */
enum { OT_PLANES = 0, OT_CHUNKS = 1, OT_BYTES = 2 };
static const char *const ot_layout_names[3] = {"planes", "chunks", "chunk-bytes"};

#define OT_VERSION "pipebench-0.1.0"

/* ---- the nested type ------------------------------------------------------------------------
 * Field order follows ome-arrow.md; writers fill fields by these indexes. */
enum { F_TYPE, F_VERSION, F_ID, F_NAME, F_IMAGE_TYPE, F_ACQ, F_PIXELS_META, F_CHUNK_GRID,
       F_CHUNKS, F_PLANES, F_MASKS };
enum { PM_DIM_ORDER, PM_TYPE, PM_SX, PM_SY, PM_SZ, PM_SC, PM_ST, PM_PHX, PM_PHY, PM_PHZ,
       PM_UX, PM_UY, PM_UZ, PM_CHANNELS };

static void ome_type_sql(char *buf, size_t size, int layout, pb_dtype dtype) {
  const char *px = layout != OT_BYTES ? pb__ome_arrow_dtype_sql(dtype) : "USMALLINT";
  char chunk_tail[96];
  if (layout != OT_BYTES)
    snprintf(chunk_tail, sizeof chunk_tail, "pixels %s[]", px);
  else
    snprintf(chunk_tail, sizeof chunk_tail, "dtype VARCHAR, compression VARCHAR, pixel_bytes BLOB");
  snprintf(buf, size,
           "STRUCT(\"type\" VARCHAR, \"version\" VARCHAR, id VARCHAR, \"name\" VARCHAR, "
           "image_type VARCHAR, acquisition_datetime TIMESTAMP, "
           "pixels_meta STRUCT(dimension_order VARCHAR, \"type\" VARCHAR, size_x INTEGER, "
           "size_y INTEGER, size_z INTEGER, size_c SMALLINT, size_t INTEGER, "
           "physical_size_x FLOAT, physical_size_y FLOAT, physical_size_z FLOAT, "
           "physical_size_x_unit VARCHAR, physical_size_y_unit VARCHAR, "
           "physical_size_z_unit VARCHAR, channels STRUCT(id VARCHAR, \"name\" VARCHAR, "
           "emission_um FLOAT, excitation_um FLOAT, illumination VARCHAR, "
           "color_rgba UINTEGER)[]), "
           "chunk_grid STRUCT(\"order\" VARCHAR, chunk_t INTEGER, chunk_c SMALLINT, "
           "chunk_z INTEGER, chunk_y INTEGER, chunk_x INTEGER, chunk_order VARCHAR), "
           "chunks STRUCT(t INTEGER, c SMALLINT, z INTEGER, y INTEGER, x INTEGER, "
           "shape_z INTEGER, shape_y INTEGER, shape_x INTEGER, %s)[], "
           "planes STRUCT(z INTEGER, t INTEGER, c SMALLINT, pixels %s[])[], "
           "masks \"NULL\")",
           chunk_tail, px);
}

/* ======================================= writer ============================================ */

typedef struct ot_chunk {
  int64_t off;
  size_t len;
  int32_t t, z, y, x, sz, sy, sx;
  int16_t c;
} ot_chunk;

typedef struct ot_image {
  pb_image_meta meta;
  int64_t off;         /* planes: where the raw image starts in the spool */
  size_t first, n;     /* chunk layouts: its chunks */
  int64_t cshape[3];   /* chunk layouts: chunk z, y, x */
} ot_image;

typedef struct ot_writer {
  int layout;
  char path[4096], tmp[4200];
  char codec[8];
  int level;
  char pq_codec[24];
  int64_t chunk[PB_NDIM];
  int64_t rg_rows;
  pb_dtype dtype;
  pb__ome_arrow_spool spool;
  ot_image *images;
  size_t n_images, cap_images;
  ot_chunk *chunks;
  size_t n_chunks, cap_chunks;
  /* state of the table function that feeds DuckDB at finish */
  size_t next;
  idx_t per_chunk;
  void *scratch;
  size_t scratch_n;
  int finished;
} ot_writer;

static int scratch_need(ot_writer *w, size_t n) {
  if (n <= w->scratch_n) return PB_OK;
  void *p = realloc(w->scratch, n);
  if (p == NULL) return PB_ENOMEM;
  w->scratch = p;
  w->scratch_n = n;
  return PB_OK;
}

int pb__ome_table_writer_open(const char *path, const pb_write_params *params, void **wstate,
                              struct pb_error *err) {
  ot_writer *w = calloc(1, sizeof *w);
  if (w == NULL) return pb_error_set(err, PB_ENOMEM, "out of memory");
  w->spool.fd = -1;
  snprintf(w->path, sizeof w->path, "%s", path);
  snprintf(w->codec, sizeof w->codec, "%s", params->compression ? params->compression : "none");
  w->level = params->level;
  for (int k = 0; k < PB_NDIM; k++) w->chunk[k] = params->chunk[k];
  char v[64];
  int rc = PB_OK;
  if (pb__ome_arrow_codec_check(w->codec, err) != PB_OK) {
    rc = PB_EINVAL;
    goto fail;
  }
  /* The current ome-arrow writer's default is numeric chunks; leaf compression needs bytes. */
  w->layout = strcmp(w->codec, "none") == 0 ? OT_CHUNKS : OT_BYTES;
  if (pb__opt_get(params->options, "variant", v, sizeof v)) { /* the older name */
    if (strcmp(v, "numeric") == 0) w->layout = OT_PLANES;
    else if (strcmp(v, "bytes") == 0) w->layout = OT_BYTES;
    else {
      rc = pb_error_set(err, PB_EINVAL, "option variant=%s: use numeric or bytes (or layout=)", v);
      goto fail;
    }
  }
  if (pb__opt_get(params->options, "layout", v, sizeof v)) {
    int found = -1;
    for (int k = 0; k < 3; k++)
      if (strcmp(v, ot_layout_names[k]) == 0) found = k;
    if (found < 0) {
      rc = pb_error_set(err, PB_EINVAL, "option layout=%s: use planes, chunks or chunk-bytes", v);
      goto fail;
    }
    w->layout = found;
  }
  if (w->layout != OT_BYTES && strcmp(w->codec, "none") != 0) {
    rc = pb_error_set(err, PB_EINVAL,
                      "leaf compression '%s' needs layout=chunk-bytes (the %s layout stores "
                      "plain lists; use parquet_codec= for Parquet's own compression)",
                      w->codec, ot_layout_names[w->layout]);
    goto fail;
  }
  if (pb__opt_get(params->options, "chunk_shape", v, sizeof v)) {
    long long d[3];
    char tail;
    int got = sscanf(v, "%lldx%lldx%lld%c", &d[0], &d[1], &d[2], &tail);
    if (got == 2 && sscanf(v, "%lldx%lld%c", &d[1], &d[2], &tail) == 2) {
      d[0] = 1;
      got = 3;
    }
    if (got != 3 || d[0] < 1 || d[1] < 1 || d[2] < 1 || d[0] > INT32_MAX || d[1] > INT32_MAX ||
        d[2] > INT32_MAX) {
      rc = pb_error_set(err, PB_EINVAL, "option chunk_shape=%s: use ZxYxX or YxX (positive)", v);
      goto fail;
    }
    for (int k = 0; k < 3; k++) w->chunk[PB_Z + k] = d[k];
  }
  /* Parquet's codec: zstd, unless the leaves are compressed already: compressing them again
   * saves next to nothing and makes every read decompress twice, the whole page first. */
  snprintf(w->pq_codec, sizeof w->pq_codec, "%s",
           strcmp(w->codec, "none") != 0 ? "uncompressed" : "zstd");
  if (pb__opt_get(params->options, "parquet_codec", v, sizeof v)) {
    /* The names oa-dataset's --compression takes mean the same here. */
    if (strcmp(v, "none") == 0) snprintf(v, sizeof v, "uncompressed");
    if (strcmp(v, "lz4") == 0) snprintf(v, sizeof v, "lz4_raw");
    if (strcmp(v, "zstd") != 0 && strcmp(v, "snappy") != 0 && strcmp(v, "uncompressed") != 0 &&
        strcmp(v, "lz4_raw") != 0 && strcmp(v, "gzip") != 0) {
      rc = pb_error_set(err, PB_EINVAL,
                        "option parquet_codec=%s: use zstd, snappy, lz4_raw (lz4), gzip or "
                        "uncompressed (none)",
                        v);
      goto fail;
    }
    snprintf(w->pq_codec, sizeof w->pq_codec, "%.23s", v);
  }
  if (pb__opt_get(params->options, "row_group_rows", v, sizeof v)) {
    char *end;
    long long n = strtoll(v, &end, 10);
    if (*end != '\0' || n < 1 || n > 2048) {
      rc = pb_error_set(err, PB_EINVAL, "option row_group_rows=%s: use 1..2048", v);
      goto fail;
    }
    w->rg_rows = n;
  }
  pb__temp_sibling(path, w->tmp, sizeof w->tmp);
  rc = pb__ome_arrow_spool_open(&w->spool, path, err);
  if (rc != PB_OK) goto fail;
  *wstate = w;
  return PB_OK;
fail:
  free(w);
  return rc;
}

int pb__ome_table_writer_add(void *ws, const pb_image_meta *meta, const void *pixels,
                             struct pb_error *err) {
  ot_writer *w = ws;
  if (meta->shape[PB_C] > 32767 || meta->shape[PB_T] > INT32_MAX || meta->shape[PB_Z] > INT32_MAX ||
      meta->shape[PB_Y] > INT32_MAX || meta->shape[PB_X] > INT32_MAX)
    return pb_error_set(err, PB_EINVAL, "%s: image '%s' is too large for OME-Arrow's int fields",
                        w->path, meta->name);
  if (w->layout != OT_BYTES) {
    if (w->n_images == 0) w->dtype = meta->dtype;
    else if (meta->dtype != w->dtype)
      return pb_error_set(err, PB_EINVAL,
                          "%s: image %zu ('%s') is %s but the %s layout's pixel lists are %s "
                          "(one type per column); use layout=chunk-bytes for mixed types",
                          w->path, w->n_images, meta->name, pb_dtype_name(meta->dtype),
                          ot_layout_names[w->layout], pb_dtype_name(w->dtype));
  }
  if (pb__vec_reserve((void **)&w->images, &w->cap_images,
                      w->n_images + 1, sizeof *w->images) != PB_OK)
    return pb_error_set(err, PB_ENOMEM, "out of memory");
  ot_image *im = &w->images[w->n_images];
  memset(im, 0, sizeof *im);
  im->meta = *meta;
  size_t es = pb_dtype_size(meta->dtype);
  if (w->layout == OT_PLANES) {
    PB_RETURN_NOT_OK(pb__ome_arrow_spool_write(&w->spool, pixels, pb_image_bytes(meta), &im->off, err));
    w->n_images++;
    return PB_OK;
  }
  /* Chunk layouts: one chunk per (t, c) and box of (z, y, x), default (1, 512, 512); numeric
   * chunks are spooled raw (codec none). */
  static const int64_t defaults[3] = {1, 512, 512};
  for (int k = 0; k < 3; k++) {
    int64_t v = w->chunk[PB_Z + k] > 0 ? w->chunk[PB_Z + k] : defaults[k];
    im->cshape[k] = v < meta->shape[PB_Z + k] ? v : meta->shape[PB_Z + k];
  }
  im->first = w->n_chunks;
  size_t max_chunk = (size_t)(im->cshape[0] * im->cshape[1] * im->cshape[2]) * es;
  if (scratch_need(w, max_chunk) != PB_OK) return pb_error_set(err, PB_ENOMEM, "out of memory");
  for (int64_t t = 0; t < meta->shape[PB_T]; t++)
    for (int64_t c = 0; c < meta->shape[PB_C]; c++)
      for (int64_t z = 0; z < meta->shape[PB_Z]; z += im->cshape[0])
        for (int64_t y = 0; y < meta->shape[PB_Y]; y += im->cshape[1])
          for (int64_t x = 0; x < meta->shape[PB_X]; x += im->cshape[2]) {
            int64_t org[PB_NDIM] = {t, c, z, y, x}, shp[PB_NDIM] = {1, 1, 0, 0, 0};
            for (int k = 0; k < 3; k++) {
              int64_t rest = meta->shape[PB_Z + k] - org[PB_Z + k];
              shp[PB_Z + k] = rest < im->cshape[k] ? rest : im->cshape[k];
            }
            int64_t zero[PB_NDIM] = {0, 0, 0, 0, 0};
            pb__copy_box(w->scratch, org, shp, pixels, zero, meta->shape, es);
            size_t raw = (size_t)(shp[2] * shp[3] * shp[4]) * es;
            void *enc;
            size_t enc_n;
            int rc = pb__ome_arrow_encode(w->layout == OT_BYTES ? w->codec : "none", w->level,
                                   w->scratch, raw, &enc, &enc_n, err);
            if (rc != PB_OK) return rc;
            if (pb__vec_reserve((void **)&w->chunks, &w->cap_chunks,
                                w->n_chunks + 1, sizeof *w->chunks)) {
              free(enc);
              return pb_error_set(err, PB_ENOMEM, "out of memory");
            }
            ot_chunk *ch = &w->chunks[w->n_chunks];
            rc = pb__ome_arrow_spool_write(&w->spool, enc, enc_n, &ch->off, err);
            free(enc);
            if (rc != PB_OK) return rc;
            ch->len = enc_n;
            ch->t = (int32_t)t;
            ch->c = (int16_t)c;
            ch->z = (int32_t)z;
            ch->y = (int32_t)y;
            ch->x = (int32_t)x;
            ch->sz = (int32_t)shp[2];
            ch->sy = (int32_t)shp[3];
            ch->sx = (int32_t)shp[4];
            w->n_chunks++;
          }
  im->n = w->n_chunks - im->first;
  w->n_images++;
  return PB_OK;
}

static void fill_meta(duckdb_vector pm, idx_t row, const pb_image_meta *m) {
  pb__ome_arrow_set_str(duckdb_struct_vector_get_child(pm, PM_DIM_ORDER), row,
                 m->shape[PB_Z] == 1 ? "XYCT" : "XYZCT");
  pb__ome_arrow_set_str(duckdb_struct_vector_get_child(pm, PM_TYPE), row, pb__ome_arrow_ome_type(m->dtype));
  pb__ome_arrow_set_i32(duckdb_struct_vector_get_child(pm, PM_SX), row, (int32_t)m->shape[PB_X]);
  pb__ome_arrow_set_i32(duckdb_struct_vector_get_child(pm, PM_SY), row, (int32_t)m->shape[PB_Y]);
  pb__ome_arrow_set_i32(duckdb_struct_vector_get_child(pm, PM_SZ), row, (int32_t)m->shape[PB_Z]);
  pb__ome_arrow_set_i16(duckdb_struct_vector_get_child(pm, PM_SC), row, (int16_t)m->shape[PB_C]);
  pb__ome_arrow_set_i32(duckdb_struct_vector_get_child(pm, PM_ST), row, (int32_t)m->shape[PB_T]);
  for (int k = 0; k < 3; k++) {
    duckdb_vector ps = duckdb_struct_vector_get_child(pm, (idx_t)(PM_PHX + k));
    duckdb_vector pu = duckdb_struct_vector_get_child(pm, (idx_t)(PM_UX + k));
    if (m->physical_size[k] > 0) pb__ome_arrow_set_f32(ps, row, (float)m->physical_size[k]);
    else pb__ome_arrow_set_null(ps, row);
    if (m->physical_unit[k][0] != '\0') pb__ome_arrow_set_str(pu, row, m->physical_unit[k]);
    else pb__ome_arrow_set_null(pu, row);
  }
  duckdb_vector chl = duckdb_struct_vector_get_child(pm, PM_CHANNELS);
  int nch = m->n_channels < 0 ? 0 : (m->n_channels > PB_MAX_CHANNELS ? PB_MAX_CHANNELS : m->n_channels);
  idx_t at = pb__ome_arrow_list_append(chl, row, (idx_t)nch);
  duckdb_vector cs = duckdb_list_vector_get_child(chl);
  for (int i = 0; i < nch; i++) {
    const pb_channel *c = &m->channels[i];
    idx_t r = at + (idx_t)i;
    pb__ome_arrow_set_str(duckdb_struct_vector_get_child(cs, 0), r, c->id);
    pb__ome_arrow_set_str(duckdb_struct_vector_get_child(cs, 1), r, c->name);
    pb__ome_arrow_set_f32(duckdb_struct_vector_get_child(cs, 2), r, c->emission_um);
    pb__ome_arrow_set_f32(duckdb_struct_vector_get_child(cs, 3), r, c->excitation_um);
    pb__ome_arrow_set_str(duckdb_struct_vector_get_child(cs, 4), r, c->illumination);
    pb__ome_arrow_set_u32(duckdb_struct_vector_get_child(cs, 5), r, c->color_rgba);
  }
}

/* Fills row `row` of the ome_arrow vector with image im. Returns 0 or an errno-style code. */
static int fill_row(ot_writer *w, duckdb_vector top, idx_t row, const ot_image *im) {
  const pb_image_meta *m = &im->meta;
  pb__ome_arrow_set_str(duckdb_struct_vector_get_child(top, F_TYPE), row, "ome.arrow");
  pb__ome_arrow_set_str(duckdb_struct_vector_get_child(top, F_VERSION), row, OT_VERSION);
  char id[80];
  if (m->id[0] != '\0') snprintf(id, sizeof id, "%s", m->id);
  else snprintf(id, sizeof id, "img_%05zu", (size_t)(im - w->images));
  pb__ome_arrow_set_str(duckdb_struct_vector_get_child(top, F_ID), row, id);
  pb__ome_arrow_set_str(duckdb_struct_vector_get_child(top, F_NAME), row, m->name);
  pb__ome_arrow_set_str(duckdb_struct_vector_get_child(top, F_IMAGE_TYPE), row, "image");
  pb__ome_arrow_set_null(duckdb_struct_vector_get_child(top, F_ACQ), row);
  fill_meta(duckdb_struct_vector_get_child(top, F_PIXELS_META), row, m);
  pb__ome_arrow_set_null(duckdb_struct_vector_get_child(top, F_MASKS), row);
  duckdb_vector grid = duckdb_struct_vector_get_child(top, F_CHUNK_GRID);
  duckdb_vector chunks = duckdb_struct_vector_get_child(top, F_CHUNKS);
  duckdb_vector planes = duckdb_struct_vector_get_child(top, F_PLANES);
  size_t es = pb_dtype_size(m->dtype);
  if (w->layout == OT_PLANES) {
    pb__ome_arrow_set_null(grid, row);
    pb__ome_arrow_list_append(chunks, row, 0);
    int64_t Y = m->shape[PB_Y], X = m->shape[PB_X];
    idx_t np = (idx_t)(m->shape[PB_T] * m->shape[PB_C] * m->shape[PB_Z]);
    idx_t at = pb__ome_arrow_list_append(planes, row, np);
    duckdb_vector ps = duckdb_list_vector_get_child(planes);
    duckdb_vector pix = duckdb_struct_vector_get_child(ps, 3);
    idx_t pat = duckdb_list_vector_get_size(pix);
    idx_t total = np * (idx_t)(Y * X);
    duckdb_list_vector_reserve(pix, pat + total);
    duckdb_list_vector_set_size(pix, pat + total);
    unsigned char *data = duckdb_vector_get_data(duckdb_list_vector_get_child(pix));
    /* The pixels land straight in DuckDB's child vector: one read, no per-value calls. */
    if (pb__ome_arrow_spool_read(&w->spool, im->off, data + pat * es, (size_t)total * es) != PB_OK)
      return EIO;
    duckdb_list_entry *pe = duckdb_vector_get_data(pix);
    idx_t k = 0;
    for (int64_t t = 0; t < m->shape[PB_T]; t++)
      for (int64_t c = 0; c < m->shape[PB_C]; c++)
        for (int64_t z = 0; z < m->shape[PB_Z]; z++, k++) {
          pb__ome_arrow_set_i32(duckdb_struct_vector_get_child(ps, 0), at + k, (int32_t)z);
          pb__ome_arrow_set_i32(duckdb_struct_vector_get_child(ps, 1), at + k, (int32_t)t);
          pb__ome_arrow_set_i16(duckdb_struct_vector_get_child(ps, 2), at + k, (int16_t)c);
          pe[at + k].offset = pat + k * (idx_t)(Y * X);
          pe[at + k].length = (idx_t)(Y * X);
        }
    return 0;
  }
  pb__ome_arrow_set_str(duckdb_struct_vector_get_child(grid, 0), row, "TCZYX");
  pb__ome_arrow_set_i32(duckdb_struct_vector_get_child(grid, 1), row, 1);
  pb__ome_arrow_set_i16(duckdb_struct_vector_get_child(grid, 2), row, 1);
  pb__ome_arrow_set_i32(duckdb_struct_vector_get_child(grid, 3), row, (int32_t)im->cshape[0]);
  pb__ome_arrow_set_i32(duckdb_struct_vector_get_child(grid, 4), row, (int32_t)im->cshape[1]);
  pb__ome_arrow_set_i32(duckdb_struct_vector_get_child(grid, 5), row, (int32_t)im->cshape[2]);
  pb__ome_arrow_set_str(duckdb_struct_vector_get_child(grid, 6), row, "ZYX");
  pb__ome_arrow_list_append(planes, row, 0);
  idx_t at = pb__ome_arrow_list_append(chunks, row, (idx_t)im->n);
  duckdb_vector cs = duckdb_list_vector_get_child(chunks);
  if (w->layout == OT_CHUNKS) { /* numeric chunks: pixels straight into the list child */
    duckdb_vector pix = duckdb_struct_vector_get_child(cs, 8);
    idx_t pat = duckdb_list_vector_get_size(pix), total = 0;
    for (size_t j = 0; j < im->n; j++) total += (idx_t)(w->chunks[im->first + j].len / es);
    duckdb_list_vector_reserve(pix, pat + total);
    duckdb_list_vector_set_size(pix, pat + total);
    unsigned char *data = duckdb_vector_get_data(duckdb_list_vector_get_child(pix));
    duckdb_list_entry *pe = duckdb_vector_get_data(pix);
    for (size_t j = 0; j < im->n; j++) {
      const ot_chunk *ch = &w->chunks[im->first + j];
      idx_t r = at + (idx_t)j;
      int32_t box[8] = {ch->t, ch->c, ch->z, ch->y, ch->x, ch->sz, ch->sy, ch->sx};
      for (int k = 0; k < 8; k++) {
        if (k == 1) pb__ome_arrow_set_i16(duckdb_struct_vector_get_child(cs, 1), r, ch->c);
        else pb__ome_arrow_set_i32(duckdb_struct_vector_get_child(cs, (idx_t)k), r, box[k]);
      }
      if (pb__ome_arrow_spool_read(&w->spool, ch->off, data + pat * es, ch->len) != PB_OK) return EIO;
      pe[r].offset = pat;
      pe[r].length = (idx_t)(ch->len / es);
      pat += pe[r].length;
    }
    return 0;
  }
  for (size_t j = 0; j < im->n; j++) {
    const ot_chunk *ch = &w->chunks[im->first + j];
    idx_t r = at + (idx_t)j;
    pb__ome_arrow_set_i32(duckdb_struct_vector_get_child(cs, 0), r, ch->t);
    pb__ome_arrow_set_i16(duckdb_struct_vector_get_child(cs, 1), r, ch->c);
    pb__ome_arrow_set_i32(duckdb_struct_vector_get_child(cs, 2), r, ch->z);
    pb__ome_arrow_set_i32(duckdb_struct_vector_get_child(cs, 3), r, ch->y);
    pb__ome_arrow_set_i32(duckdb_struct_vector_get_child(cs, 4), r, ch->x);
    pb__ome_arrow_set_i32(duckdb_struct_vector_get_child(cs, 5), r, ch->sz);
    pb__ome_arrow_set_i32(duckdb_struct_vector_get_child(cs, 6), r, ch->sy);
    pb__ome_arrow_set_i32(duckdb_struct_vector_get_child(cs, 7), r, ch->sx);
    pb__ome_arrow_set_str(duckdb_struct_vector_get_child(cs, 8), r, pb_dtype_name(m->dtype));
    pb__ome_arrow_set_str(duckdb_struct_vector_get_child(cs, 9), r, w->codec);
    if (scratch_need(w, ch->len > 0 ? ch->len : 1) != PB_OK) return ENOMEM;
    if (pb__ome_arrow_spool_read(&w->spool, ch->off, w->scratch, ch->len) != PB_OK) return EIO;
    duckdb_vector_assign_string_element_len(duckdb_struct_vector_get_child(cs, 10), r,
                                            w->scratch, ch->len);
  }
  return 0;
}

/* The table function pb_ome_rows(): streams the spooled images into DuckDB, `per_chunk` rows
 * per data chunk, so COPY's ROW_GROUP_SIZE gets row groups of exactly that many rows. */
static void ot_init(duckdb_init_info info) { duckdb_init_set_max_threads(info, 1); }

typedef struct ot_bind_ctx {
  ot_writer *w;
  duckdb_logical_type type;
} ot_bind_ctx;

static void ot_bind2(duckdb_bind_info info) {
  ot_bind_ctx *ctx = duckdb_bind_get_extra_info(info);
  duckdb_bind_add_result_column(info, "ome_arrow", ctx->type);
  duckdb_bind_set_cardinality(info, ctx->w->n_images, true);
}

static void ot_fn2(duckdb_function_info info, duckdb_data_chunk out) {
  ot_bind_ctx *ctx = duckdb_function_get_extra_info(info);
  ot_writer *w = ctx->w;
  duckdb_vector top = duckdb_data_chunk_get_vector(out, 0);
  idx_t n = 0;
  while (n < w->per_chunk && w->next < w->n_images) {
    int rc = fill_row(w, top, n, &w->images[w->next]);
    if (rc != 0) {
      char msg[4400];
      snprintf(msg, sizeof msg, "%.4200s: image %zu: cannot read back spooled pixels (%s)",
               w->spool.path, w->next, strerror(rc));
      duckdb_function_set_error(info, msg);
      return;
    }
    n++;
    w->next++;
  }
  duckdb_data_chunk_set_size(out, n);
}

static int register_rows_fn(pb__ome_arrow_db *db, ot_bind_ctx *ctx, struct pb_error *err) {
  duckdb_table_function f = duckdb_create_table_function();
  duckdb_table_function_set_name(f, "pb_ome_rows");
  duckdb_table_function_set_extra_info(f, ctx, NULL);
  duckdb_table_function_set_bind(f, ot_bind2);
  duckdb_table_function_set_init(f, ot_init);
  duckdb_table_function_set_function(f, ot_fn2);
  duckdb_state st = duckdb_register_table_function(db->con, f);
  duckdb_destroy_table_function(&f);
  if (st != DuckDBSuccess)
    return pb_error_set(err, PB_EDUCKDB, "DuckDB: cannot register the row source");
  return PB_OK;
}

/* The Parquet container: COPY of the rows into the temporary file, row groups of about 1 MiB
 * of pixels (or row_group_rows), the OME-Arrow key-value metadata in the footer. */
static int parquet_store(pb__ome_arrow_db *db, const pb__ome_table_out *out, idx_t *per_chunk,
                         struct pb_error *err) {
  int64_t rows = out->rg_rows;
  if (rows == 0) { /* about 1 MiB of pixels per row group: one row read touches little */
    rows = out->image_bytes > 0 ? (int64_t)((1u << 20) / out->image_bytes) : 1;
    if (rows < 1) rows = 1;
    if (rows > 2048) rows = 2048;
  }
  *per_chunk = (idx_t)rows;
  char sql[8600 + 1024], qpath[8600];
  if (pb__sql_quote(qpath, sizeof qpath, out->tmp) != PB_OK)
    return pb_error_set(err, PB_EINVAL, "%s: path too long", out->path);
  char level[48] = "";
  if (out->level != 0 && strcmp(out->pq_codec, "zstd") == 0)
    snprintf(level, sizeof level, ", COMPRESSION_LEVEL %d", out->level);
  snprintf(sql, sizeof sql,
           "COPY (SELECT ome_arrow FROM pb_ome_rows()) TO %s (FORMAT parquet, "
           "COMPRESSION %s%s, ROW_GROUP_SIZE %lld, KV_METADATA {'ome.arrow.type': "
           "'ome.arrow', 'ome.arrow.version': '%s', 'ome.arrow.layout': '%s', "
           "'ome.arrow.column': 'ome_arrow'})",
           qpath, out->pq_codec, level, (long long)rows, OT_VERSION, out->layout);
  return pb__ome_arrow_exec(db, sql, out->path, err);
}

int pb__ome_table_writer_finish(void *ws, const pb__ome_table_sink *sink, struct pb_error *err) {
  ot_writer *w = ws;
  if (w->n_images == 0)
    return pb_error_set(err, PB_EINVAL, "%s: no images were added", w->path);
  char type_sql[3072];
  ome_type_sql(type_sql, sizeof type_sql, w->layout, w->dtype);
  pb__ome_arrow_db db;
  int rc = pb__ome_arrow_db_open(&db, sink->db_is_output ? w->tmp : NULL, 0, err);
  if (rc != PB_OK) return rc;
  ot_bind_ctx ctx = {w, NULL};
  rc = pb__ome_arrow_type(&db, type_sql, &ctx.type, err);
  if (rc != PB_OK) goto done;
  rc = register_rows_fn(&db, &ctx, err);
  if (rc != PB_OK) goto done;
  w->next = 0;
  const pb__ome_table_out out = {w->path,  w->tmp,      w->pq_codec,
                                 w->level, w->rg_rows,  pb_image_bytes(&w->images[0].meta),
                                 ot_layout_names[w->layout]};
  rc = sink->store(&db, &out, &w->per_chunk, err);
done:
  if (ctx.type != NULL) duckdb_destroy_logical_type(&ctx.type);
  pb__ome_arrow_db_close(&db);
  if (rc != PB_OK) return rc;
  if (rename(w->tmp, w->path) != 0)
    return pb_error_set(err, -errno, "%s: cannot move %s into place: %s", w->path, w->tmp,
                        strerror(errno));
  w->finished = 1;
  pb__ome_arrow_spool_close(&w->spool);
  return PB_OK;
}

static int ot_writer_finish_parquet(void *ws, struct pb_error *err) {
  static const pb__ome_table_sink sink = {0, parquet_store};
  return pb__ome_table_writer_finish(ws, &sink, err);
}

void pb__ome_table_writer_free(void *ws) {
  ot_writer *w = ws;
  if (w == NULL) return;
  pb__ome_arrow_spool_close(&w->spool);
  if (!w->finished) {
    unlink(w->tmp);
    char wal[4300];
    snprintf(wal, sizeof wal, "%s.wal", w->tmp);
    unlink(wal);
  }
  free(w->images);
  free(w->chunks);
  free(w->scratch);
  free(w);
}

/* ======================================= reader ============================================ */

/* INT32 Parquet values of 8- or 16-bit pixels to es-byte pixels (the low bytes; the writer
 * stored them zero- or sign-extended). 16-bit: SSE2 does eight at a time. */
static void narrow_int32(const unsigned char *src, size_t n, size_t es, void *out) {
  size_t k = 0;
  if (es == 2) {
    uint16_t *o = out;
#ifdef __SSE2__
    for (; k + 8 <= n; k += 8) {
      __m128i a = _mm_loadu_si128((const __m128i *)(const void *)(src + 4 * k));
      __m128i b = _mm_loadu_si128((const __m128i *)(const void *)(src + 4 * k + 16));
      /* sign-extend the low 16 bits: the signed pack then keeps exactly those bits */
      a = _mm_srai_epi32(_mm_slli_epi32(a, 16), 16);
      b = _mm_srai_epi32(_mm_slli_epi32(b, 16), 16);
      _mm_storeu_si128((__m128i *)(void *)(o + k), _mm_packs_epi32(a, b));
    }
#endif
    for (; k < n; k++) {
      int32_t v;
      memcpy(&v, src + 4 * k, 4);
      o[k] = (uint16_t)v;
    }
  } else {
    uint8_t *o = out;
    for (; k < n; k++) {
      int32_t v;
      memcpy(&v, src + 4 * k, 4);
      o[k] = (uint8_t)v;
    }
  }
}

typedef struct ot_img {
  char *name, *id;
  pb_dtype dtype;
  int64_t shape[PB_NDIM];
  int64_t key;   /* file_row_number (Parquet) or rowid (DuckDB table) */
  size_t extra;  /* physical sizes and channels, shared by runs of equal images */
} ot_img;

enum { OT_MAX_BLOCKS = 256 };
#define OT_CACHE_DEFAULT_MB 64

typedef struct pb__ome_table_reader {
  int table_blocks; /* 1: a DuckDB table, read in blocks of table_block rowids; 0: Parquet */
  pb_read_options ro; /* page reader, mapping, cache size (its cache string is not kept) */
  char path[4096];
  pb__codec_ctx codec_ctx; /* leaf zstd of the byte variant, its context kept between reads */
  pb__ome_arrow_db db;
  duckdb_prepared_statement st;
  char *pixel_sql; /* the pixel query, prepared at its first use (direct reads need none) */
  ot_img *imgs;
  int64_t n;
  size_t cap;
  pb_image_meta *extras;
  size_t n_extras, cap_extras;
  /* Parquet row groups: first file_row_number of each (sorted), with a sentinel at the end. */
  int64_t *rg_first;
  size_t n_rg;
  /* Blocks of consecutive keys fetched by one query and kept decoded: for Parquet one row
   * group (DuckDB decodes the whole group even for one row), for a DuckDB table table_block
   * rows. */
  pb__pq_cache cache;
  int64_t table_block; /* DuckDB table: rows per block (a query costs about the same for any) */
  /* Direct page reads (Parquet only; see oa_pq.h): the pixel columns, and per file row where
   * its planes (t, c, z) or byte chunks (box, codec, dtype) are; a count of -1 sends the row
   * to DuckDB. */
  int direct;
  int64_t n_file;
  pb__pq_col *px_planes, *px_chunks;
  int32_t *pl_first, *pl_n, *pl_tcz;
  int32_t *ck_first, *ck_n;
  struct ot_piece *ck;
  int ck_numeric; /* chunks hold pixels lists (numeric), not pixel_bytes */
  int has_channels; /* pixels_meta has a channels field (find_column) */
  pb__pq_rows rows;
  void *conv;
  size_t conv_n;
  /* per read: the row's pieces and the grid cells they take (check_pieces) */
  struct ot_piece *pcs;
  size_t cap_pcs;
  int32_t *cells;
  size_t cap_cells;
} pb__ome_table_reader;
typedef pb__ome_table_reader ot_reader;

/* One byte chunk of a row, as the direct path places it. */
typedef struct ot_piece {
  int32_t box[8]; /* t c z y x shape_z shape_y shape_x */
  char codec[16], dtype[16];
} ot_piece;

static void direct_free(ot_reader *r) {
  pb__pq_free(r->px_planes);
  pb__pq_free(r->px_chunks);
  free(r->pl_first);
  free(r->pl_n);
  free(r->pl_tcz);
  free(r->ck_first);
  free(r->ck_n);
  free(r->ck);
  r->ck_numeric = 0;
  pb__pq_rows_destroy(&r->rows);
  free(r->conv);
  r->px_planes = r->px_chunks = NULL;
  r->pl_first = r->pl_n = r->pl_tcz = r->ck_first = r->ck_n = NULL;
  r->ck = NULL;
  r->conv = NULL;
  r->conv_n = 0;
  r->direct = 0;
}

void pb__ome_table_reader_close(void *state) {
  ot_reader *r = state;
  if (r == NULL) return;
  direct_free(r);
  pb__codec_ctx_destroy(&r->codec_ctx);
  pb__pq_cache_destroy(&r->cache);
  free(r->rg_first);
  free(r->pcs);
  free(r->cells);
  if (r->st != NULL) duckdb_destroy_prepare(&r->st);
  free(r->pixel_sql);
  pb__ome_arrow_db_close(&r->db);
  for (int64_t i = 0; i < r->n; i++) {
    free(r->imgs[i].name);
    free(r->imgs[i].id);
  }
  free(r->imgs);
  free(r->extras);
  free(r);
}

static int query_err(duckdb_result *res, int code, struct pb_error *err, const char *path,
                     const char *what) {
  const char *m = duckdb_result_error(res);
  int rc = pb_error_set(err, code, "%s: %s: %.*s", path, what, PB__DUCK_MSG(m));
  duckdb_destroy_result(res);
  return rc;
}

int pb__ome_table_find_column(pb__ome_table_reader *r, const char *sql, char *table,
                              size_t tsize, char *col, size_t csize, int *has_chunks,
                              int *has_planes, struct pb_error *err) {
  duckdb_result res;
  if (duckdb_query(r->db.con, sql, &res) != DuckDBSuccess)
    return query_err(&res, PB_EFORMAT, err, r->path, "cannot read it as OME-Arrow");
  int found = 0;
  idx_t rows = duckdb_row_count(&res);
  for (int pass = 0; pass < 2 && !found; pass++) {
    for (idx_t i = 0; i < rows && !found; i++) {
      char *t = duckdb_value_varchar(&res, 0, i), *c = duckdb_value_varchar(&res, 1, i),
           *ty = duckdb_value_varchar(&res, 2, i);
      int ok = c != NULL && ty != NULL && strncmp(ty, "STRUCT(", 7) == 0 &&
               strstr(ty, "pixels_meta STRUCT(") != NULL &&
               (pass == 1 || strcmp(c, "ome_arrow") == 0);
      if (ok) {
        snprintf(table, tsize, "%s", t ? t : "");
        snprintf(col, csize, "%s", c);
        *has_chunks = strstr(ty, " chunks STRUCT(") != NULL;
        *has_planes = strstr(ty, " planes STRUCT(") != NULL;
        /* any field so named (a list of something else too: DuckDB's path counts its items) */
        r->has_channels = strstr(ty, " channels ") != NULL || strstr(ty, "(channels ") != NULL;
        found = 1;
      }
      duckdb_free(t);
      duckdb_free(c);
      duckdb_free(ty);
    }
  }
  duckdb_destroy_result(&res);
  if (!found)
    return pb_error_set(err, PB_EFORMAT,
                        "%s: no OME-Arrow column (a STRUCT column with pixels_meta, normally "
                        "named ome_arrow)",
                        r->path);
  if (!*has_chunks && !*has_planes)
    return pb_error_set(err, PB_EFORMAT, "%s: column %s has neither planes nor chunks", r->path,
                        col);
  return PB_OK;
}

/* ---- the column from the footer (Parquet) ---------------------------------------------- */

static int is_list(const pb__pq_node *e) { return e->converted_type == 3 || e->logical == 3; }
static int is_map(const pb__pq_node *e) {
  return e->converted_type == 1 || e->converted_type == 2 || e->logical == 2;
}

/* The element of a LIST-annotated group as DuckDB reads it: the repeated child's only child,
 * or the repeated child itself when it holds several fields or carries a legacy name. */
static size_t list_element(const pb__pq_meta *m, size_t i) {
  size_t c = i + 1;
  const pb__pq_node *rep = &m->nodes[c];
  char tuple[300];
  snprintf(tuple, sizeof tuple, "%s_tuple", m->nodes[i].name);
  if (rep->num_children == 1 && strcmp(rep->name, "array") != 0 && strcmp(rep->name, tuple) != 0)
    return c + 1;
  return c;
}

/* Whether DuckDB's type of node i starts with STRUCT( (a struct, or a list of structs). */
static int struct_like(const pb__pq_meta *m, size_t i, int depth) {
  const pb__pq_node *e = &m->nodes[i];
  if (e->num_children <= 0 || is_map(e) || depth > 64) return 0;
  if (is_list(e) && e->num_children == 1) {
    size_t el = list_element(m, i);
    return el == i + 1 ? 1 : struct_like(m, el, depth + 1);
  }
  return 1;
}

/* The node after node i and all its descendants. */
static size_t node_end(const pb__pq_meta *m, size_t i) {
  size_t left = 1;
  while (left > 0 && i < m->n_nodes) {
    left--;
    if (m->nodes[i].num_children > 0) left += (size_t)m->nodes[i].num_children;
    i++;
  }
  return i;
}

typedef struct col_find {
  int pixels_meta, chunks, planes, channels;
} col_find;

static void scan_type(const pb__pq_meta *m, size_t i, col_find *f, int depth);

/* The fields of the struct at group node g, as DuckDB's type string names them. */
static void scan_fields(const pb__pq_meta *m, size_t g, col_find *f, int depth) {
  size_t c = g + 1;
  for (int32_t k = 0; k < m->nodes[g].num_children && c < m->n_nodes; k++) {
    const pb__pq_node *e = &m->nodes[c];
    int st = struct_like(m, c, 0);
    /* the checks of the DuckDB path: "pixels_meta STRUCT(", " chunks STRUCT(" (not a first
     * field), " channels " or "(channels " */
    if (strcmp(e->name, "pixels_meta") == 0 && st) f->pixels_meta = 1;
    if (strcmp(e->name, "chunks") == 0 && st && k > 0) f->chunks = 1;
    if (strcmp(e->name, "planes") == 0 && st && k > 0) f->planes = 1;
    if (strcmp(e->name, "channels") == 0) f->channels = 1;
    scan_type(m, c, f, depth + 1);
    c = node_end(m, c);
  }
}

static void scan_type(const pb__pq_meta *m, size_t i, col_find *f, int depth) {
  const pb__pq_node *e = &m->nodes[i];
  if (e->num_children <= 0 || is_map(e) || depth > 64) return;
  if (is_list(e) && e->num_children == 1) {
    size_t el = list_element(m, i);
    if (el == i + 1) scan_fields(m, el, f, depth + 1);
    else scan_type(m, el, f, depth + 1);
    return;
  }
  scan_fields(m, i, f, depth);
}

/* find_column for a Parquet file, from its footer instead of DuckDB's DESCRIBE (which parses
 * the footer into far more than this needs). */
static int find_column_meta(ot_reader *r, const pb__pq_meta *m, char *col, size_t csize,
                            int *has_chunks, int *has_planes, struct pb_error *err) {
  int found = 0;
  for (int pass = 0; pass < 2 && !found; pass++) {
    size_t c = 1;
    for (int32_t k = 0; k < m->nodes[0].num_children && c < m->n_nodes && !found; k++) {
      const pb__pq_node *e = &m->nodes[c];
      col_find f = {0, 0, 0, 0};
      if (struct_like(m, c, 0) && (pass == 1 || strcmp(e->name, "ome_arrow") == 0)) {
        scan_type(m, c, &f, 0);
        if (f.pixels_meta) {
          snprintf(col, csize, "%s", e->name);
          *has_chunks = f.chunks;
          *has_planes = f.planes;
          r->has_channels = f.channels;
          found = 1;
        }
      }
      c = node_end(m, c);
    }
  }
  if (!found)
    return pb_error_set(err, PB_EFORMAT,
                        "%s: no OME-Arrow column (a STRUCT column with pixels_meta, normally "
                        "named ome_arrow)",
                        r->path);
  if (!*has_chunks && !*has_planes)
    return pb_error_set(err, PB_EFORMAT, "%s: column %s has neither planes nor chunks", r->path,
                        col);
  return PB_OK;
}

/* The first file row of every row group, from the footer. */
static int meta_row_groups(ot_reader *r, const pb__pq_meta *m, struct pb_error *err) {
  r->rg_first = malloc((m->n_rgs + 1) * sizeof *r->rg_first);
  if (r->rg_first == NULL) return pb_error_set(err, PB_ENOMEM, "out of memory");
  for (size_t g = 0; g < m->n_rgs; g++) r->rg_first[g] = m->rgs[g].first_row;
  r->rg_first[m->n_rgs] = m->n_rgs > 0 ? m->rgs[m->n_rgs - 1].first_row +
                                             m->rgs[m->n_rgs - 1].num_rows
                                       : 0;
  r->n_rg = m->n_rgs;
  return PB_OK;
}

static void read_meta_row(duckdb_vector pm, idx_t row, pb_image_meta *m, char *dtype_name,
                          size_t dn) {
  int f;
#define PM_INT(name, dst) \
  if ((f = pb__ome_arrow_field(pm, name)) >= 0) dst = pb__ome_arrow_get_int(duckdb_struct_vector_get_child(pm, (idx_t)f), row, 0)
  PM_INT("size_t", m->shape[PB_T]);
  PM_INT("size_c", m->shape[PB_C]);
  PM_INT("size_z", m->shape[PB_Z]);
  PM_INT("size_y", m->shape[PB_Y]);
  PM_INT("size_x", m->shape[PB_X]);
#undef PM_INT
  dtype_name[0] = '\0';
  if ((f = pb__ome_arrow_field(pm, "type")) >= 0)
    pb__ome_arrow_get_str(duckdb_struct_vector_get_child(pm, (idx_t)f), row, dtype_name, dn);
  static const char *const ps[3] = {"physical_size_x", "physical_size_y", "physical_size_z"};
  static const char *const pu[3] = {"physical_size_x_unit", "physical_size_y_unit",
                                    "physical_size_z_unit"};
  for (int k = 0; k < 3; k++) {
    if ((f = pb__ome_arrow_field(pm, ps[k])) >= 0)
      m->physical_size[k] = pb__ome_arrow_get_real(duckdb_struct_vector_get_child(pm, (idx_t)f), row, 0);
    if ((f = pb__ome_arrow_field(pm, pu[k])) >= 0)
      pb__ome_arrow_get_str(duckdb_struct_vector_get_child(pm, (idx_t)f), row, m->physical_unit[k],
                     sizeof m->physical_unit[k]);
  }
  if ((f = pb__ome_arrow_field(pm, "channels")) < 0) return;
  duckdb_vector cl = duckdb_struct_vector_get_child(pm, (idx_t)f);
  if (!pb__ome_arrow_valid(cl, row)) return;
  duckdb_list_entry e = ((duckdb_list_entry *)duckdb_vector_get_data(cl))[row];
  duckdb_vector cs = duckdb_list_vector_get_child(cl);
  int fid = pb__ome_arrow_field(cs, "id"), fname = pb__ome_arrow_field(cs, "name"),
      fem = pb__ome_arrow_field(cs, "emission_um"), fex = pb__ome_arrow_field(cs, "excitation_um"),
      fil = pb__ome_arrow_field(cs, "illumination"), fco = pb__ome_arrow_field(cs, "color_rgba");
  for (idx_t j = 0; j < e.length && m->n_channels < PB_MAX_CHANNELS; j++) {
    idx_t k = e.offset + j;
    pb_channel *c = &m->channels[m->n_channels++];
    if (fid >= 0) pb__ome_arrow_get_str(duckdb_struct_vector_get_child(cs, (idx_t)fid), k, c->id, sizeof c->id);
    if (fname >= 0)
      pb__ome_arrow_get_str(duckdb_struct_vector_get_child(cs, (idx_t)fname), k, c->name, sizeof c->name);
    if (fem >= 0) c->emission_um = (float)pb__ome_arrow_get_real(duckdb_struct_vector_get_child(cs, (idx_t)fem), k, 0);
    if (fex >= 0)
      c->excitation_um = (float)pb__ome_arrow_get_real(duckdb_struct_vector_get_child(cs, (idx_t)fex), k, 0);
    if (fil >= 0)
      pb__ome_arrow_get_str(duckdb_struct_vector_get_child(cs, (idx_t)fil), k, c->illumination,
                     sizeof c->illumination);
    if (fco >= 0)
      c->color_rgba = (uint32_t)pb__ome_arrow_get_int(duckdb_struct_vector_get_child(cs, (idx_t)fco), k, 0);
  }
}

static char *dup_str(duckdb_vector v, idx_t row) {
  size_t n;
  const char *p = pb__ome_arrow_get_blob(v, row, &n);
  char *s = malloc(n + 1);
  if (s == NULL) return NULL;
  if (n > 0) memcpy(s, p, n);
  s[n] = '\0';
  return s;
}

/* Appends an image: its key, id and name (taken over, freed with the reader), and what
 * pixels_meta holds (m, the pixel type's name dname). Both metadata paths end here. */
static int add_image_meta(ot_reader *r, int64_t key, char *id, char *name, pb_image_meta *m,
                          const char *dname, struct pb_error *err) {
  if (pb__vec_reserve((void **)&r->imgs, &r->cap, (size_t)r->n + 1, sizeof *r->imgs) != PB_OK) {
    free(id);
    free(name);
    return pb_error_set(err, PB_ENOMEM, "out of memory");
  }
  ot_img *im = &r->imgs[r->n];
  memset(im, 0, sizeof *im);
  im->key = key;
  im->id = id;
  im->name = name;
  r->n++; /* counted now so close() frees the strings even on the errors below */
  if (im->id == NULL || im->name == NULL) return pb_error_set(err, PB_ENOMEM, "out of memory");
  if (pb_dtype_parse(dname, &im->dtype) != PB_OK)
    return pb_error_set(err, PB_EFORMAT, "%s: image %lld: unknown pixel type '%s'", r->path,
                        (long long)(r->n - 1), dname);
  for (int k = 0; k < PB_NDIM; k++) {
    if (m->shape[k] < 1 || m->shape[k] > INT32_MAX)
      return pb_error_set(err, PB_EFORMAT, "%s: image %lld: size_%c is %lld", r->path,
                          (long long)(r->n - 1), "tczyx"[k], (long long)m->shape[k]);
    im->shape[k] = m->shape[k];
  }
  /* the size pixels_meta claims, before anything is allocated for it (docs/formats.md) */
  int64_t px, claim = 0;
  if (!pb__prod_i64_ok(im->shape, PB_NDIM, &px) ||
      !pb__mul_i64_ok(px, (int64_t)pb_dtype_size(im->dtype), &claim) ||
      claim > pb__max_image_bytes())
    return pb_error_set(err, PB_EUNSUPPORTED,
                        "%s: image %lld: pixels_meta shape %lldx%lldx%lldx%lldx%lld (TCZYX) of %s "
                        "claims more than the %lld bytes pipebench believes before reading "
                        "(PIPEBENCH_MAX_IMAGE_BYTES; docs/formats.md)",
                        r->path, (long long)(r->n - 1), (long long)im->shape[0],
                        (long long)im->shape[1], (long long)im->shape[2], (long long)im->shape[3],
                        (long long)im->shape[4], pb_dtype_name(im->dtype),
                        (long long)pb__max_image_bytes());
  /* Physical sizes and channels are kept once per run of identical values. */
  if (r->n_extras == 0 || memcmp(&r->extras[r->n_extras - 1].physical_size, &m->physical_size,
                                 sizeof *m - offsetof(pb_image_meta, physical_size)) != 0) {
    if (pb__vec_reserve((void **)&r->extras, &r->cap_extras,
                        r->n_extras + 1, sizeof *r->extras) != PB_OK)
      return pb_error_set(err, PB_ENOMEM, "out of memory");
    r->extras[r->n_extras++] = *m;
  }
  im->extra = r->n_extras - 1;
  return PB_OK;
}

static int add_image(ot_reader *r, duckdb_data_chunk ch, idx_t row, struct pb_error *err) {
  pb_image_meta m;
  memset(&m, 0, sizeof m);
  char dname[32];
  int64_t key = pb__ome_arrow_get_int(duckdb_data_chunk_get_vector(ch, 0), row, -1);
  char *id = dup_str(duckdb_data_chunk_get_vector(ch, 1), row);
  char *name = dup_str(duckdb_data_chunk_get_vector(ch, 2), row);
  duckdb_vector pm = duckdb_data_chunk_get_vector(ch, 3);
  if (!pb__ome_arrow_valid(pm, row) && id != NULL && name != NULL) {
    free(id);
    free(name);
    return pb_error_set(err, PB_EFORMAT, "%s: image %lld has no pixels_meta", r->path,
                        (long long)r->n);
  }
  dname[0] = '\0';
  if (id != NULL && name != NULL) read_meta_row(pm, row, &m, dname, sizeof dname);
  return add_image_meta(r, key, id, name, &m, dname, err);
}

/* ---- direct page reads: what is loaded at open ------------------------------------------ */

/* Every row of a small leaf column (NULL: not readable directly). */
static int small_column(ot_reader *r, pb__pq_col *c, int physical, pb__pq_rows *out) {
  struct pb_error e;
  if (c == NULL || pb__pq_physical(c) != physical || pb__pq_row_count(c) != r->n_file)
    return PB_EUNSUPPORTED;
  int rc = pb__pq_read_all(c, out, &e);
  if (rc == PB_OK && out->n_rows != (size_t)r->n_file) rc = PB_EFORMAT;
  return rc;
}

/* The single value of element e, or NULL (several values, or a null). */
static const unsigned char *only_value(const pb__pq_rows *q, size_t e, size_t *len) {
  if (q->elem_val[e + 1] - q->elem_val[e] != 1 || q->elem_nulls[e] != 0) return NULL;
  size_t v = q->elem_val[e];
  if (q->width > 0) {
    *len = q->width;
    return pb__pq_rows_data(q) + v * q->width;
  }
  *len = q->val_off[v + 1] - q->val_off[v];
  return pb__pq_rows_data(q) + q->val_off[v];
}

/* Per file row: count and first index of the elements that all columns q[0..n) agree on and
 * that hold one value each; -1 where they do not. */
static int piece_rows(ot_reader *r, pb__pq_rows *q, int n, int32_t **first, int32_t **count) {
  *first = malloc((size_t)(r->n_file ? r->n_file : 1) * sizeof **first);
  *count = malloc((size_t)(r->n_file ? r->n_file : 1) * sizeof **count);
  if (*first == NULL || *count == NULL) return PB_ENOMEM;
  for (int64_t k = 0; k < r->n_file; k++) {
    size_t a = q[0].row_elem[k], b = q[0].row_elem[k + 1];
    int ok = b - a < INT32_MAX && a < INT32_MAX;
    for (int j = 1; j < n && ok; j++)
      ok = q[j].row_elem[k] == a && q[j].row_elem[k + 1] == b;
    for (int j = 0; j < n && ok; j++)
      for (size_t e = a; e < b && ok; e++) {
        size_t len;
        ok = only_value(&q[j], e, &len) != NULL;
      }
    (*first)[k] = (int32_t)a;
    (*count)[k] = ok ? (int32_t)(b - a) : -1;
  }
  return PB_OK;
}

/* Leaves the direct path reads: planes (pixels, t, c, z), then chunks (pixel_bytes, box, dtype,
 * compression). */
enum { L_PL_PIX, L_PL_T, L_PL_C, L_PL_Z, L_CK_BYTES, L_CK_T, L_CK_DTYPE = L_CK_T + 8,
       L_CK_CODEC, L_CK_PIX, L_COUNT };

static int direct_planes(ot_reader *r, pb__pq_col **cols, const int *in_file) {
  if (!in_file[L_PL_PIX]) return PB_OK; /* no planes: every row has none */
  if (cols[L_PL_PIX] == NULL) return PB_EUNSUPPORTED;
  r->px_planes = cols[L_PL_PIX];
  cols[L_PL_PIX] = NULL;
  pb__pq_rows q[3];
  memset(q, 0, sizeof q);
  int rc = PB_OK;
  for (int k = 0; k < 3 && rc == PB_OK; k++)
    rc = small_column(r, cols[L_PL_T + k], PB__PQ_INT32, &q[k]);
  if (rc == PB_OK) rc = piece_rows(r, q, 3, &r->pl_first, &r->pl_n);
  if (rc == PB_OK) {
    size_t ne = q[0].n_elems;
    r->pl_tcz = malloc((ne ? ne : 1) * 3 * sizeof *r->pl_tcz);
    if (r->pl_tcz == NULL) rc = PB_ENOMEM;
    for (size_t x = 0; x < ne && rc == PB_OK; x++)
      for (int k = 0; k < 3; k++) {
        size_t len;
        const unsigned char *v = only_value(&q[k], x, &len);
        int32_t t = -1;
        if (v != NULL) memcpy(&t, v, 4);
        r->pl_tcz[x * 3 + (size_t)k] = t;
      }
  }
  for (int k = 0; k < 3; k++) pb__pq_rows_destroy(&q[k]);
  return rc;
}

static int direct_chunks(ot_reader *r, pb__pq_col **cols, const int *in_file) {
  if (in_file[L_CK_BYTES]) { /* byte chunks */
    if (cols[L_CK_BYTES] == NULL || pb__pq_physical(cols[L_CK_BYTES]) != PB__PQ_BYTE_ARRAY)
      return PB_EUNSUPPORTED;
    r->px_chunks = cols[L_CK_BYTES];
    cols[L_CK_BYTES] = NULL;
  } else if (in_file[L_CK_PIX]) { /* numeric chunks: the pixels' type is checked per image */
    if (cols[L_CK_PIX] == NULL) return PB_EUNSUPPORTED;
    r->px_chunks = cols[L_CK_PIX];
    cols[L_CK_PIX] = NULL;
    r->ck_numeric = 1;
  } else {
    return PB_OK; /* no chunks: every row has none */
  }
  pb__pq_rows q[10];
  memset(q, 0, sizeof q);
  int at[10], nq = 0, rc = PB_OK; /* the columns present, in q[0..nq) */
  for (int k = 0; k < 10 && rc == PB_OK; k++) {
    at[k] = -1;
    if (k >= 8 && (r->ck_numeric || !in_file[L_CK_T + k]))
      continue; /* dtype, compression: optional, and not in numeric chunks */
    rc = small_column(r, cols[L_CK_T + k], k < 8 ? PB__PQ_INT32 : PB__PQ_BYTE_ARRAY, &q[nq]);
    at[k] = nq++;
  }
  if (rc == PB_OK) rc = piece_rows(r, q, nq, &r->ck_first, &r->ck_n);
  if (rc == PB_OK) {
    size_t ne = q[0].n_elems;
    r->ck = calloc(ne ? ne : 1, sizeof *r->ck);
    if (r->ck == NULL) rc = PB_ENOMEM;
    for (size_t x = 0; x < ne && rc == PB_OK; x++) {
      ot_piece *pc = &r->ck[x];
      snprintf(pc->codec, sizeof pc->codec, "%s", r->ck_numeric ? "" : "none");
      for (int k = 0; k < 10; k++) {
        if (at[k] < 0) continue;
        size_t len;
        const unsigned char *v = only_value(&q[at[k]], x, &len);
        if (v == NULL) continue; /* the row is marked -1 already */
        if (k < 8) {
          memcpy(&pc->box[k], v, 4);
        } else {
          char *d = k == 8 ? pc->dtype : pc->codec;
          size_t m = len < 15 ? len : 15;
          memcpy(d, v, m);
          d[m] = '\0';
        }
      }
    }
  }
  for (int k = 0; k < 10; k++) pb__pq_rows_destroy(&q[k]);
  return rc;
}

/* ---- direct page reads: the metadata leaves -------------------------------------------------
 * id, name and the leaves of pixels_meta, read with the page reader instead of DuckDB's scan,
 * whose cost per row group (~0.7 ms for these ~20 leaves) made files of many small row groups
 * slow to open. Values are converted as pb__ome_arrow_get_int/_real/_str convert DuckDB's, so both
 * paths give the same images (tests/formats/arrow/test_arrow_direct.c compares them); anything
 * the page reader or these conversions do not cover (another physical or converted type, a
 * missing row, a null where a value is needed) leaves the metadata to DuckDB. */
enum { M_ID, M_NAME, M_TYPE, M_ST, M_SC, M_SZ, M_SY, M_SX, M_PHX, M_PHY, M_PHZ, M_UX, M_UY,
       M_UZ, M_CH_ID, M_CH_NAME, M_CH_EM, M_CH_EX, M_CH_ILL, M_CH_RGBA, M_COUNT };
static const char *const meta_tails[M_COUNT] = {
    "id", "name", "pixels_meta, type", "pixels_meta, size_t", "pixels_meta, size_c",
    "pixels_meta, size_z", "pixels_meta, size_y", "pixels_meta, size_x",
    "pixels_meta, physical_size_x", "pixels_meta, physical_size_y",
    "pixels_meta, physical_size_z", "pixels_meta, physical_size_x_unit",
    "pixels_meta, physical_size_y_unit", "pixels_meta, physical_size_z_unit",
    "pixels_meta, channels, list, element, id", "pixels_meta, channels, list, element, name",
    "pixels_meta, channels, list, element, emission_um",
    "pixels_meta, channels, list, element, excitation_um",
    "pixels_meta, channels, list, element, illumination",
    "pixels_meta, channels, list, element, color_rgba"};
enum { MK_STR, MK_INT, MK_REAL };
static const unsigned char meta_kind[M_COUNT] = {
    MK_STR, MK_STR, MK_STR, MK_INT, MK_INT, MK_INT, MK_INT, MK_INT, MK_REAL, MK_REAL, MK_REAL,
    MK_STR, MK_STR, MK_STR, MK_STR, MK_STR, MK_REAL, MK_REAL, MK_STR, MK_INT};

/* Whether DuckDB reads the leaf as a type pb__ome_arrow_get_* reads (and how, then, is known here). */
static int meta_type_ok(const pb__pq_col *c, int kind) {
  const char *cv = pb__pq_converted(c);
  int ph = pb__pq_physical(c);
  if (kind == MK_STR) return ph == PB__PQ_BYTE_ARRAY && (cv[0] == '\0' || strcmp(cv, "UTF8") == 0);
  if (kind == MK_REAL && (ph == PB__PQ_FLOAT || ph == PB__PQ_DOUBLE)) return cv[0] == '\0';
  if (ph == PB__PQ_INT32) {
    static const char *const ok[] = {"", "INT_8", "INT_16", "INT_32", "UINT_8", "UINT_16",
                                     "UINT_32"};
    for (size_t k = 0; k < sizeof ok / sizeof ok[0]; k++)
      if (strcmp(cv, ok[k]) == 0) return 1;
    return 0;
  }
  if (ph == PB__PQ_INT64)
    return cv[0] == '\0' || strcmp(cv, "INT_64") == 0 || strcmp(cv, "UINT_64") == 0;
  return 0;
}

static int64_t meta_int(const pb__pq_col *c, const pb__pq_rows *q, size_t e, int64_t def) {
  size_t len;
  const unsigned char *v = only_value(q, e, &len);
  if (v == NULL) return def;
  if (pb__pq_physical(c) == PB__PQ_INT64) {
    int64_t x;
    memcpy(&x, v, 8);
    return x;
  }
  int32_t x;
  memcpy(&x, v, 4);
  const char *cv = pb__pq_converted(c);
  if (strcmp(cv, "INT_8") == 0) return (int8_t)x;
  if (strcmp(cv, "INT_16") == 0) return (int16_t)x;
  if (strcmp(cv, "UINT_8") == 0) return (uint8_t)x;
  if (strcmp(cv, "UINT_16") == 0) return (uint16_t)x;
  if (strcmp(cv, "UINT_32") == 0) return (uint32_t)x;
  return x;
}

static double meta_real(const pb__pq_col *c, const pb__pq_rows *q, size_t e, double def) {
  size_t len;
  const unsigned char *v = only_value(q, e, &len);
  if (v == NULL) return def;
  if (pb__pq_physical(c) == PB__PQ_FLOAT) {
    float x;
    memcpy(&x, v, 4);
    return x;
  }
  if (pb__pq_physical(c) == PB__PQ_DOUBLE) {
    double x;
    memcpy(&x, v, 8);
    return x;
  }
  return (double)meta_int(c, q, e, (int64_t)def);
}

static void meta_str(const pb__pq_rows *q, size_t e, char *buf, size_t size) {
  size_t n = 0;
  const unsigned char *v = only_value(q, e, &n);
  if (v == NULL) n = 0;
  if (n >= size) n = size - 1;
  if (n > 0) memcpy(buf, v, n);
  buf[n] = '\0';
}

static char *meta_dup(const pb__pq_rows *q, size_t e) {
  size_t n = 0;
  const unsigned char *v = only_value(q, e, &n);
  if (v == NULL) n = 0;
  char *s = malloc(n + 1);
  if (s == NULL) return NULL;
  if (n > 0) memcpy(s, v, n);
  s[n] = '\0';
  return s;
}

static void images_reset(ot_reader *r) {
  for (int64_t i = 0; i < r->n; i++) {
    free(r->imgs[i].name);
    free(r->imgs[i].id);
  }
  r->n = 0;
  r->n_extras = 0;
}

/* The images from the metadata leaves mc[0..M_COUNT) (NULL: absent or not readable, as in_file
 * tells). PB_OK with every image added, or an error and none (DuckDB then reads them). */
static int direct_meta(ot_reader *r, pb__pq_col **mc, const int *in_file) {
  pb__pq_rows q[M_COUNT];
  memset(q, 0, sizeof q);
  int64_t nf = -1;
  int rc = PB_OK, ch = -1; /* ch: a channel leaf in the file */
  for (int k = 0; k < M_COUNT && rc == PB_OK; k++) {
    if (!in_file[k]) continue;
    if (mc[k] == NULL || !meta_type_ok(mc[k], meta_kind[k])) {
      rc = PB_EUNSUPPORTED;
      break;
    }
    if (nf < 0) nf = pb__pq_row_count(mc[k]);
    struct pb_error e;
    if (pb__pq_row_count(mc[k]) != nf || pb__pq_read_all(mc[k], &q[k], &e) != PB_OK ||
        q[k].n_rows != (size_t)nf) {
      rc = PB_EFORMAT;
      break;
    }
    if (k < M_CH_ID) { /* one element a row */
      if (q[k].n_elems != q[k].n_rows) rc = PB_EUNSUPPORTED;
    } else if (ch < 0) {
      ch = k;
    } else if (memcmp(q[k].row_elem, q[ch].row_elem, (q[k].n_rows + 1) * sizeof *q[k].row_elem)) {
      rc = PB_EUNSUPPORTED;
    }
  }
  /* DuckDB's query needs id and name; a channels list whose leaves are named otherwise (not
   * "list, element") is left to DuckDB too */
  if (rc == PB_OK && (nf < 0 || !in_file[M_ID] || !in_file[M_NAME] || (r->has_channels && ch < 0)))
    rc = PB_EUNSUPPORTED;
  struct pb_error e;
  for (int64_t i = 0; i < nf && rc == PB_OK; i++) {
    size_t x = (size_t)i;
    pb_image_meta m;
    memset(&m, 0, sizeof m);
    char dname[32] = "";
    for (int k = 0; k < 5; k++)
      if (in_file[M_ST + k]) m.shape[k] = meta_int(mc[M_ST + k], &q[M_ST + k], x, 0);
    if (in_file[M_TYPE]) meta_str(&q[M_TYPE], x, dname, sizeof dname);
    for (int k = 0; k < 3; k++) {
      if (in_file[M_PHX + k]) m.physical_size[k] = meta_real(mc[M_PHX + k], &q[M_PHX + k], x, 0);
      if (in_file[M_UX + k])
        meta_str(&q[M_UX + k], x, m.physical_unit[k], sizeof m.physical_unit[k]);
    }
    if (ch >= 0)
      for (size_t j = q[ch].row_elem[x]; j < q[ch].row_elem[x + 1] &&
                                         m.n_channels < PB_MAX_CHANNELS; j++) {
        pb_channel *c = &m.channels[m.n_channels++];
        if (in_file[M_CH_ID]) meta_str(&q[M_CH_ID], j, c->id, sizeof c->id);
        if (in_file[M_CH_NAME]) meta_str(&q[M_CH_NAME], j, c->name, sizeof c->name);
        if (in_file[M_CH_EM]) c->emission_um = (float)meta_real(mc[M_CH_EM], &q[M_CH_EM], j, 0);
        if (in_file[M_CH_EX]) c->excitation_um = (float)meta_real(mc[M_CH_EX], &q[M_CH_EX], j, 0);
        if (in_file[M_CH_ILL])
          meta_str(&q[M_CH_ILL], j, c->illumination, sizeof c->illumination);
        if (in_file[M_CH_RGBA])
          c->color_rgba = (uint32_t)meta_int(mc[M_CH_RGBA], &q[M_CH_RGBA], j, 0);
      }
    char *id = in_file[M_ID] ? meta_dup(&q[M_ID], x) : calloc(1, 1);
    char *name = in_file[M_NAME] ? meta_dup(&q[M_NAME], x) : calloc(1, 1);
    rc = add_image_meta(r, i, id, name, &m, dname, &e);
  }
  for (int k = 0; k < M_COUNT; k++) pb__pq_rows_destroy(&q[k]);
  if (rc != PB_OK) images_reset(r);
  return rc;
}

/* Sets up direct page reads for a Parquet file, or leaves them off (DuckDB reads everything).
 * The metadata leaves are opened with them; *meta_done tells whether
 * the images were read from them. */
static void direct_open(ot_reader *r, pb__pq_meta *meta, const char *col, int *meta_done) {
  *meta_done = 0;
  if (r->ro.page_reader == 0) return;
  static const char *const tails[L_COUNT] = {
      "planes, list, element, pixels, list, element", "planes, list, element, t",
      "planes, list, element, c", "planes, list, element, z", "chunks, list, element, pixel_bytes",
      "chunks, list, element, t", "chunks, list, element, c", "chunks, list, element, z",
      "chunks, list, element, y", "chunks, list, element, x", "chunks, list, element, shape_z",
      "chunks, list, element, shape_y", "chunks, list, element, shape_x",
      "chunks, list, element, dtype", "chunks, list, element, compression",
      "chunks, list, element, pixels, list, element"};
  enum { N = L_COUNT + M_COUNT };
  char names[N][320];
  const char *leaves[N];
  for (int k = 0; k < N; k++) {
    snprintf(names[k], sizeof names[k], "%.256s, %s", col,
             k < L_COUNT ? tails[k] : meta_tails[k - L_COUNT]);
    leaves[k] = names[k];
  }
  pb__pq_col *cols[N];
  int in_file[N];
  struct pb_error e;
  int rc = pb__pq_open_meta(meta, r->path, leaves, N, r->ro.map == 1, cols, in_file, &e);
  /* the columns hold their layout now: the footer's chunk table goes before their pages are
   * walked (at 20,000 row groups it is ~60 MB) */
  pb__pq_meta_destroy(meta);
  if (rc != PB_OK) return;
  *meta_done = direct_meta(r, cols + L_COUNT, in_file + L_COUNT) == PB_OK;
  if (*meta_done) pb__ome_arrow_direct_meta_note();
  for (int k = L_COUNT; k < N; k++) pb__pq_free(cols[k]);
  r->n_file = r->rg_first[r->n_rg]; /* the row groups: set from the footer before */
  int ok = direct_planes(r, cols, in_file) == PB_OK && direct_chunks(r, cols, in_file) == PB_OK &&
           (r->px_planes != NULL || r->px_chunks != NULL);
  for (int k = 0; k < L_COUNT; k++) pb__pq_free(cols[k]);
  if (ok) r->direct = 1;
  else direct_free(r);
}

/* The images through DuckDB: one query over id, name and pixels_meta of every row. */
static int query_meta(ot_reader *r, const char *key, const char *col, const char *src,
                      struct pb_error *err) {
  char sql[9800];
  snprintf(sql, sizeof sql,
           "SELECT %s, struct_extract(\"%s\", 'id'), struct_extract(\"%s\", 'name'), "
           "struct_extract(\"%s\", 'pixels_meta') FROM %s ORDER BY 1",
           key, col, col, col, src);
  duckdb_result res;
  if (duckdb_query(r->db.con, sql, &res) != DuckDBSuccess)
    return query_err(&res, PB_EFORMAT, err, r->path, "cannot read OME-Arrow metadata");
  int rc = PB_OK;
  for (;;) {
    duckdb_data_chunk ch = duckdb_fetch_chunk(res);
    if (ch == NULL) break;
    idx_t n = duckdb_data_chunk_get_size(ch);
    for (idx_t i = 0; i < n && rc == PB_OK; i++) rc = add_image(r, ch, i, err);
    duckdb_destroy_data_chunk(&ch);
    if (rc != PB_OK) break;
  }
  if (rc == PB_OK && duckdb_result_error(&res) != NULL)
    rc = pb_error_set(err, PB_EFORMAT, "%s: %.*s", r->path,
                      PB__DUCK_MSG(duckdb_result_error(&res)));
  duckdb_destroy_result(&res);
  return rc;
}

static int prepare_pixels(ot_reader *r, const char *sql, struct pb_error *err) {
  if (duckdb_prepare(r->db.con, sql, &r->st) != DuckDBSuccess) {
    int rc = pb_error_set(err, PB_EFORMAT, "%s: cannot prepare the pixel query: %.*s", r->path,
                          PB__DUCK_MSG(duckdb_prepare_error(r->st)));
    duckdb_destroy_prepare(&r->st);
    r->st = NULL;
    return rc;
  }
  return PB_OK;
}

int pb__ome_table_reader_new(const char *path, const pb_read_options *opts,
                             pb__ome_table_reader **out, struct pb_error *err) {
  ot_reader *r = calloc(1, sizeof *r);
  if (r == NULL) return pb_error_set(err, PB_ENOMEM, "out of memory");
  r->ro = *opts;
  snprintf(r->path, sizeof r->path, "%s", path);
  *out = r;
  return PB_OK;
}

pb__ome_arrow_db *pb__ome_table_reader_db(pb__ome_table_reader *r) { return &r->db; }

/* The end of an open, either container: the images' metadata through DuckDB (unless meta_done),
 * the block cache, and the pixel query over src keyed by key. */
static int open_finish(ot_reader *r, const char *key, const char *col, const char *src,
                       int has_chunks, int has_planes, int meta_done, struct pb_error *err) {
  int rc;
  if (!meta_done && (rc = query_meta(r, key, col, src, err)) != PB_OK) return rc;
  size_t cache_limit = r->ro.cache_mb >= 0 ? (size_t)r->ro.cache_mb << 20
                                            : pb__pq_cache_budget((size_t)OT_CACHE_DEFAULT_MB << 20);
  if (pb__pq_cache_init(&r->cache, OT_MAX_BLOCKS, cache_limit) != PB_OK)
    return pb_error_set(err, PB_ENOMEM, "out of memory");
  double total = 0;
  for (int64_t j = 0; j < r->n; j++) {
    double v = (double)pb_dtype_size(r->imgs[j].dtype);
    for (int k = 0; k < PB_NDIM; k++) v *= (double)r->imgs[j].shape[k];
    total += v;
  }
  double avg = r->n > 0 ? total / (double)r->n : 1.0, rows = (double)(cache_limit / 4) / avg;
  r->table_block = rows < 1.0 ? 1 : (rows > 65536.0 ? 65536 : (int64_t)rows);
  char sql[9800];
  snprintf(sql, sizeof sql, "SELECT %s, %s%s%s, %s%s%s FROM %s WHERE %s BETWEEN $1 AND $2", key,
           has_chunks ? "struct_extract(\"" : "NULL", has_chunks ? col : "",
           has_chunks ? "\", 'chunks')" : "", has_planes ? "struct_extract(\"" : "NULL",
           has_planes ? col : "", has_planes ? "\", 'planes')" : "", src, key);
  /* With direct reads, DuckDB's pixel query serves only rows they do not take: prepared then
   * (binding it parses the footer, the cost of files of many row groups). */
  if (r->direct) {
    if ((r->pixel_sql = strdup(sql)) == NULL) return pb_error_set(err, PB_ENOMEM, "out of memory");
    return PB_OK;
  }
  return prepare_pixels(r, sql, err);
}

int pb__ome_table_reader_ready(pb__ome_table_reader *r, const char *key, const char *col,
                               const char *src, int has_chunks, int has_planes,
                               struct pb_error *err) {
  r->table_blocks = 1;
  return open_finish(r, key, col, src, has_chunks, has_planes, 0, err);
}

static int ot_open_parquet(const char *path, const pb_read_options *opts, void **state,
                           struct pb_error *err) {
  ot_reader *r;
  PB_RETURN_NOT_OK(pb__ome_table_reader_new(path, opts, &r, err));
  const char *files[1] = {path};
  int rc = pb__ome_arrow_db_open_reader(&r->db, NULL, files, 1, err);
  if (rc != PB_OK) {
    free(r);
    return rc;
  }
  char col[256], src[8600], q[8400];
  int has_chunks = 0, has_planes = 0;
  /* A Parquet file's footer, read by pipebench: DuckDB's parse of it cost ~50 KB and ~0.2 ms
   * per row group. Kept only while the file is opened. */
  pb__pq_meta meta;
  memset(&meta, 0, sizeof meta);
  rc = pb__pq_meta_read(path, &meta, err);
  if (rc == PB_OK) rc = find_column_meta(r, &meta, col, sizeof col, &has_chunks, &has_planes, err);
  if (rc != PB_OK) goto fail;
  if (strchr(col, '"') != NULL) {
    rc = pb_error_set(err, PB_EUNSUPPORTED, "%s: column or table name with '\"'", path);
    goto fail;
  }
  pb__sql_quote(q, sizeof q, path);
  snprintf(src, sizeof src, "read_parquet(%s)", q);
  int meta_done = 0;
  if ((rc = meta_row_groups(r, &meta, err)) != PB_OK) goto fail;
  direct_open(r, &meta, col, &meta_done); /* releases the footer */
  pb__pq_meta_destroy(&meta); /* direct_open has released it, unless it returned early */
  if (pb__io_is_url(path) && (!meta_done || !r->direct)) {
    /* DuckDB reads no URL here (its httpfs extension cannot be installed offline) */
    rc = pb_error_set(err, PB_EUNSUPPORTED,
                      "%s: this file's layout is read through DuckDB, which reads local paths "
                      "only; over a URL pipebench reads OME-Arrow Parquet files its page reader "
                      "takes (as gen and convert write them; docs/remote.md)", path);
    goto fail;
  }
  rc = open_finish(r, "file_row_number", col, src, has_chunks, has_planes, meta_done, err);
  if (rc != PB_OK) goto fail;
  *state = r;
  return PB_OK;
fail:
  pb__pq_meta_destroy(&meta);
  pb__ome_table_reader_close(r);
  return rc;
}

int64_t pb__ome_table_reader_count(void *state) { return ((ot_reader *)state)->n; }

int pb__ome_table_reader_meta(void *state, int64_t i, pb_image_meta *out, struct pb_error *err) {
  ot_reader *r = state;
  (void)err;
  const ot_img *im = &r->imgs[i];
  *out = r->extras[im->extra];
  snprintf(out->name, sizeof out->name, "%s", im->name);
  snprintf(out->id, sizeof out->id, "%s", im->id);
  out->dtype = im->dtype;
  for (int k = 0; k < PB_NDIM; k++) out->shape[k] = im->shape[k];
  return PB_OK;
}

int pb__ome_table_reader_shape(void *state, int64_t i, pb_dtype *dtype, int64_t shape[PB_NDIM],
                               struct pb_error *err) {
  (void)err;
  const ot_img *im = &((ot_reader *)state)->imgs[i];
  *dtype = im->dtype;
  memcpy(shape, im->shape, sizeof im->shape);
  return PB_OK;
}

static int64_t box_volume(const int64_t a0[PB_NDIM], const int64_t an[PB_NDIM],
                          const int64_t b0[PB_NDIM], const int64_t bn[PB_NDIM]) {
  int64_t v = 1;
  for (int k = 0; k < PB_NDIM; k++) {
    int64_t lo = a0[k] > b0[k] ? a0[k] : b0[k];
    int64_t hi = a0[k] + an[k] < b0[k] + bn[k] ? a0[k] + an[k] : b0[k] + bn[k];
    if (hi <= lo) return 0;
    v *= hi - lo;
  }
  return v;
}

/* Checks one byte chunk (box org/shp, leaf codec, dtype name, its bytes) and copies what the
 * region needs; both the DuckDB and the direct path use it, so they agree. */
static int place_chunk(ot_reader *r, int64_t i, const ot_img *im, size_t j,
                       const int64_t org[PB_NDIM],
                       const int64_t shp[PB_NDIM], const char *codec, const char *dname,
                       const char *b, size_t blen, const pb_region *reg, void *dst,
                       int64_t *covered, void **scratch, size_t *scratch_n,
                       pb_stage_times *times, struct pb_error *err) {
  size_t es = pb_dtype_size(im->dtype);
  for (int a = 0; a < PB_NDIM; a++)
    if (org[a] < 0 || shp[a] < 1 || org[a] + shp[a] > im->shape[a])
      return pb_error_set(err, PB_EFORMAT,
                          "%s: image %lld, chunk %zu: box at %c=%lld size %lld lies outside "
                          "the image",
                          r->path, (long long)i, j, "TCZYX"[a], (long long)org[a],
                          (long long)shp[a]);
  int64_t vol = box_volume(org, shp, reg->start, reg->count);
  if (vol == 0) return PB_OK;
  pb_dtype cd;
  if (dname[0] != '\0' && (pb_dtype_parse(dname, &cd) != PB_OK || cd != im->dtype))
    return pb_error_set(err, PB_EFORMAT, "%s: image %lld, chunk %zu: dtype '%s', image is %s",
                        r->path, (long long)i, j, dname, pb_dtype_name(im->dtype));
  size_t raw = (size_t)(shp[2] * shp[3] * shp[4]) * es;
  if (b == NULL)
    return pb_error_set(err, PB_EFORMAT, "%s: image %lld, chunk %zu: pixel_bytes is NULL",
                        r->path, (long long)i, j);
  if (times) times->bytes_read += (int64_t)blen;
  const void *src = b;
  if (strcmp(codec, "none") == 0 || codec[0] == '\0') {
    if (blen != raw)
      return pb_error_set(err, PB_EFORMAT,
                          "%s: image %lld, chunk %zu: pixel_bytes holds %zu bytes, its shape "
                          "%lldx%lldx%lld of %s needs %zu",
                          r->path, (long long)i, j, blen, (long long)shp[2], (long long)shp[3],
                          (long long)shp[4], pb_dtype_name(im->dtype), raw);
  } else {
    if (raw > *scratch_n) {
      free(*scratch);
      *scratch = malloc(raw);
      *scratch_n = *scratch ? raw : 0;
      if (*scratch == NULL) return pb_error_set(err, PB_ENOMEM, "out of memory");
    }
    int64_t t0 = pb_now_ns();
    int rc = pb__ome_arrow_decode(codec, b, blen, *scratch, raw, &r->codec_ctx, err);
    if (times) times->decompress_ns += pb_now_ns() - t0;
    if (rc != PB_OK) {
      pb_error_prefix(err, "%s: image %lld, chunk %zu (%s): ", r->path, (long long)i, j, codec);
      return rc;
    }
    src = *scratch;
  }
  pb__copy_box(dst, reg->start, reg->count, src, org, shp, es);
  *covered += vol;
  return PB_OK;
}

/* ---- piece lists: chunks (and planes, as 1 x Y x X chunks) on one grid ------------------- */

/* Room for n pieces in r->pcs. */
static int pieces_reserve(ot_reader *r, size_t n) {
  return pb__vec_reserve((void **)&r->pcs, &r->cap_pcs, n ? n : 1, sizeof *r->pcs);
}

static int codec_known(const char *c) {
  return c[0] == '\0' || strcmp(c, "none") == 0 || strcmp(c, "zstd") == 0 ||
         strcmp(c, "lz4") == 0;
}

/* Checks that the n pieces of image i tile it exactly: each inside the image, on the lines of
 * one grid (the largest piece on each axis), of the grid's shape (smaller only where the image
 * ends), no two on one cell and none missing; and that every leaf codec is one pipebench
 * decodes. Checked for the whole row, whatever region is read, so that a damaged list is
 * refused the same way by every read. noun: "chunk" or "plane". */
static int check_pieces(ot_reader *r, int64_t i, const ot_img *im, const ot_piece *pc, size_t n,
                        const char *noun, struct pb_error *err) {
  int64_t g[3] = {1, 1, 1};
  for (size_t j = 0; j < n; j++) {
    const int32_t *b = pc[j].box;
    if (b[0] < 0 || b[0] >= im->shape[PB_T] || b[1] < 0 || b[1] >= im->shape[PB_C])
      return pb_error_set(err, PB_EFORMAT,
                          "%s: image %lld, %s %zu: t=%d, c=%d lies outside the image (T=%lld, "
                          "C=%lld)",
                          r->path, (long long)i, noun, j, b[0], b[1], (long long)im->shape[PB_T],
                          (long long)im->shape[PB_C]);
    for (int a = 0; a < 3; a++) {
      int64_t o = b[2 + a], sz = b[5 + a], size = im->shape[PB_Z + a];
      if (o < 0 || sz < 1 || o >= size || sz > size - o)
        return pb_error_set(err, PB_EFORMAT,
                            "%s: image %lld, %s %zu: %c=%lld of size %lld lies outside the "
                            "image (size_%c %lld)",
                            r->path, (long long)i, noun, j, "zyx"[a], (long long)o,
                            (long long)sz, "zyx"[a], (long long)size);
      if (sz > g[a]) g[a] = sz;
    }
    if (!codec_known(pc[j].codec))
      return pb_error_set(err, PB_EFORMAT,
                          "%s: image %lld, %s %zu: unknown compression '%s' (pipebench reads "
                          "none, zstd and lz4)",
                          r->path, (long long)i, noun, j, pc[j].codec);
  }
  /* cells of the grid: at most the image's pixel count, which open held to a limit */
  int64_t nc[3], cells = im->shape[PB_T] * im->shape[PB_C];
  for (int a = 0; a < 3; a++) {
    nc[a] = (im->shape[PB_Z + a] + g[a] - 1) / g[a];
    cells *= nc[a];
  }
  for (size_t j = 0; j < n; j++) {
    const int32_t *b = pc[j].box;
    for (int a = 0; a < 3; a++) {
      int64_t o = b[2 + a], rest = im->shape[PB_Z + a] - o;
      int64_t want = rest < g[a] ? rest : g[a];
      if (o % g[a] != 0)
        return pb_error_set(err, PB_EFORMAT,
                            "%s: image %lld, %s %zu at z=%d, y=%d, x=%d is not on the grid of "
                            "%lldx%lldx%lld (ZYX) that its largest %ss make",
                            r->path, (long long)i, noun, j, b[2], b[3], b[4], (long long)g[0],
                            (long long)g[1], (long long)g[2], noun);
      if (b[5 + a] != want)
        return pb_error_set(err, PB_EFORMAT,
                            "%s: image %lld: %s shapes do not tile the image: %s %zu at z=%d, "
                            "y=%d, x=%d is %dx%dx%d, the grid of %lldx%lldx%lld needs %lld on %c",
                            r->path, (long long)i, noun, noun, j, b[2], b[3], b[4], b[5], b[6],
                            b[7], (long long)g[0], (long long)g[1], (long long)g[2],
                            (long long)want, "zyx"[a]);
    }
  }
  if ((int64_t)n < cells)
    return pb_error_set(err, PB_EFORMAT,
                        "%s: image %lld: truncated %s list: %zu %ss, the grid of %lldx%lldx%lld "
                        "(ZYX) over %lld t and %lld c needs %lld",
                        r->path, (long long)i, noun, n, noun, (long long)g[0], (long long)g[1],
                        (long long)g[2], (long long)im->shape[PB_T], (long long)im->shape[PB_C],
                        (long long)cells);
  /* n >= cells here, so the table is no larger than the list */
  if (pb__vec_reserve((void **)&r->cells, &r->cap_cells, (size_t)cells, sizeof *r->cells) != PB_OK)
    return pb_error_set(err, PB_ENOMEM, "out of memory");
  for (int64_t k = 0; k < cells; k++) r->cells[k] = -1;
  for (size_t j = 0; j < n; j++) {
    const int32_t *b = pc[j].box;
    int64_t cell = (int64_t)b[0] * im->shape[PB_C] + b[1];
    for (int a = 0; a < 3; a++) cell = cell * nc[a] + b[2 + a] / g[a];
    if (r->cells[cell] >= 0)
      return pb_error_set(err, PB_EFORMAT,
                          "%s: image %lld: overlapping %ss: %s %zu and %s %d both hold t=%d, "
                          "c=%d, z=%d, y=%d, x=%d",
                          r->path, (long long)i, noun, noun, j, noun, r->cells[cell], b[0], b[1],
                          b[2], b[3], b[4]);
    r->cells[cell] = (int32_t)j;
  }
  return PB_OK;
}

/* A box field read through DuckDB, as int32 (-1 when NULL or out of range: refused later). */
static int32_t box_field(duckdb_vector v, idx_t k) {
  int64_t x = pb__ome_arrow_get_int(v, k, -1);
  return x < INT32_MIN || x > INT32_MAX ? -1 : (int32_t)x;
}

/* Places numeric pixels (n values of `width` bytes: the dtype's own, or INT32 holding 8- and
 * 16-bit values) of the box org/shp into the region. */
static int place_values(ot_reader *r, const ot_img *im, const unsigned char *src, size_t width,
                        const int64_t org[PB_NDIM], const int64_t shp[PB_NDIM],
                        const pb_region *reg, void *dst, int64_t *covered,
                        pb_stage_times *times, struct pb_error *err);

/* Places the chunks of one row read through DuckDB: byte chunks (pixel_bytes) or numeric
 * chunks (pixels lists). */
static int put_chunks(ot_reader *r, int64_t i, const ot_img *im, duckdb_vector cl, idx_t row,
                      const pb_region *reg, void *dst, int64_t *covered, pb_stage_times *times,
                      struct pb_error *err) {
  duckdb_list_entry e = ((duckdb_list_entry *)duckdb_vector_get_data(cl))[row];
  duckdb_vector cs = duckdb_list_vector_get_child(cl);
  static const char *const names[] = {"t", "c", "z", "y", "x", "shape_z", "shape_y", "shape_x",
                                      "dtype", "compression", "pixel_bytes", "pixels"};
  int f[12];
  for (int k = 0; k < 12; k++) {
    f[k] = pb__ome_arrow_field(cs, names[k]);
    if (f[k] < 0 && k < 8)
      return pb_error_set(err, PB_EFORMAT, "%s: image %lld: chunks have no field '%s'", r->path,
                          (long long)i, names[k]);
  }
  int numeric = f[10] < 0;
  if (numeric && f[11] < 0)
    return pb_error_set(err, PB_EFORMAT, "%s: image %lld: chunks have neither pixel_bytes nor "
                        "pixels", r->path, (long long)i);
  duckdb_vector pix = NULL;
  const unsigned char *base = NULL;
  const duckdb_list_entry *pe = NULL;
  size_t es = pb_dtype_size(im->dtype);
  if (numeric) {
    pix = duckdb_struct_vector_get_child(cs, (idx_t)f[11]);
    duckdb_vector data = duckdb_list_vector_get_child(pix);
    duckdb_logical_type lt = duckdb_vector_get_column_type(data);
    duckdb_type tid = duckdb_get_type_id(lt);
    duckdb_destroy_logical_type(&lt);
    if (tid != pb__ome_arrow_dtype_duck(im->dtype))
      return pb_error_set(err, PB_EFORMAT,
                          "%s: image %lld: chunk pixels have DuckDB type %d, pixels_meta says %s",
                          r->path, (long long)i, (int)tid, pb_dtype_name(im->dtype));
    base = duckdb_vector_get_data(data);
    pe = duckdb_vector_get_data(pix);
  }
  if (pieces_reserve(r, (size_t)e.length) != PB_OK)
    return pb_error_set(err, PB_ENOMEM, "out of memory");
  for (idx_t j = 0; j < e.length; j++) {
    idx_t k = e.offset + j;
    ot_piece *pc = &r->pcs[j];
    for (int a = 0; a < 8; a++)
      pc->box[a] = box_field(duckdb_struct_vector_get_child(cs, (idx_t)f[a]), k);
    snprintf(pc->codec, sizeof pc->codec, "%s", numeric ? "" : "none");
    pc->dtype[0] = '\0';
    if (!numeric && f[9] >= 0)
      pb__ome_arrow_get_str(duckdb_struct_vector_get_child(cs, (idx_t)f[9]), k, pc->codec,
                     sizeof pc->codec);
    if (!numeric && f[8] >= 0)
      pb__ome_arrow_get_str(duckdb_struct_vector_get_child(cs, (idx_t)f[8]), k, pc->dtype,
                     sizeof pc->dtype);
  }
  PB_RETURN_NOT_OK(check_pieces(r, i, im, r->pcs, (size_t)e.length, "chunk", err));
  void *scratch = NULL;
  size_t scratch_n = 0;
  int rc = PB_OK;
  for (idx_t j = 0; j < e.length && rc == PB_OK; j++) {
    idx_t k = e.offset + j;
    const int32_t *b = r->pcs[j].box;
    int64_t org[PB_NDIM] = {b[0], b[1], b[2], b[3], b[4]};
    int64_t shp[PB_NDIM] = {1, 1, b[5], b[6], b[7]};
    if (numeric) {
      idx_t want = (idx_t)b[5] * (idx_t)b[6] * (idx_t)b[7];
      idx_t got = pb__ome_arrow_valid(pix, k) ? pe[k].length : 0;
      if (got != want)
        return pb_error_set(err, PB_EFORMAT,
                            "%s: image %lld, chunk %llu: pixels list holds %llu values, its "
                            "shape %dx%dx%d needs %llu",
                            r->path, (long long)i, (unsigned long long)j,
                            (unsigned long long)got, b[5], b[6], b[7], (unsigned long long)want);
      if (box_volume(org, shp, reg->start, reg->count) == 0) continue;
      rc = place_values(r, im, base + pe[k].offset * es, es, org, shp, reg, dst, covered, times,
                        err);
      continue;
    }
    size_t blen = 0;
    const char *bytes = f[10] >= 0 ? pb__ome_arrow_get_blob(duckdb_struct_vector_get_child(cs, (idx_t)f[10]), k, &blen) : NULL;
    rc = place_chunk(r, i, im, (size_t)j, org, shp, r->pcs[j].codec, r->pcs[j].dtype, bytes,
                     blen, reg, dst, covered, &scratch, &scratch_n, times, err);
  }
  free(scratch);
  return rc;
}

static int place_values(ot_reader *r, const ot_img *im, const unsigned char *src, size_t width,
                        const int64_t org[PB_NDIM], const int64_t shp[PB_NDIM],
                        const pb_region *reg, void *dst, int64_t *covered,
                        pb_stage_times *times, struct pb_error *err) {
  size_t es = pb_dtype_size(im->dtype);
  size_t px = (size_t)(shp[2] * shp[3] * shp[4]);
  int64_t vol = box_volume(org, shp, reg->start, reg->count);
  if (vol == 0) return PB_OK;
  if (width != es) { /* INT32 holding 8- or 16-bit values: keep the low bytes */
    int inside = 1; /* the box lands whole and contiguous in dst: narrow straight into it */
    for (int k = 0; k < PB_NDIM; k++)
      inside &= reg->start[k] == 0 && reg->count[k] == im->shape[k];
    inside &= shp[3] == im->shape[PB_Y] && shp[4] == im->shape[PB_X];
    if (inside) {
      size_t at = (size_t)(((org[0] * im->shape[1] + org[1]) * im->shape[2] + org[2]) *
                           im->shape[3] * im->shape[4]);
      narrow_int32(src, px, es, (unsigned char *)dst + at * es);
      if (times) times->bytes_read += (int64_t)(px * es);
      *covered += vol;
      return PB_OK;
    }
    if (r->conv_n < px * es) {
      free(r->conv);
      r->conv = malloc(px * es);
      r->conv_n = r->conv ? px * es : 0;
      if (r->conv == NULL) return pb_error_set(err, PB_ENOMEM, "out of memory");
    }
    narrow_int32(src, px, es, r->conv);
    src = r->conv;
  }
  if (times) times->bytes_read += (int64_t)(px * es);
  pb__copy_box(dst, reg->start, reg->count, src, org, shp, es);
  *covered += vol;
  return PB_OK;
}

/* Places the numeric planes of one row into the region. */
static int put_planes(ot_reader *r, int64_t i, const ot_img *im, duckdb_vector pl, idx_t row,
                      const pb_region *reg, void *dst, int64_t *covered, pb_stage_times *times,
                      struct pb_error *err) {
  duckdb_list_entry e = ((duckdb_list_entry *)duckdb_vector_get_data(pl))[row];
  duckdb_vector ps = duckdb_list_vector_get_child(pl);
  int fz = pb__ome_arrow_field(ps, "z"), ft = pb__ome_arrow_field(ps, "t"), fc = pb__ome_arrow_field(ps, "c"),
      fp = pb__ome_arrow_field(ps, "pixels");
  if (fz < 0 || ft < 0 || fc < 0 || fp < 0)
    return pb_error_set(err, PB_EFORMAT, "%s: image %lld: planes lack z, t, c or pixels", r->path,
                        (long long)i);
  duckdb_vector pix = duckdb_struct_vector_get_child(ps, (idx_t)fp);
  duckdb_vector data = duckdb_list_vector_get_child(pix);
  duckdb_logical_type lt = duckdb_vector_get_column_type(data);
  duckdb_type tid = duckdb_get_type_id(lt);
  duckdb_destroy_logical_type(&lt);
  if (tid != pb__ome_arrow_dtype_duck(im->dtype))
    return pb_error_set(err, PB_EFORMAT,
                        "%s: image %lld: plane pixels have DuckDB type %d, pixels_meta says %s",
                        r->path, (long long)i, (int)tid, pb_dtype_name(im->dtype));
  const unsigned char *base = duckdb_vector_get_data(data);
  const duckdb_list_entry *pe = duckdb_vector_get_data(pix);
  size_t es = pb_dtype_size(im->dtype);
  int64_t Y = im->shape[PB_Y], X = im->shape[PB_X];
  if (pieces_reserve(r, (size_t)e.length) != PB_OK)
    return pb_error_set(err, PB_ENOMEM, "out of memory");
  for (idx_t j = 0; j < e.length; j++) {
    idx_t k = e.offset + j;
    ot_piece *pc = &r->pcs[j];
    int32_t box[8] = {box_field(duckdb_struct_vector_get_child(ps, (idx_t)ft), k),
                      box_field(duckdb_struct_vector_get_child(ps, (idx_t)fc), k),
                      box_field(duckdb_struct_vector_get_child(ps, (idx_t)fz), k),
                      0, 0, 1, (int32_t)Y, (int32_t)X};
    memcpy(pc->box, box, sizeof box);
    pc->codec[0] = pc->dtype[0] = '\0';
  }
  PB_RETURN_NOT_OK(check_pieces(r, i, im, r->pcs, (size_t)e.length, "plane", err));
  for (idx_t j = 0; j < e.length; j++) {
    idx_t k = e.offset + j;
    int64_t org[PB_NDIM] = {pb__ome_arrow_get_int(duckdb_struct_vector_get_child(ps, (idx_t)ft), k, -1),
                            pb__ome_arrow_get_int(duckdb_struct_vector_get_child(ps, (idx_t)fc), k, -1),
                            pb__ome_arrow_get_int(duckdb_struct_vector_get_child(ps, (idx_t)fz), k, -1),
                            0, 0};
    int64_t shp[PB_NDIM] = {1, 1, 1, Y, X};
    if (org[0] < 0 || org[0] >= im->shape[0] || org[1] < 0 || org[1] >= im->shape[1] ||
        org[2] < 0 || org[2] >= im->shape[2])
      return pb_error_set(err, PB_EFORMAT, "%s: image %lld, plane %llu: (t=%lld, c=%lld, z=%lld) "
                          "lies outside the image", r->path, (long long)i,
                          (unsigned long long)j, (long long)org[0], (long long)org[1],
                          (long long)org[2]);
    if (!pb__ome_arrow_valid(pix, k) || pe[k].length != (idx_t)(Y * X))
      return pb_error_set(err, PB_EFORMAT,
                          "%s: image %lld, plane %llu: %llu pixels, expected %lld x %lld", r->path,
                          (long long)i, (unsigned long long)j,
                          (unsigned long long)(pb__ome_arrow_valid(pix, k) ? pe[k].length : 0),
                          (long long)Y, (long long)X);
    int64_t vol = box_volume(org, shp, reg->start, reg->count);
    if (vol == 0) continue;
    if (times) times->bytes_read += (int64_t)((size_t)(Y * X) * es);
    pb__copy_box(dst, reg->start, reg->count, base + pe[k].offset * es, org, shp, es);
    *covered += vol;
  }
  return PB_OK;
}

/* The keys of the block that holds key. */
static void block_range(const ot_reader *r, int64_t key, int64_t *first, int64_t *last) {
  if (!r->table_blocks && r->n_rg > 0 && key >= 0 && key < r->rg_first[r->n_rg]) {
    size_t lo = 0, hi = r->n_rg; /* last group whose first row <= key */
    while (hi - lo > 1) {
      size_t mid = lo + (hi - lo) / 2;
      if (r->rg_first[mid] <= key) lo = mid;
      else hi = mid;
    }
    *first = r->rg_first[lo];
    *last = r->rg_first[lo + 1] - 1;
    if (*last - *first >= 2048) { /* huge groups (other writers): a 2048-row window */
      *first += (key - *first) / 2048 * 2048;
      if (*last > *first + 2047) *last = *first + 2047;
    }
    return;
  }
  if (!r->table_blocks || key < 0) { /* no footer information: just the row */
    *first = *last = key;
    return;
  }
  *first = key - key % r->table_block;
  *last = *first + r->table_block - 1;
}

/* Runs the pixel query for one block and keeps its data chunks. */
static int block_load(ot_reader *r, int64_t i, int64_t first, int64_t last, pb__pq_block *b,
                      struct pb_error *err) {
  if (r->st == NULL && r->pixel_sql != NULL) PB_RETURN_NOT_OK(prepare_pixels(r, r->pixel_sql, err));
  if (pb__pq_block_init(b, first, last) != PB_OK)
    return pb_error_set(err, PB_ENOMEM, "out of memory");
  duckdb_bind_int64(r->st, 1, first);
  duckdb_bind_int64(r->st, 2, last);
  duckdb_result res;
  if (pb__ome_arrow_execute_streaming(r->st, &res) != DuckDBSuccess) {
    pb__pq_block_free(b);
    char what[64];
    snprintf(what, sizeof what, "image %lld", (long long)i);
    return query_err(&res, PB_EDUCKDB, err, r->path, what);
  }
  size_t rows = 0;
  int rc = PB_OK;
  for (;;) {
    duckdb_data_chunk ch = duckdb_fetch_chunk(res);
    if (ch == NULL) break;
    int32_t d;
    if (pb__pq_block_push(b, ch, &d) != PB_OK) {
      rc = pb_error_set(err, PB_ENOMEM, "out of memory");
      break;
    }
    duckdb_vector kv = duckdb_data_chunk_get_vector(ch, 0);
    idx_t n = duckdb_data_chunk_get_size(ch);
    for (idx_t k = 0; k < n; k++) {
      int64_t key = pb__ome_arrow_get_int(kv, k, -1);
      if (key < first || key > last) continue;
      b->chunk_of[key - first] = d;
      b->row_of[key - first] = (int32_t)k;
      rows++;
    }
  }
  if (rc == PB_OK && duckdb_result_error(&res) != NULL)
    rc = pb_error_set(err, PB_EDUCKDB, "%s: image %lld: %.*s", r->path, (long long)i,
                      PB__DUCK_MSG(duckdb_result_error(&res)));
  duckdb_destroy_result(&res);
  if (rc != PB_OK) {
    pb__pq_block_free(b);
    return rc;
  }
  const ot_img *im = &r->imgs[i];
  size_t per = 1;
  for (int k = 0; k < PB_NDIM; k++) per *= (size_t)im->shape[k];
  b->bytes = rows * per * pb_dtype_size(im->dtype) + 256;
  return PB_OK;
}

/* The cached block holding key, loading it (and evicting the least recently used blocks over
 * the cache limit) when needed. */
static int block_get(ot_reader *r, int64_t i, int64_t key, pb__pq_block **out,
                     struct pb_error *err) {
  *out = pb__pq_cache_find(&r->cache, key);
  if (*out != NULL) return PB_OK;
  int64_t first, last;
  block_range(r, key, &first, &last);
  pb__pq_block nb;
  PB_RETURN_NOT_OK(block_load(r, i, first, last, &nb, err));
  *out = pb__pq_cache_add(&r->cache, &nb);
  return PB_OK;
}

static int ot_read_duck(ot_reader *r, int64_t i, const pb_region *region, void *dst,
                        size_t dst_size, pb_stage_times *times, struct pb_error *err) {
  (void)dst_size; /* i, region and dst_size: checked by format.c */
  const ot_img *im = &r->imgs[i];
  pb_region full;
  if (region == NULL) {
    pb__region_full(&full, im->shape);
    region = &full;
  }
  int64_t need = 1;
  for (int k = 0; k < PB_NDIM; k++) need *= region->count[k];
  int64_t t0 = pb_now_ns();
  pb__pq_block *b = NULL;
  int rc = block_get(r, i, im->key, &b, err);
  if (times) times->read_ns += pb_now_ns() - t0;
  if (rc != PB_OK) return rc;
  int64_t covered = 0;
  int32_t ci = im->key >= b->first && im->key <= b->last ? b->chunk_of[im->key - b->first] : -1;
  if (ci < 0)
    return pb_error_set(err, PB_EFORMAT, "%s: image %lld: row %lld not found", r->path,
                        (long long)i, (long long)im->key);
  duckdb_data_chunk ch = b->chunks[ci];
  idx_t row = (idx_t)b->row_of[im->key - b->first];
  int64_t t1 = pb_now_ns();
  duckdb_vector cl = duckdb_data_chunk_get_vector(ch, 1), pl = duckdb_data_chunk_get_vector(ch, 2);
  int has_c = pb__ome_arrow_valid(cl, row) && pb__ome_arrow_field(duckdb_list_vector_get_child(cl), "t") >= 0 &&
              ((duckdb_list_entry *)duckdb_vector_get_data(cl))[row].length > 0;
  int has_p = pb__ome_arrow_valid(pl, row) && pb__ome_arrow_field(duckdb_list_vector_get_child(pl), "z") >= 0 &&
              ((duckdb_list_entry *)duckdb_vector_get_data(pl))[row].length > 0;
  if (has_p)
    rc = put_planes(r, i, im, pl, row, region, dst, &covered, times, err);
  else if (has_c)
    rc = put_chunks(r, i, im, cl, row, region, dst, &covered, times, err);
  else
    rc = pb_error_set(err, PB_EFORMAT, "%s: image %lld: both planes and chunks are empty",
                      r->path, (long long)i);
  if (rc == PB_OK && covered != need)
    rc = pb_error_set(err, PB_EFORMAT,
                      "%s: image %lld: planes/chunks cover %lld of the %lld pixels asked for",
                      r->path, (long long)i, (long long)covered, (long long)need);
  if (times) {
    times->decode_ns += pb_now_ns() - t1 - times->decompress_ns;
    times->bytes_decoded += need * (int64_t)pb_dtype_size(im->dtype);
  }
  return rc;
}

/* Expected Parquet physical type and annotation of numeric pixels of dtype d. */
static int pixel_physical(pb_dtype d, const char **converted) {
  switch (d) {
  case PB_UINT8: *converted = "UINT_8"; return PB__PQ_INT32;
  case PB_UINT16: *converted = "UINT_16"; return PB__PQ_INT32;
  case PB_INT16: *converted = "INT_16"; return PB__PQ_INT32;
  case PB_UINT32: *converted = "UINT_32"; return PB__PQ_INT32;
  case PB_FLOAT32: *converted = ""; return PB__PQ_FLOAT;
  case PB_FLOAT64: *converted = ""; return PB__PQ_DOUBLE;
  default: *converted = ""; return -1;
  }
}

/* Places the planes of image i, just read into r->rows, into the region. */
static int direct_put_planes(ot_reader *r, int64_t i, int planes, const pb_region *reg,
                             void *dst, int64_t *covered, pb_stage_times *times,
                             struct pb_error *err) {
  const ot_img *im = &r->imgs[i];
  const pb__pq_rows *q = &r->rows;
  size_t e0 = q->row_elem[0], ne = q->row_elem[1] - e0;
  if (ne != (size_t)planes)
    return pb_error_set(err, PB_EFORMAT, "%s: image %lld: %zu pixel lists for %d planes",
                        r->path, (long long)i, ne, planes);
  int64_t Y = im->shape[PB_Y], X = im->shape[PB_X];
  const int32_t *tcz = &r->pl_tcz[(size_t)r->pl_first[im->key] * 3];
  if (pieces_reserve(r, ne) != PB_OK) return pb_error_set(err, PB_ENOMEM, "out of memory");
  for (size_t j = 0; j < ne; j++) {
    int32_t box[8] = {tcz[3 * j], tcz[3 * j + 1], tcz[3 * j + 2], 0, 0, 1, (int32_t)Y,
                      (int32_t)X};
    memcpy(r->pcs[j].box, box, sizeof box);
    r->pcs[j].codec[0] = r->pcs[j].dtype[0] = '\0';
  }
  PB_RETURN_NOT_OK(check_pieces(r, i, im, r->pcs, ne, "plane", err));
  size_t px = (size_t)(Y * X);
  for (size_t j = 0; j < ne; j++) {
    int64_t org[PB_NDIM] = {tcz[3 * j], tcz[3 * j + 1], tcz[3 * j + 2], 0, 0};
    int64_t shp[PB_NDIM] = {1, 1, 1, Y, X};
    size_t nv = q->elem_val[e0 + j + 1] - q->elem_val[e0 + j];
    if (nv != px || q->elem_nulls[e0 + j] != 0)
      return pb_error_set(err, PB_EFORMAT,
                          "%s: image %lld, plane %zu: %zu pixels (%zu null), expected %lld x "
                          "%lld", r->path, (long long)i, j, nv, q->elem_nulls[e0 + j],
                          (long long)Y, (long long)X);
    PB_RETURN_NOT_OK(place_values(r, im, pb__pq_rows_data(q) + q->elem_val[e0 + j] * q->width,
                                  q->width, org, shp, reg, dst, covered, times, err));
  }
  return PB_OK;
}

/* Places the chunks (numeric or bytes) of image i, just read into r->rows, into the region:
 * the whole list is checked, then only the chunks the region touches are converted or
 * decompressed. */
static int direct_put_chunks(ot_reader *r, int64_t i, int chunks, const pb_region *reg,
                             void *dst, int64_t *covered, pb_stage_times *times,
                             struct pb_error *err) {
  const ot_img *im = &r->imgs[i];
  const pb__pq_rows *q = &r->rows;
  size_t e0 = q->row_elem[0], ne = q->row_elem[1] - e0;
  if (ne != (size_t)chunks)
    return pb_error_set(err, PB_EFORMAT, "%s: image %lld: %zu pixel lists for %d chunks",
                        r->path, (long long)i, ne, chunks);
  const ot_piece *pcs = &r->ck[(size_t)r->ck_first[im->key]];
  PB_RETURN_NOT_OK(check_pieces(r, i, im, pcs, ne, "chunk", err));
  void *scratch = NULL;
  size_t scratch_n = 0;
  int rc = PB_OK;
  for (size_t j = 0; j < ne && rc == PB_OK; j++) {
    const ot_piece *pc = &pcs[j];
    int64_t org[PB_NDIM] = {pc->box[0], pc->box[1], pc->box[2], pc->box[3], pc->box[4]};
    int64_t shp[PB_NDIM] = {1, 1, pc->box[5], pc->box[6], pc->box[7]};
    size_t e = e0 + j, blen = 0;
    if (r->ck_numeric) {
      size_t want = (size_t)pc->box[5] * (size_t)pc->box[6] * (size_t)pc->box[7];
      size_t nv = q->elem_val[e + 1] - q->elem_val[e];
      if (nv != want || q->elem_nulls[e] != 0)
        rc = pb_error_set(err, PB_EFORMAT,
                          "%s: image %lld, chunk %zu: pixels list holds %zu values (%zu null), "
                          "its shape %dx%dx%d needs %zu",
                          r->path, (long long)i, j, nv, q->elem_nulls[e], pc->box[5],
                          pc->box[6], pc->box[7], want);
      else
        rc = place_values(r, im, pb__pq_rows_data(q) + q->elem_val[e] * q->width, q->width,
                          org, shp, reg, dst, covered, times, err);
      continue;
    }
    const char *b = NULL;
    if (q->elem_val[e + 1] - q->elem_val[e] == 1 && q->elem_nulls[e] == 0) {
      size_t v = q->elem_val[e];
      b = (const char *)pb__pq_rows_data(q) + q->val_off[v];
      blen = q->val_off[v + 1] - q->val_off[v];
    }
    rc = place_chunk(r, i, im, j, org, shp, pc->codec, pc->dtype, b, blen, reg, dst, covered,
                     &scratch, &scratch_n, times, err);
  }
  free(scratch);
  return rc;
}

/* Reads image i through the direct page reader. *used is 0 when the row is one DuckDB must
 * read (then nothing was done). */
static int ot_read_direct(ot_reader *r, int64_t i, const pb_region *reg, void *dst,
                          pb_stage_times *times, int *used, struct pb_error *err) {
  const ot_img *im = &r->imgs[i];
  int64_t key = im->key;
  *used = 0;
  if (key < 0 || key >= r->n_file) return PB_OK;
  int planes = r->pl_n != NULL ? r->pl_n[key] : 0;
  int chunks = r->ck_n != NULL ? r->ck_n[key] : 0;
  pb__pq_col *col;
  if (planes > 0 && r->px_planes != NULL) col = r->px_planes;
  else if (planes == 0 && chunks > 0 && r->px_chunks != NULL) col = r->px_chunks;
  else return PB_OK;
  const char *conv = "";
  if ((col == r->px_planes || r->ck_numeric) &&
      (pixel_physical(im->dtype, &conv) != pb__pq_physical(col) ||
       strcmp(conv, pb__pq_converted(col)) != 0))
    return PB_OK; /* DuckDB reports the type mismatch */
  *used = 1;
  int64_t t0 = pb_now_ns();
  pb__pq_rows_clear(&r->rows);
  r->rows.may_borrow = 1; /* the pixels are placed before the next read */
  int rc = pb__pq_read(col, key, 1, &r->rows, err);
  if (times) times->read_ns += pb_now_ns() - t0;
  if (rc != PB_OK) {
    pb_error_prefix(err, "%s: image %lld (row %lld): ", r->path, (long long)i, (long long)key);
    return rc;
  }
  int64_t t1 = pb_now_ns(), covered = 0, need = 1;
  for (int k = 0; k < PB_NDIM; k++) need *= reg->count[k];
  size_t es = pb_dtype_size(im->dtype);
  if (col == r->px_planes) rc = direct_put_planes(r, i, planes, reg, dst, &covered, times, err);
  else rc = direct_put_chunks(r, i, chunks, reg, dst, &covered, times, err);
  if (rc != PB_OK) return rc;
  if (covered != need)
    return pb_error_set(err, PB_EFORMAT,
                        "%s: image %lld: planes/chunks cover %lld of the %lld pixels asked for",
                        r->path, (long long)i, (long long)covered, (long long)need);
  if (times) {
    times->decode_ns += pb_now_ns() - t1;
    times->bytes_decoded += need * (int64_t)es;
  }
  return PB_OK;
}

int pb__ome_table_reader_read(void *state, int64_t i, const pb_region *region, void *dst,
                              size_t dst_size, pb_stage_times *times, struct pb_error *err) {
  ot_reader *r = state;
  if (!r->direct) return ot_read_duck(r, i, region, dst, dst_size, times, err);
  const ot_img *im = &r->imgs[i];
  pb_region full;
  const pb_region *reg = region;
  if (reg == NULL) {
    pb__region_full(&full, im->shape);
    reg = &full;
  }
  int64_t need = 1;
  for (int k = 0; k < PB_NDIM; k++) need *= reg->count[k];
  struct pb_error fe;
  fe.message[0] = '\0';
  int used = 0;
  int rc = ot_read_direct(r, i, reg, dst, times, &used, &fe);
  if (used && rc == PB_OK) {
    pb__ome_arrow_direct_note(1);
    return PB_OK;
  }
  /* Not for the direct path, or it failed: DuckDB reads it. When DuckDB fails too, the direct
   * path's error is the more precise one. */
  pb__ome_arrow_direct_note(0);
  int rc2 = ot_read_duck(r, i, region, dst, dst_size, times, err);
  if (rc2 != PB_OK && used) {
    if (err != NULL) *err = fe;
    return rc;
  }
  return rc2;
}

/* ---- probes and vtables ------------------------------------------------------------------- */

int pb__ome_table_read_head(const char *path, unsigned char *buf, size_t n) {
  pb__io_file *f;
  if (pb__io_open(path, NULL, &f, NULL) != PB_OK) return -1;
  int rc = pb__io_size(f) >= n && pb__io_pread(f, buf, n, 0, NULL) == PB_OK ? 0 : -1;
  pb__io_close(f);
  return rc;
}

int pb__ome_table_ends_with(const char *s, const char *suffix) {
  size_t a = strlen(s), b = strlen(suffix);
  return a >= b && strcmp(s + a - b, suffix) == 0;
}

static int ot_probe_parquet(const char *path) {
  unsigned char h[4];
  if (pb__ome_table_read_head(path, h, 4) != 0 || memcmp(h, "PAR1", 4) != 0) return 0;
  return pb__ome_table_ends_with(path, ".parquet") ? 80 : 40;
}

const char *const pb__ome_table_write_options[] = {
    "layout=chunks|planes|chunk-bytes", "chunk_shape=ZxYxX", "variant=numeric|bytes",
    "parquet_codec=zstd|snappy|lz4|gzip|none", "row_group_rows=1..2048", NULL};

const pb_format_vtable pb__format_ome_parquet = {
    .info = {"ome-parquet",
             "OME-Arrow struct per row in one Parquet file (column ome_arrow; layout chunks, "
             "planes or chunk-bytes)",
             1, 1},
    .probe = ot_probe_parquet,
    .open = ot_open_parquet,
    .close = pb__ome_table_reader_close,
    .count = pb__ome_table_reader_count,
    .meta = pb__ome_table_reader_meta,
    .shape = pb__ome_table_reader_shape,
    .read = pb__ome_table_reader_read,
    .writer_open = pb__ome_table_writer_open,
    .writer_add = pb__ome_table_writer_add,
    .writer_finish = ot_writer_finish_parquet,
    .writer_free = pb__ome_table_writer_free,
    .write_options = pb__ome_table_write_options,
};
