/* OME-Arrow typed-chunk dataset directory (`oa-dataset`): images.parquet, chunks.parquet
 * (one raw C-order TCZYX chunk per row, one row per row group by default), index.parquet and
 * _ome_arrow_dataset.json. See docs/format-ome-arrow.md. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/checked.h"
#include "common/duck_msg.h"
#include "common/json.h"
#include "common/safe_open.h"
#include "common/vec.h"
#include "formats/arrow/oa_common.h"
#include "formats/arrow/oa_pq.h"
#include "io/io.h"
#include "parquet/pq_cache.h"

#define OD_MANIFEST "_ome_arrow_dataset.json"
#define OD_VERSION "pipebench-0.1.0"
#define OD_KV                                                                                   \
  "KV_METADATA {'ome.arrow.type': 'ome.arrow', 'ome.arrow.version': '" OD_VERSION               \
  "', 'ome.arrow.layout': 'typed-chunk-dataset'}"

typedef struct od_chunk {
  int64_t off;      /* writer: payload in the spool */
  size_t len;
  int64_t id;       /* chunk_id */
  int64_t org[PB_NDIM], shp[PB_NDIM];
  size_t image;
  int64_t row;      /* reader: its file row in chunks.parquet (direct page reads) */
} od_chunk;

static int join(char *buf, size_t size, const char *dir, const char *name) {
  return snprintf(buf, size, "%s/%s", dir, name) < (int)size ? PB_OK : PB_EINVAL;
}

/* ======================================= writer ============================================ */

typedef struct od_writer {
  char path[4096], tmp[4200];
  char pq_codec[16];
  int level;
  int64_t chunk[PB_NDIM];
  int64_t per_group;
  pb__ome_arrow_spool spool;
  pb_image_meta *images;
  int64_t (*cshape)[PB_NDIM];
  size_t n_images, cap_images, cap_cshape;
  od_chunk *chunks;
  size_t n_chunks, cap_chunks;
  size_t next;
  void *scratch;
  size_t scratch_n;
  int finished;
} od_writer;

static int od_writer_open(const char *path, const pb_write_params *params, void **ws,
                          struct pb_error *err) {
  od_writer *w = calloc(1, sizeof *w);
  if (w == NULL) return pb_error_set(err, PB_ENOMEM, "out of memory");
  w->spool.fd = -1;
  snprintf(w->path, sizeof w->path, "%s", path);
  const char *c = params->compression ? params->compression : "zstd";
  if (strcmp(c, "none") == 0 || strcmp(c, "uncompressed") == 0) c = "uncompressed";
  else if (strcmp(c, "lz4") == 0) c = "lz4_raw";
  else if (strcmp(c, "zstd") != 0 && strcmp(c, "snappy") != 0 && strcmp(c, "gzip") != 0 &&
           strcmp(c, "lz4_raw") != 0) {
    free(w);
    return pb_error_set(err, PB_EINVAL,
                        "oa-dataset compression '%s': Parquet's codec is one of none, zstd, "
                        "snappy, lz4, gzip",
                        c);
  }
  snprintf(w->pq_codec, sizeof w->pq_codec, "%s", c);
  w->level = params->level;
  for (int k = 0; k < PB_NDIM; k++) w->chunk[k] = params->chunk[k];
  w->per_group = 1;
  char v[64];
  if (pb__opt_get(params->options, "chunks_per_row_group", v, sizeof v)) {
    char *end;
    long long n = strtoll(v, &end, 10);
    if (*end != '\0' || n < 1 || n > 2048) {
      free(w);
      return pb_error_set(err, PB_EINVAL, "option chunks_per_row_group=%s: use 1..2048", v);
    }
    w->per_group = n;
  }
  pb__temp_sibling(path, w->tmp, sizeof w->tmp);
  int rc = pb__ome_arrow_spool_open(&w->spool, path, err);
  if (rc != PB_OK) {
    free(w);
    return rc;
  }
  *ws = w;
  return PB_OK;
}

static int od_writer_add(void *ws, const pb_image_meta *meta, const void *pixels,
                         struct pb_error *err) {
  od_writer *w = ws;
  for (int k = 0; k < PB_NDIM; k++)
    if (meta->shape[k] > INT32_MAX)
      return pb_error_set(err, PB_EINVAL, "%s: image '%s' is too large for int32 sizes", w->path,
                          meta->name);
  if (pb__vec_reserve((void **)&w->images, &w->cap_images,
                      w->n_images + 1, sizeof *w->images) != PB_OK ||
      pb__vec_reserve((void **)&w->cshape, &w->cap_cshape,
                      w->n_images + 1, sizeof *w->cshape) != PB_OK)
    return pb_error_set(err, PB_ENOMEM, "out of memory");
  static const int64_t defaults[PB_NDIM] = {1, 1, 1, 512, 512};
  int64_t *cs = w->cshape[w->n_images];
  for (int k = 0; k < PB_NDIM; k++) {
    int64_t v = w->chunk[k] > 0 ? w->chunk[k] : defaults[k];
    cs[k] = v < meta->shape[k] ? v : meta->shape[k];
  }
  size_t es = pb_dtype_size(meta->dtype);
  size_t max = es;
  for (int k = 0; k < PB_NDIM; k++) max *= (size_t)cs[k];
  if (max > w->scratch_n) {
    void *p = realloc(w->scratch, max);
    if (p == NULL) return pb_error_set(err, PB_ENOMEM, "out of memory");
    w->scratch = p;
    w->scratch_n = max;
  }
  int64_t zero[PB_NDIM] = {0, 0, 0, 0, 0}, o[PB_NDIM];
  for (o[0] = 0; o[0] < meta->shape[0]; o[0] += cs[0])
    for (o[1] = 0; o[1] < meta->shape[1]; o[1] += cs[1])
      for (o[2] = 0; o[2] < meta->shape[2]; o[2] += cs[2])
        for (o[3] = 0; o[3] < meta->shape[3]; o[3] += cs[3])
          for (o[4] = 0; o[4] < meta->shape[4]; o[4] += cs[4]) {
            if (pb__vec_reserve((void **)&w->chunks, &w->cap_chunks,
                                w->n_chunks + 1, sizeof *w->chunks))
              return pb_error_set(err, PB_ENOMEM, "out of memory");
            od_chunk *ch = &w->chunks[w->n_chunks];
            size_t n = es;
            for (int k = 0; k < PB_NDIM; k++) {
              ch->org[k] = o[k];
              ch->shp[k] = meta->shape[k] - o[k] < cs[k] ? meta->shape[k] - o[k] : cs[k];
              n *= (size_t)ch->shp[k];
            }
            pb__copy_box(w->scratch, ch->org, ch->shp, pixels, zero, meta->shape, es);
            PB_RETURN_NOT_OK(pb__ome_arrow_spool_write(&w->spool, w->scratch, n, &ch->off, err));
            ch->len = n;
            ch->id = (int64_t)w->n_chunks;
            ch->image = w->n_images;
            w->n_chunks++;
          }
  w->images[w->n_images++] = *meta;
  return PB_OK;
}

static void image_id(const od_writer *w, size_t i, char *buf, size_t size) {
  if (w->images[i].id[0] != '\0') snprintf(buf, size, "%s", w->images[i].id);
  else snprintf(buf, size, "img_%05zu", i);
}

/* Table function pb_oa_chunks(): chunks.parquet's rows, per_group rows per data chunk so that
 * COPY's ROW_GROUP_SIZE cuts row groups exactly there. */
static const char *const chunk_cols[] = {"image_id", "chunk_id", "t", "c", "z", "y", "x",
                                         "shape_t", "shape_c", "shape_z", "shape_y", "shape_x",
                                         "dtype", "pixel_bytes"};

static void chunks_bind(duckdb_bind_info info) {
  od_writer *w = duckdb_bind_get_extra_info(info);
  for (int k = 0; k < 14; k++) {
    duckdb_type t = k == 0 || k == 12 ? DUCKDB_TYPE_VARCHAR
                    : k == 1          ? DUCKDB_TYPE_BIGINT
                    : k == 13         ? DUCKDB_TYPE_BLOB
                                      : DUCKDB_TYPE_INTEGER;
    duckdb_logical_type lt = duckdb_create_logical_type(t);
    duckdb_bind_add_result_column(info, chunk_cols[k], lt);
    duckdb_destroy_logical_type(&lt);
  }
  duckdb_bind_set_cardinality(info, w->n_chunks, true);
}

static void chunks_init(duckdb_init_info info) { duckdb_init_set_max_threads(info, 1); }

static void chunks_fn(duckdb_function_info info, duckdb_data_chunk out) {
  od_writer *w = duckdb_function_get_extra_info(info);
  idx_t n = 0;
  while ((int64_t)n < w->per_group && w->next < w->n_chunks) {
    const od_chunk *ch = &w->chunks[w->next];
    char id[80];
    image_id(w, ch->image, id, sizeof id);
    pb__ome_arrow_set_str(duckdb_data_chunk_get_vector(out, 0), n, id);
    pb__ome_arrow_set_i64(duckdb_data_chunk_get_vector(out, 1), n, ch->id);
    for (int k = 0; k < PB_NDIM; k++) {
      pb__ome_arrow_set_i32(duckdb_data_chunk_get_vector(out, (idx_t)(2 + k)), n, (int32_t)ch->org[k]);
      pb__ome_arrow_set_i32(duckdb_data_chunk_get_vector(out, (idx_t)(7 + k)), n, (int32_t)ch->shp[k]);
    }
    pb__ome_arrow_set_str(duckdb_data_chunk_get_vector(out, 12), n,
                   pb_dtype_name(w->images[ch->image].dtype));
    if (pb__ome_arrow_spool_read(&w->spool, ch->off, w->scratch, ch->len) != PB_OK) {
      char msg[600];
      snprintf(msg, sizeof msg, "spool file: chunk %lld: cannot read back pixels",
               (long long)ch->id);
      duckdb_function_set_error(info, msg);
      return;
    }
    duckdb_vector_assign_string_element_len(duckdb_data_chunk_get_vector(out, 13), n, w->scratch,
                                            ch->len);
    n++;
    w->next++;
  }
  duckdb_data_chunk_set_size(out, n);
}

static void channels_json(const pb_image_meta *m, char **out) {
  cJSON *arr = cJSON_CreateArray();
  for (int c = 0; c < m->n_channels && c < PB_MAX_CHANNELS; c++) {
    const pb_channel *ch = &m->channels[c];
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", ch->id);
    cJSON_AddStringToObject(o, "name", ch->name);
    cJSON_AddNumberToObject(o, "emission_um", (double)ch->emission_um);
    cJSON_AddNumberToObject(o, "excitation_um", (double)ch->excitation_um);
    cJSON_AddStringToObject(o, "illumination", ch->illumination);
    cJSON_AddNumberToObject(o, "color_rgba", (double)ch->color_rgba);
    cJSON_AddItemToArray(arr, o);
  }
  *out = cJSON_PrintUnformatted(arr);
  cJSON_Delete(arr);
}

static int append_str(duckdb_appender a, const char *s) {
  return duckdb_append_varchar(a, s) == DuckDBSuccess ? 0 : 1;
}
static int failed(duckdb_state st) { return st == DuckDBSuccess ? 0 : 1; }

static int write_small_tables(od_writer *w, pb__ome_arrow_db *db, struct pb_error *err) {
  PB_RETURN_NOT_OK(pb__ome_arrow_exec(
      db,
      "CREATE TABLE images(image_id VARCHAR, name VARCHAR, image_type VARCHAR, dtype VARCHAR, "
      "size_t INTEGER, size_c INTEGER, size_z INTEGER, size_y INTEGER, size_x INTEGER, "
      "layout VARCHAR, chunk_t INTEGER, chunk_c INTEGER, chunk_z INTEGER, chunk_y INTEGER, "
      "chunk_x INTEGER, compression VARCHAR, channels_json VARCHAR, physical_size_x DOUBLE, "
      "physical_size_y DOUBLE, physical_size_z DOUBLE, physical_size_x_unit VARCHAR, "
      "physical_size_y_unit VARCHAR, physical_size_z_unit VARCHAR);"
      "CREATE TABLE idx(image_id VARCHAR, chunk_id BIGINT, row_group_id INTEGER, "
      "row_index_in_group INTEGER, fragment_path VARCHAR, t INTEGER, c INTEGER, z INTEGER, "
      "y INTEGER, x INTEGER, shape_t INTEGER, shape_c INTEGER, shape_z INTEGER, "
      "shape_y INTEGER, shape_x INTEGER)",
      w->path, err));
  duckdb_appender a = NULL;
  if (duckdb_appender_create(db->con, NULL, "images", &a) != DuckDBSuccess)
    return pb_error_set(err, PB_EDUCKDB, "%s: DuckDB appender: %s", w->path,
                        duckdb_appender_error(a));
  int bad = 0;
  for (size_t i = 0; i < w->n_images && !bad; i++) {
    const pb_image_meta *m = &w->images[i];
    char id[80], *cj = NULL;
    image_id(w, i, id, sizeof id);
    channels_json(m, &cj);
    bad |= append_str(a, id) | append_str(a, m->name) | append_str(a, "image") |
           append_str(a, pb_dtype_name(m->dtype));
    for (int k = 0; k < PB_NDIM; k++) bad |= failed(duckdb_append_int32(a, (int32_t)m->shape[k]));
    bad |= append_str(a, "typed-chunk-dataset");
    for (int k = 0; k < PB_NDIM; k++) bad |= failed(duckdb_append_int32(a, (int32_t)w->cshape[i][k]));
    bad |= append_str(a, w->pq_codec) | append_str(a, cj ? cj : "[]");
    for (int k = 0; k < 3; k++)
      bad |= m->physical_size[k] > 0 ? failed(duckdb_append_double(a, m->physical_size[k]))
                                     : failed(duckdb_append_null(a));
    for (int k = 0; k < 3; k++)
      bad |= m->physical_unit[k][0] ? append_str(a, m->physical_unit[k]) : failed(duckdb_append_null(a));
    bad |= failed(duckdb_appender_end_row(a));
    cJSON_free(cj);
  }
  if (!bad) bad |= failed(duckdb_appender_close(a));
  if (bad) {
    int rc = pb_error_set(err, PB_EDUCKDB, "%s: images table: %s", w->path,
                          duckdb_appender_error(a) ? duckdb_appender_error(a) : "append failed");
    duckdb_appender_destroy(&a);
    return rc;
  }
  duckdb_appender_destroy(&a);
  if (duckdb_appender_create(db->con, NULL, "idx", &a) != DuckDBSuccess)
    return pb_error_set(err, PB_EDUCKDB, "%s: DuckDB appender: %s", w->path,
                        duckdb_appender_error(a));
  for (size_t j = 0; j < w->n_chunks && !bad; j++) {
    const od_chunk *ch = &w->chunks[j];
    char id[80];
    image_id(w, ch->image, id, sizeof id);
    bad |= append_str(a, id) | failed(duckdb_append_int64(a, ch->id)) |
           failed(duckdb_append_int32(a, (int32_t)((int64_t)j / w->per_group))) |
           failed(duckdb_append_int32(a, (int32_t)((int64_t)j % w->per_group))) |
           append_str(a, "chunks.parquet");
    for (int k = 0; k < PB_NDIM; k++) bad |= failed(duckdb_append_int32(a, (int32_t)ch->org[k]));
    for (int k = 0; k < PB_NDIM; k++) bad |= failed(duckdb_append_int32(a, (int32_t)ch->shp[k]));
    bad |= failed(duckdb_appender_end_row(a));
  }
  if (!bad) bad |= failed(duckdb_appender_close(a));
  if (bad) {
    int rc = pb_error_set(err, PB_EDUCKDB, "%s: index table: %s", w->path,
                          duckdb_appender_error(a) ? duckdb_appender_error(a) : "append failed");
    duckdb_appender_destroy(&a);
    return rc;
  }
  duckdb_appender_destroy(&a);
  char f[4400], q[8900], sql[9800];
  static const char *const tables[2][2] = {{"images", "images.parquet"}, {"idx", "index.parquet"}};
  for (int t = 0; t < 2; t++) {
    if (join(f, sizeof f, w->tmp, tables[t][1]) != PB_OK || pb__sql_quote(q, sizeof q, f) != PB_OK)
      return pb_error_set(err, PB_EINVAL, "%s: path too long", w->path);
    snprintf(sql, sizeof sql, "COPY %s TO %s (FORMAT parquet, COMPRESSION zstd, %s)",
             tables[t][0], q, OD_KV);
    PB_RETURN_NOT_OK(pb__ome_arrow_exec(db, sql, w->path, err));
  }
  return PB_OK;
}

static int write_manifest(od_writer *w, struct pb_error *err) {
  cJSON *o = cJSON_CreateObject();
  cJSON_AddStringToObject(o, "type", "ome.arrow");
  cJSON_AddStringToObject(o, "version", OD_VERSION);
  cJSON_AddStringToObject(o, "layout", "typed-chunk-dataset");
  cJSON_AddNumberToObject(o, "image_count", (double)w->n_images);
  cJSON_AddNumberToObject(o, "chunk_count", (double)w->n_chunks);
  cJSON *choice = cJSON_AddObjectToObject(o, "choice");
  cJSON_AddStringToObject(choice, "layout", "typed-chunk-dataset");
  double cs[PB_NDIM];
  for (int k = 0; k < PB_NDIM; k++) cs[k] = (double)(w->n_images ? w->cshape[0][k] : 0);
  cJSON_AddItemToObject(choice, "chunk_shape", cJSON_CreateDoubleArray(cs, PB_NDIM));
  cJSON_AddStringToObject(choice, "compression", w->pq_codec);
  cJSON_AddStringToObject(choice, "rationale",
                          "pipebench: one chunk per Parquet row group so a chunk is one "
                          "row-group read; chunk shape and codec as asked");
  cJSON *pv = cJSON_AddObjectToObject(o, "package_versions");
  cJSON_AddStringToObject(pv, "pipebench", pb_version());
  cJSON_AddStringToObject(pv, "duckdb", duckdb_library_version());
  char *text = cJSON_Print(o);
  cJSON_Delete(o);
  if (text == NULL) return pb_error_set(err, PB_ENOMEM, "out of memory");
  char f[4400];
  join(f, sizeof f, w->tmp, OD_MANIFEST);
  int rc = pb__write_file(f, text, strlen(text), err);
  cJSON_free(text);
  return rc;
}

static int od_writer_finish(void *ws, struct pb_error *err) {
  od_writer *w = ws;
  if (w->n_images == 0) return pb_error_set(err, PB_EINVAL, "%s: no images were added", w->path);
  PB_RETURN_NOT_OK(pb__mkdirs(w->tmp, err));
  pb__ome_arrow_db db;
  int rc = pb__ome_arrow_db_open(&db, NULL, 0, err);
  if (rc != PB_OK) return rc;
  rc = write_small_tables(w, &db, err);
  if (rc == PB_OK) {
    duckdb_table_function f = duckdb_create_table_function();
    duckdb_table_function_set_name(f, "pb_oa_chunks");
    duckdb_table_function_set_extra_info(f, w, NULL);
    duckdb_table_function_set_bind(f, chunks_bind);
    duckdb_table_function_set_init(f, chunks_init);
    duckdb_table_function_set_function(f, chunks_fn);
    if (duckdb_register_table_function(db.con, f) != DuckDBSuccess)
      rc = pb_error_set(err, PB_EDUCKDB, "DuckDB: cannot register the chunk source");
    duckdb_destroy_table_function(&f);
  }
  if (rc == PB_OK) {
    char fpath[4400], q[8900], sql[9800], level[48] = "";
    join(fpath, sizeof fpath, w->tmp, "chunks.parquet");
    if (pb__sql_quote(q, sizeof q, fpath) != PB_OK) {
      rc = pb_error_set(err, PB_EINVAL, "%s: path too long", w->path);
    } else {
      if (w->level != 0 && strcmp(w->pq_codec, "zstd") == 0)
        snprintf(level, sizeof level, ", COMPRESSION_LEVEL %d", w->level);
      w->next = 0;
      snprintf(sql, sizeof sql,
               "COPY (SELECT * FROM pb_oa_chunks()) TO %s (FORMAT parquet, COMPRESSION %s%s, "
               "ROW_GROUP_SIZE %lld, %s)",
               q, w->pq_codec, level, (long long)w->per_group, OD_KV);
      rc = pb__ome_arrow_exec(&db, sql, w->path, err);
    }
  }
  pb__ome_arrow_db_close(&db);
  if (rc == PB_OK) rc = write_manifest(w, err);
  if (rc != PB_OK) return rc;
  struct stat st;
  char old[4400];
  if (stat(w->path, &st) == 0) {
    /* Replace an earlier oa-dataset, never anything else. */
    join(old, sizeof old, w->path, OD_MANIFEST);
    if (!S_ISDIR(st.st_mode) || access(old, F_OK) != 0)
      return pb_error_set(err, PB_EINVAL, "%s exists and is not an oa-dataset; not replacing it",
                          w->path);
    pb__remove_tree(w->path);
  }
  if (rename(w->tmp, w->path) != 0)
    return pb_error_set(err, -errno, "%s: cannot move %s into place: %s", w->path, w->tmp,
                        strerror(errno));
  w->finished = 1;
  pb__ome_arrow_spool_close(&w->spool);
  return PB_OK;
}

static void od_writer_free(void *ws) {
  od_writer *w = ws;
  if (w == NULL) return;
  pb__ome_arrow_spool_close(&w->spool);
  if (!w->finished) pb__remove_tree(w->tmp);
  free(w->images);
  free(w->cshape);
  free(w->chunks);
  free(w->scratch);
  free(w);
}

/* ======================================= reader ============================================ */

typedef struct od_image {
  pb_image_meta meta;
  size_t first, n; /* its chunks in od_reader.chunks, sorted by chunk_id */
} od_image;

enum { OD_MAX_BLOCKS = 64 };
#define OD_CACHE_DEFAULT_MB 64

typedef struct od_reader {
  pb_read_options ro; /* page reader, mapping, cache size (its cache string is not kept) */
  /* Blocks of consecutive positions of chunks (keys are positions), each fetched by one query:
   * DuckDB's cost per query is mostly per row group of the file, not per row returned, so
   * neighbouring chunks are read ahead, window at a time. */
  pb__pq_cache cache;
  size_t window;
  char path[4096], chunks_path[4400];
  pb__ome_arrow_db db;
  duckdb_prepared_statement st;
  od_image *images;
  size_t n_images;
  od_chunk *chunks;
  size_t n_chunks;
  char **ids;          /* image ids, for the index lookup */
  size_t *id_order;    /* image indexes sorted by id */
  pb__pq_col *px;      /* direct reads of chunks.parquet's pixel_bytes (NULL: DuckDB only) */
  pb__pq_rows rows;
} od_reader;

static void od_close(void *state) {
  od_reader *r = state;
  if (r == NULL) return;
  pb__pq_cache_destroy(&r->cache);
  if (r->st != NULL) duckdb_destroy_prepare(&r->st);
  pb__pq_free(r->px);
  pb__pq_rows_destroy(&r->rows);
  pb__ome_arrow_db_close(&r->db);
  if (r->ids != NULL)
    for (size_t i = 0; i < r->n_images; i++) free(r->ids[i]);
  free(r->ids);
  free(r->id_order);
  free(r->images);
  free(r->chunks);
  free(r);
}

static int col_index(duckdb_result *res, const char *name) {
  idx_t n = duckdb_column_count(res);
  for (idx_t i = 0; i < n; i++)
    if (strcmp(duckdb_column_name(res, i), name) == 0) return (int)i;
  return -1;
}

static int parse_channels(od_reader *r, size_t i, const char *text, pb_image_meta *m,
                          struct pb_error *err) {
  cJSON *arr = cJSON_Parse(text);
  if (arr == NULL || !cJSON_IsArray(arr)) {
    cJSON_Delete(arr);
    return pb_error_set(err, PB_EFORMAT, "%s: image %zu: channels_json is not a JSON array",
                        r->path, i);
  }
  cJSON *o;
  cJSON_ArrayForEach(o, arr) {
    if (m->n_channels >= PB_MAX_CHANNELS) break;
    pb_channel *c = &m->channels[m->n_channels++];
    cJSON *v;
    if (cJSON_IsString(v = cJSON_GetObjectItem(o, "id"))) snprintf(c->id, sizeof c->id, "%s", v->valuestring);
    if (cJSON_IsString(v = cJSON_GetObjectItem(o, "name")))
      snprintf(c->name, sizeof c->name, "%s", v->valuestring);
    if (cJSON_IsString(v = cJSON_GetObjectItem(o, "illumination")))
      snprintf(c->illumination, sizeof c->illumination, "%s", v->valuestring);
    if (cJSON_IsNumber(v = cJSON_GetObjectItem(o, "emission_um"))) c->emission_um = (float)v->valuedouble;
    if (cJSON_IsNumber(v = cJSON_GetObjectItem(o, "excitation_um")))
      c->excitation_um = (float)v->valuedouble;
    if (cJSON_IsNumber(v = cJSON_GetObjectItem(o, "color_rgba")))
      c->color_rgba = (uint32_t)v->valuedouble;
  }
  cJSON_Delete(arr);
  return PB_OK;
}

static int load_images(od_reader *r, struct pb_error *err) {
  char f[4400], q[8900], sql[9100];
  join(f, sizeof f, r->path, "images.parquet");
  pb__sql_quote(q, sizeof q, f);
  snprintf(sql, sizeof sql, "SELECT * FROM read_parquet(%s)", q);
  duckdb_result res;
  if (duckdb_query(r->db.con, sql, &res) != DuckDBSuccess) {
    int rc = pb_error_set(err, PB_EFORMAT, "%s: %.*s", f, PB__DUCK_MSG(duckdb_result_error(&res)));
    duckdb_destroy_result(&res);
    return rc;
  }
  static const char *const need[] = {"image_id", "name", "dtype", "size_t", "size_c", "size_z",
                                     "size_y", "size_x"};
  int ci[8];
  for (int k = 0; k < 8; k++)
    if ((ci[k] = col_index(&res, need[k])) < 0) {
      duckdb_destroy_result(&res);
      return pb_error_set(err, PB_EFORMAT, "%s: no column '%s'", f, need[k]);
    }
  int cj = col_index(&res, "channels_json");
  int cp[3] = {col_index(&res, "physical_size_x"), col_index(&res, "physical_size_y"),
               col_index(&res, "physical_size_z")};
  int cu[3] = {col_index(&res, "physical_size_x_unit"), col_index(&res, "physical_size_y_unit"),
               col_index(&res, "physical_size_z_unit")};
  idx_t n = duckdb_row_count(&res);
  r->images = calloc(n ? n : 1, sizeof *r->images);
  r->ids = calloc(n ? n : 1, sizeof *r->ids);
  if (r->images == NULL || r->ids == NULL) {
    duckdb_destroy_result(&res);
    return pb_error_set(err, PB_ENOMEM, "out of memory");
  }
  r->n_images = n;
  int rc = PB_OK;
  for (idx_t i = 0; i < n && rc == PB_OK; i++) {
    pb_image_meta *m = &r->images[i].meta;
    char *s = duckdb_value_varchar(&res, (idx_t)ci[0], i);
    r->ids[i] = strdup(s ? s : "");
    snprintf(m->id, sizeof m->id, "%s", s ? s : "");
    duckdb_free(s);
    s = duckdb_value_varchar(&res, (idx_t)ci[1], i);
    snprintf(m->name, sizeof m->name, "%s", s ? s : "");
    duckdb_free(s);
    s = duckdb_value_varchar(&res, (idx_t)ci[2], i);
    if (pb_dtype_parse(s, &m->dtype) != PB_OK)
      rc = pb_error_set(err, PB_EFORMAT, "%s: image %llu: unknown dtype '%s'", f,
                        (unsigned long long)i, s ? s : "NULL");
    duckdb_free(s);
    for (int k = 0; k < PB_NDIM && rc == PB_OK; k++) {
      m->shape[k] = duckdb_value_int64(&res, (idx_t)ci[3 + k], i);
      if (m->shape[k] < 1 || m->shape[k] > INT32_MAX)
        rc = pb_error_set(err, PB_EFORMAT, "%s: image %llu: %s is %lld", f, (unsigned long long)i,
                          need[3 + k], (long long)m->shape[k]);
    }
    int64_t px, claim = 0;
    if (rc == PB_OK && (!pb__prod_i64_ok(m->shape, PB_NDIM, &px) ||
                        !pb__mul_i64_ok(px, (int64_t)pb_dtype_size(m->dtype), &claim) ||
                        claim > pb__max_image_bytes()))
      rc = pb_error_set(err, PB_EUNSUPPORTED,
                        "%s: image %llu: shape %lldx%lldx%lldx%lldx%lld (TCZYX) of %s claims "
                        "more than the %lld bytes pipebench believes before reading "
                        "(PIPEBENCH_MAX_IMAGE_BYTES; docs/formats.md)",
                        f, (unsigned long long)i, (long long)m->shape[0], (long long)m->shape[1],
                        (long long)m->shape[2], (long long)m->shape[3], (long long)m->shape[4],
                        pb_dtype_name(m->dtype), (long long)pb__max_image_bytes());
    for (int k = 0; k < 3; k++) {
      if (cp[k] >= 0 && !duckdb_value_is_null(&res, (idx_t)cp[k], i))
        m->physical_size[k] = duckdb_value_double(&res, (idx_t)cp[k], i);
      if (cu[k] >= 0 && (s = duckdb_value_varchar(&res, (idx_t)cu[k], i)) != NULL) {
        snprintf(m->physical_unit[k], sizeof m->physical_unit[k], "%s", s);
        duckdb_free(s);
      }
    }
    if (rc == PB_OK && cj >= 0 && (s = duckdb_value_varchar(&res, (idx_t)cj, i)) != NULL) {
      rc = parse_channels(r, (size_t)i, s, m, err);
      duckdb_free(s);
    }
    if (r->ids[i] == NULL && rc == PB_OK) rc = pb_error_set(err, PB_ENOMEM, "out of memory");
  }
  duckdb_destroy_result(&res);
  return rc;
}

static int cmp_ids(const void *a, const void *b, void *arg) {
  char **ids = arg;
  return strcmp(ids[*(const size_t *)a], ids[*(const size_t *)b]);
}
static int cmp_chunks(const void *a, const void *b) {
  const od_chunk *x = a, *y = b;
  if (x->image != y->image) return x->image < y->image ? -1 : 1;
  return x->id < y->id ? -1 : x->id > y->id;
}

static int find_image(const od_reader *r, const char *id, size_t *out) {
  size_t lo = 0, hi = r->n_images;
  while (lo < hi) {
    size_t mid = (lo + hi) / 2;
    int c = strcmp(r->ids[r->id_order[mid]], id);
    if (c == 0) {
      *out = r->id_order[mid];
      return 1;
    }
    if (c < 0) lo = mid + 1;
    else hi = mid;
  }
  return 0;
}

static int load_index(od_reader *r, struct pb_error *err) {
  r->id_order = malloc((r->n_images ? r->n_images : 1) * sizeof *r->id_order);
  if (r->id_order == NULL) return pb_error_set(err, PB_ENOMEM, "out of memory");
  for (size_t i = 0; i < r->n_images; i++) r->id_order[i] = i;
  qsort_r(r->id_order, r->n_images, sizeof *r->id_order, cmp_ids, r->ids);
  char f[4400], q[8900], sql[9400];
  join(f, sizeof f, r->path, "index.parquet");
  pb__sql_quote(q, sizeof q, f);
  snprintf(sql, sizeof sql,
           "SELECT image_id, chunk_id, t, c, z, y, x, shape_t, shape_c, shape_z, shape_y, "
           "shape_x FROM read_parquet(%s)",
           q);
  duckdb_result res;
  if (duckdb_query(r->db.con, sql, &res) != DuckDBSuccess) {
    int rc = pb_error_set(err, PB_EFORMAT, "%s: %.*s", f, PB__DUCK_MSG(duckdb_result_error(&res)));
    duckdb_destroy_result(&res);
    return rc;
  }
  idx_t n = duckdb_row_count(&res);
  r->chunks = calloc(n ? n : 1, sizeof *r->chunks);
  if (r->chunks == NULL) {
    duckdb_destroy_result(&res);
    return pb_error_set(err, PB_ENOMEM, "out of memory");
  }
  r->n_chunks = n;
  int rc = PB_OK;
  for (idx_t j = 0; j < n && rc == PB_OK; j++) {
    od_chunk *ch = &r->chunks[j];
    char *s = duckdb_value_varchar(&res, 0, j);
    if (s == NULL || !find_image(r, s, &ch->image))
      rc = pb_error_set(err, PB_EFORMAT, "%s: row %llu names image '%s' that images.parquet lacks",
                        f, (unsigned long long)j, s ? s : "NULL");
    duckdb_free(s);
    if (rc != PB_OK) break;
    ch->id = duckdb_value_int64(&res, 1, j);
    const pb_image_meta *m = &r->images[ch->image].meta;
    for (int k = 0; k < PB_NDIM; k++) {
      ch->org[k] = duckdb_value_int64(&res, (idx_t)(2 + k), j);
      ch->shp[k] = duckdb_value_int64(&res, (idx_t)(7 + k), j);
      if (ch->org[k] < 0 || ch->shp[k] < 1 || ch->org[k] >= m->shape[k] ||
          ch->shp[k] > m->shape[k] - ch->org[k]) {
        rc = pb_error_set(err, PB_EFORMAT,
                          "%s: chunk %lld of image '%s': box on axis %c lies outside the image",
                          f, (long long)ch->id, m->id, "TCZYX"[k]);
        break;
      }
    }
  }
  duckdb_destroy_result(&res);
  if (rc != PB_OK) return rc;
  qsort(r->chunks, r->n_chunks, sizeof *r->chunks, cmp_chunks);
  for (size_t j = 0; j < r->n_chunks; j++) {
    od_image *im = &r->images[r->chunks[j].image];
    if (im->n == 0) im->first = j;
    im->n++;
  }
  return PB_OK;
}

typedef struct od_idrow {
  int64_t id, row;
} od_idrow;

static int cmp_idrow(const void *a, const void *b) {
  const od_idrow *x = a, *y = b;
  return x->id < y->id ? -1 : x->id > y->id;
}

/* Sets up direct page reads of pixel_bytes: the file row of every chunk id (read from the
 * chunk_id column by the same reader) and the column's layout. Leaves r->px NULL (DuckDB reads
 * everything) when anything is off. */
static void direct_open(od_reader *r) {
  if (r->ro.page_reader == 0 || r->n_chunks == 0) return;
  const char *leaves[2] = {"pixel_bytes", "chunk_id"};
  pb__pq_col *cols[2];
  int in_file[2];
  struct pb_error e;
  if (pb__pq_open_many(r->chunks_path, leaves, 2, r->ro.map == 1, cols,
                       in_file, &e) != PB_OK) return;
  pb__pq_rows q;
  memset(&q, 0, sizeof q);
  od_idrow *ir = NULL;
  int ok = cols[0] != NULL && cols[1] != NULL &&
           pb__pq_physical(cols[0]) == PB__PQ_BYTE_ARRAY &&
           pb__pq_physical(cols[1]) == PB__PQ_INT64 &&
           pb__pq_row_count(cols[0]) == pb__pq_row_count(cols[1]) &&
           pb__pq_read_all(cols[1], &q, &e) == PB_OK && q.n_rows == q.n_vals &&
           q.n_elems == q.n_rows;
  size_t n = q.n_rows;
  if (ok) ok = (ir = malloc((n ? n : 1) * sizeof *ir)) != NULL;
  for (size_t k = 0; k < n && ok; k++) {
    ok = q.elem_nulls[k] == 0;
    memcpy(&ir[k].id, q.data + k * 8, 8);
    ir[k].row = (int64_t)k;
  }
  pb__pq_rows_destroy(&q);
  pb__pq_free(cols[1]);
  if (ok) qsort(ir, n, sizeof *ir, cmp_idrow);
  for (size_t k = 1; k < n && ok; k++) ok = ir[k].id != ir[k - 1].id; /* ids must be unique */
  for (size_t j = 0; j < r->n_chunks && ok; j++) {
    size_t lo = 0, hi = n;
    while (lo < hi) {
      size_t mid = lo + (hi - lo) / 2;
      if (ir[mid].id < r->chunks[j].id) lo = mid + 1;
      else hi = mid;
    }
    ok = lo < n && ir[lo].id == r->chunks[j].id;
    r->chunks[j].row = ok ? ir[lo].row : -1;
  }
  free(ir);
  if (ok) r->px = cols[0];
  else pb__pq_free(cols[0]);
}

static int od_open(const char *path, const pb_read_options *opts, void **state,
                   struct pb_error *err) {
  od_reader *r = calloc(1, sizeof *r);
  if (r == NULL) return pb_error_set(err, PB_ENOMEM, "out of memory");
  r->ro = *opts;
  snprintf(r->path, sizeof r->path, "%s", path);
  char f[4400];
  int rc;
  /* DuckDB and the reads below open these files; a FIFO among them would block that open. */
  static const char *const members[] = {OD_MANIFEST, "images.parquet", "index.parquet",
                                        "chunks.parquet"};
  for (size_t k = 0; k < sizeof members / sizeof members[0]; k++) {
    join(f, sizeof f, path, members[k]);
    rc = pb__check_file_kind(f, 0, "a file of an oa-dataset", err);
    if (rc == PB_ENOTFOUND)
      rc = pb_error_set(err, PB_EFORMAT, "%s: missing (an oa-dataset folder holds %s, "
                        "images.parquet, index.parquet and chunks.parquet)", f, OD_MANIFEST);
    if (rc == PB_OK) rc = pb__entry_inside(path, members[k], "the dataset folder", err);
    if (rc != PB_OK) goto fail;
  }
  join(f, sizeof f, path, OD_MANIFEST);
  cJSON *man = NULL;
  void *text = NULL;
  size_t text_n = 0;
  rc = pb__io_read_file(f, &r->ro, PB__META_MAX_BYTES, &text, &text_n, err);
  if (rc != PB_OK) goto fail; /* unreadable or too large */
  rc = pb__json_parse(text, text_n, f, &man, err);
  pb_free(text, text_n);
  if (rc != PB_OK) goto fail; /* not JSON, or more than one value */
  cJSON *ty = man ? cJSON_GetObjectItem(man, "type") : NULL;
  cJSON *lay = man ? cJSON_GetObjectItem(man, "layout") : NULL;
  int ok = man != NULL && cJSON_IsString(ty) && strcmp(ty->valuestring, "ome.arrow") == 0 &&
           cJSON_IsString(lay) && strcmp(lay->valuestring, "typed-chunk-dataset") == 0;
  cJSON_Delete(man);
  if (!ok) {
    rc = pb_error_set(err, PB_EFORMAT,
                      "%s: not valid JSON with type \"ome.arrow\" and layout "
                      "\"typed-chunk-dataset\"",
                      f);
    goto fail;
  }
  char pq[3][4400];
  const char *pqs[3] = {pq[0], pq[1], pq[2]};
  for (size_t k = 0; k < 3; k++) join(pq[k], sizeof pq[k], path, members[k + 1]);
  if ((rc = pb__ome_arrow_db_open_reader(&r->db, NULL, pqs, 3, err)) != PB_OK) goto fail;
  if ((rc = load_images(r, err)) != PB_OK) goto fail;
  if ((rc = load_index(r, err)) != PB_OK) goto fail;
  join(r->chunks_path, sizeof r->chunks_path, path, "chunks.parquet");
  char q[8900], sql[9200];
  pb__sql_quote(q, sizeof q, r->chunks_path);
  /* A range on chunk_id: row-group statistics let DuckDB skip every other row group. */
  snprintf(sql, sizeof sql,
           "SELECT chunk_id, pixel_bytes FROM read_parquet(%s) WHERE chunk_id BETWEEN $1 AND $2",
           q);
  if (duckdb_prepare(r->db.con, sql, &r->st) != DuckDBSuccess) {
    rc = pb_error_set(err, PB_EFORMAT, "%s: %.*s", r->chunks_path,
                      PB__DUCK_MSG(duckdb_prepare_error(r->st)));
    goto fail;
  }
  /* Read-ahead window: about a quarter of the cache, in chunks of the average raw size. */
  size_t cache_limit = r->ro.cache_mb >= 0 ? (size_t)r->ro.cache_mb << 20
                                            : pb__pq_cache_budget((size_t)OD_CACHE_DEFAULT_MB << 20);
  if (pb__pq_cache_init(&r->cache, OD_MAX_BLOCKS, cache_limit) != PB_OK) {
    rc = pb_error_set(err, PB_ENOMEM, "out of memory");
    goto fail;
  }
  double total = 0;
  for (size_t j = 0; j < r->n_chunks; j++) {
    double v = (double)pb_dtype_size(r->images[r->chunks[j].image].meta.dtype);
    for (int k = 0; k < PB_NDIM; k++) v *= (double)r->chunks[j].shp[k];
    total += v;
  }
  double avg = r->n_chunks > 0 ? total / (double)r->n_chunks : 1.0;
  double w = (double)(cache_limit / 4) / (avg > 1.0 ? avg : 1.0);
  r->window = w < 1.0 ? 1 : (w > 65536.0 ? 65536 : (size_t)w);
  direct_open(r);
  *state = r;
  return PB_OK;
fail:
  od_close(r);
  return rc;
}

static int64_t od_count(void *state) { return (int64_t)((od_reader *)state)->n_images; }

static int od_meta(void *state, int64_t i, pb_image_meta *out, struct pb_error *err) {
  (void)err;
  *out = ((od_reader *)state)->images[i].meta;
  return PB_OK;
}

static int od_shape(void *state, int64_t i, pb_dtype *dtype, int64_t shape[PB_NDIM],
                    struct pb_error *err) {
  (void)err;
  const pb_image_meta *m = &((od_reader *)state)->images[i].meta;
  *dtype = m->dtype;
  memcpy(shape, m->shape, sizeof m->shape);
  return PB_OK;
}

static int64_t overlap(const od_chunk *ch, const pb_region *reg) {
  int64_t v = 1;
  for (int k = 0; k < PB_NDIM; k++) {
    int64_t lo = ch->org[k] > reg->start[k] ? ch->org[k] : reg->start[k];
    int64_t a = ch->org[k] + ch->shp[k], b = reg->start[k] + reg->count[k];
    int64_t hi = a < b ? a : b;
    if (hi <= lo) return 0;
    v *= hi - lo;
  }
  return v;
}

/* Fetches positions [a, b] of r->chunks with one query into block bl. */
static int od_block_load(od_reader *r, int64_t i, size_t a, size_t b, pb__pq_block *bl,
                         struct pb_error *err) {
  if (pb__pq_block_init(bl, (int64_t)a, (int64_t)b) != PB_OK)
    return pb_error_set(err, PB_ENOMEM, "out of memory");
  duckdb_bind_int64(r->st, 1, r->chunks[a].id);
  duckdb_bind_int64(r->st, 2, r->chunks[b].id);
  duckdb_result res;
  if (pb__ome_arrow_execute_streaming(r->st, &res) != DuckDBSuccess) {
    int rc = pb_error_set(err, PB_EDUCKDB, "%s: image %lld, chunks %lld..%lld: %.*s",
                          r->chunks_path, (long long)i, (long long)r->chunks[a].id,
                          (long long)r->chunks[b].id, PB__DUCK_MSG(duckdb_result_error(&res)));
    duckdb_destroy_result(&res);
    pb__pq_block_free(bl);
    return rc;
  }
  int rc = PB_OK;
  duckdb_data_chunk dc;
  while ((dc = duckdb_fetch_chunk(res)) != NULL) {
    int32_t d;
    if (pb__pq_block_push(bl, dc, &d) != PB_OK) {
      rc = pb_error_set(err, PB_ENOMEM, "out of memory");
      break;
    }
    idx_t n = duckdb_data_chunk_get_size(dc);
    duckdb_vector vid = duckdb_data_chunk_get_vector(dc, 0), vpx = duckdb_data_chunk_get_vector(dc, 1);
    for (idx_t row = 0; row < n; row++) {
      int64_t id = pb__ome_arrow_get_int(vid, row, -1);
      size_t lo = a, hi = b + 1; /* positions are sorted by chunk_id */
      while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (r->chunks[mid].id < id) lo = mid + 1;
        else hi = mid;
      }
      if (lo > b || r->chunks[lo].id != id) continue;
      bl->chunk_of[lo - a] = d;
      bl->row_of[lo - a] = (int32_t)row;
      size_t len = 0;
      pb__ome_arrow_get_blob(vpx, row, &len);
      bl->bytes += len + 64;
    }
  }
  if (rc == PB_OK && duckdb_result_error(&res) != NULL)
    rc = pb_error_set(err, PB_EDUCKDB, "%s: image %lld: %.*s", r->chunks_path, (long long)i,
                      PB__DUCK_MSG(duckdb_result_error(&res)));
  duckdb_destroy_result(&res);
  if (rc != PB_OK) pb__pq_block_free(bl);
  return rc;
}

/* The cached block holding position j, loaded when missing (least recently used blocks over
 * the cache limit go first). */
static int od_block_get(od_reader *r, int64_t i, size_t j, pb__pq_block **out,
                        struct pb_error *err) {
  *out = pb__pq_cache_find(&r->cache, (int64_t)j);
  if (*out != NULL) return PB_OK;
  size_t a = j - j % r->window, b = a + r->window - 1;
  if (b >= r->n_chunks) b = r->n_chunks - 1;
  pb__pq_block nb;
  PB_RETURN_NOT_OK(od_block_load(r, i, a, b, &nb, err));
  *out = pb__pq_cache_add(&r->cache, &nb);
  return PB_OK;
}

/* Chunk j's stored bytes through DuckDB: the cached block that holds it. */
static int od_chunk_duck(od_reader *r, int64_t i, size_t j, const unsigned char **p,
                         size_t *len, struct pb_error *err) {
  pb__pq_block *bl = NULL;
  PB_RETURN_NOT_OK(od_block_get(r, i, j, &bl, err));
  int32_t d = bl->chunk_of[j - (size_t)bl->first];
  if (d < 0)
    return pb_error_set(err, PB_EFORMAT, "%s: image %lld ('%s'): chunk %lld is missing",
                        r->chunks_path, (long long)i, r->images[i].meta.id,
                        (long long)r->chunks[j].id);
  *p = (const unsigned char *)pb__ome_arrow_get_blob(duckdb_data_chunk_get_vector(bl->chunks[d], 1),
                                              (idx_t)bl->row_of[j - (size_t)bl->first], len);
  return PB_OK;
}

/* Chunk j's stored bytes through the direct page reader (NULL when the row is not one value).
 * into (may be NULL): where the bytes may be read to when they are exactly into_n bytes. */
static int od_chunk_direct(od_reader *r, int64_t i, size_t j, void *into, size_t into_n,
                           const unsigned char **p, size_t *len, struct pb_error *err) {
  const od_chunk *ch = &r->chunks[j];
  pb__pq_rows_clear(&r->rows);
  r->rows.may_borrow = 1; /* the bytes are placed before the next read */
  r->rows.into = into;
  r->rows.into_n = into_n;
  int rc = pb__pq_read(r->px, ch->row, 1, &r->rows, err);
  r->rows.into = NULL;
  if (rc != PB_OK) {
    pb_error_prefix(err, "%s: image %lld ('%s'), chunk %lld (row %lld): ", r->chunks_path,
                    (long long)i, r->images[i].meta.id, (long long)ch->id, (long long)ch->row);
    return rc;
  }
  const pb__pq_rows *q = &r->rows;
  *p = NULL;
  *len = 0;
  if (q->n_rows == 1 && q->n_elems == 1 && q->n_vals == 1 && q->elem_nulls[0] == 0) {
    *p = pb__pq_rows_data(q) + q->val_off[0];
    *len = q->val_off[1] - q->val_off[0];
  }
  return PB_OK;
}

/* Places image i's chunks that meet the region (checked by the caller), their bytes taken
 * directly from the pages or through DuckDB. */
static int od_read_chunks(od_reader *r, int64_t i, const pb_region *region, int64_t need,
                          void *dst, int direct, pb_stage_times *times, struct pb_error *err) {
  const od_image *im = &r->images[i];
  size_t es = pb_dtype_size(im->meta.dtype);
  int64_t covered = 0;
  for (size_t j = im->first; j < im->first + im->n; j++) {
    const od_chunk *ch = &r->chunks[j];
    int64_t vol = overlap(ch, region);
    if (vol == 0) continue;
    int64_t t0 = pb_now_ns();
    const unsigned char *p = NULL;
    size_t len = 0, want = es;
    for (int k = 0; k < PB_NDIM; k++) want *= (size_t)ch->shp[k];
    /* the chunk is the region: its bytes, as they are, may be read into dst */
    int whole = vol == need && (int64_t)(want / es) == need;
    int rc = direct ? od_chunk_direct(r, i, j, whole ? dst : NULL, want, &p, &len, err)
                    : od_chunk_duck(r, i, j, &p, &len, err);
    if (times) times->read_ns += pb_now_ns() - t0;
    if (rc != PB_OK) return rc;
    int64_t t1 = pb_now_ns();
    if (p == NULL || len != want)
      return pb_error_set(err, PB_EFORMAT,
                          "%s: image %lld ('%s'), chunk %lld: pixel_bytes holds %zu bytes, its "
                          "shape needs %zu",
                          r->chunks_path, (long long)i, im->meta.id, (long long)ch->id,
                          p ? len : 0, want);
    if (times) times->bytes_read += (int64_t)len;
    if (p != dst) pb__copy_box(dst, region->start, region->count, p, ch->org, ch->shp, es);
    covered += vol;
    if (times) times->decode_ns += pb_now_ns() - t1;
  }
  if (covered != need)
    return pb_error_set(err, PB_EFORMAT,
                        "%s: image %lld ('%s'): chunks cover %lld of the %lld pixels asked for",
                        r->path, (long long)i, im->meta.id, (long long)covered, (long long)need);
  if (times) times->bytes_decoded += need * (int64_t)es;
  return PB_OK;
}

static int od_read(void *state, int64_t i, const pb_region *region, void *dst, size_t dst_size,
                   pb_stage_times *times, struct pb_error *err) {
  od_reader *r = state;
  (void)dst_size; /* i, region and dst_size: checked by format.c */
  const od_image *im = &r->images[i];
  pb_region full;
  if (region == NULL) {
    pb__region_full(&full, im->meta.shape);
    region = &full;
  }
  int64_t need = 1;
  for (int k = 0; k < PB_NDIM; k++) need *= region->count[k];
  if (r->px == NULL) return od_read_chunks(r, i, region, need, dst, 0, times, err);
  struct pb_error fe;
  fe.message[0] = '\0';
  int rc = od_read_chunks(r, i, region, need, dst, 1, times, &fe);
  if (rc == PB_OK) {
    pb__ome_arrow_direct_note(1);
    return PB_OK;
  }
  /* DuckDB decides; when it fails too, the direct path's error is the more precise one. */
  pb__ome_arrow_direct_note(0);
  if (od_read_chunks(r, i, region, need, dst, 0, times, err) == PB_OK) return PB_OK;
  if (err != NULL) *err = fe;
  return rc;
}

static int od_probe(const char *path) {
  char f[4400];
  struct stat st;
  if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode)) return 0;
  if (join(f, sizeof f, path, OD_MANIFEST) != PB_OK) return 0;
  return stat(f, &st) == 0 && S_ISREG(st.st_mode) && access(f, R_OK) == 0 ? 95 : 0;
}

static const char *const od_options[] = {"chunks_per_row_group=1..2048", NULL};

const pb_format_vtable pb__format_oa_dataset = {
    .info = {"oa-dataset",
             "OME-Arrow typed-chunk dataset directory (images/chunks/index Parquet files)", 1, 1},
    .probe = od_probe,
    .open = od_open,
    .close = od_close,
    .count = od_count,
    .meta = od_meta,
    .shape = od_shape,
    .read = od_read,
    .writer_open = od_writer_open,
    .writer_add = od_writer_add,
    .writer_finish = od_writer_finish,
    .writer_free = od_writer_free,
    .write_options = od_options,
};
