/* The direct page reader (PB_OA_DIRECT on) returns exactly what DuckDB returns
 * (PB_OA_DIRECT=0), byte for byte, for ome-parquet (all three layouts: planes, numeric chunks
 * and byte chunks; files carrying both planes and chunks; the OME-Arrow column under another
 * name beside other columns) and oa-dataset, every Parquet codec, several dtypes, multi-channel
 * Z stacks, edge chunks, several rows per row group, whole images and crops, with the file
 * mapped (PB_OA_MMAP=1) and pages read with pread (the default); and it really served the
 * reads (no silent fallback). For ome-parquet the metadata too (id, name, pixels_meta with
 * physical sizes, units and channels), read from its leaves at open: the same as DuckDB's. */
#include <duckdb.h>
#include <stdint.h>

#include "arrow_test_util.h"
#include "formats/arrow/oa_pq.h"

static const int64_t SHAPE[PB_NDIM] = {1, 2, 3, 24, 20};
enum { N_IMAGES = 11 };

static void write_set(const char *path, const char *format, pb_dtype dtype, const char *comp,
                      const char *opt, int chunked) {
  struct pb_error err = {{0}};
  pb_write_params p = PB_WRITE_PARAMS_DEFAULTS;
  p.compression = comp;
  p.options = opt;
  if (chunked) { /* partial chunks on Z, Y and X */
    p.chunk[0] = p.chunk[1] = 1;
    p.chunk[2] = 2;
    p.chunk[3] = p.chunk[4] = 16;
  }
  pb_writer *w = NULL;
  CHECK_OK(pb_writer_new(path, format, &p, &w, &err), &err);
  pb_image_meta m;
  pb_image_meta_init(&m, "direct", dtype, SHAPE);
  void *px = malloc(pb_image_bytes(&m));
  for (int i = 0; i < N_IMAGES; i++) {
    snprintf(m.name, sizeof m.name, "img%d", i);
    snprintf(m.id, sizeof m.id, "id%d", i);
    /* metadata that changes every few images, so that both readers keep several runs */
    m.physical_size[0] = 0.25 * (i / 3 + 1);
    m.physical_size[2] = i % 2 ? 1.5 : 0;
    snprintf(m.physical_unit[0], sizeof m.physical_unit[0], "%s", i % 4 ? "µm" : "");
    m.n_channels = 2;
    for (int c = 0; c < 2; c++) {
      pb_channel *ch = &m.channels[c];
      snprintf(ch->id, sizeof ch->id, "Channel:%d:%d", i / 5, c);
      snprintf(ch->name, sizeof ch->name, "%s", c ? "GFP" : "DAPI");
      ch->emission_um = c ? 0.509f : 0.461f;
      ch->excitation_um = i % 3 ? 0.488f : 0;
      snprintf(ch->illumination, sizeof ch->illumination, "%s", c ? "Epifluorescence" : "");
      ch->color_rgba = c ? 0x00FF00FFu : (uint32_t)(0x0000FF00u + (unsigned)i / 4);
    }
    fill_pixels(&m, px, (unsigned)i + 1);
    CHECK_OK(pb_writer_add(w, &m, px, &err), &err);
  }
  CHECK_OK(pb_writer_finish(w, &err), &err);
  pb_writer_free(w);
  free(px);
}

/* mode 0: DuckDB; 1: direct, file mapped; 2: direct, pages read with pread. */
static pb_dataset *open_with(const char *path, const char *format, int mode) {
  struct pb_error err = {{0}};
  if (mode > 0) unsetenv("PB_OA_DIRECT");
  else setenv("PB_OA_DIRECT", "0", 1);
  setenv("PB_OA_MMAP", mode == 2 ? "0" : "1", 1);
  pb_dataset *ds = NULL;
  CHECK_OK(pb_dataset_open(path, format, &ds, &err), &err);
  unsetenv("PB_OA_DIRECT");
  unsetenv("PB_OA_MMAP");
  return ds;
}

/* Reads every image whole and in three crops both ways; returns the number of direct reads. */
static int64_t compare(const char *path, const char *format, pb_dtype dtype) {
  struct pb_error err = {{0}};
  pb__ome_arrow_direct_reset();
  pb_dataset *fast = open_with(path, format, 1), *slow = open_with(path, format, 0);
  pb_dataset *pr = open_with(path, format, 2);
  /* ome-parquet: both direct opens read the metadata leaves themselves */
  if (strcmp(format, "ome-parquet") == 0 && pb__ome_arrow_direct_meta_count() != 2) {
    fprintf(stderr, "%s: %lld of 2 direct opens read the metadata leaves\n", path,
            (long long)pb__ome_arrow_direct_meta_count());
    exit(1);
  }
  CHECK_EQ(pb_dataset_count(fast), N_IMAGES);
  pb_image_meta m;
  pb_image_meta_init(&m, "direct", dtype, SHAPE);
  size_t nb = pb_image_bytes(&m);
  unsigned char *a = malloc(nb), *b = malloc(nb), *p = malloc(nb), *want = malloc(nb);
  static const pb_region crops[3] = {
      {{0, 0, 0, 0, 0}, {1, 2, 3, 24, 20}},
      {{0, 1, 1, 5, 3}, {1, 1, 2, 13, 15}},
      {{0, 0, 2, 17, 16}, {1, 2, 1, 7, 4}},
  };
  /* the metadata: the same images, field for field, from both readers */
  for (int i = 0; i < N_IMAGES; i++) {
    pb_image_meta x, y, z;
    memset(&x, 0, sizeof x);
    memset(&y, 0, sizeof y);
    memset(&z, 0, sizeof z);
    CHECK_OK(pb_dataset_meta(fast, i, &x, &err), &err);
    CHECK_OK(pb_dataset_meta(slow, i, &y, &err), &err);
    CHECK_OK(pb_dataset_meta(pr, i, &z, &err), &err);
    if (memcmp(&x, &y, sizeof x) != 0 || memcmp(&z, &y, sizeof z) != 0 ||
        (strcmp(format, "ome-parquet") == 0 &&
         (x.n_channels != 2 || strcmp(x.channels[1].illumination, "Epifluorescence") != 0))) {
      fprintf(stderr, "%s (%s): image %d: metadata differs between direct and DuckDB reads\n",
              path, format, i);
      exit(1);
    }
  }
  pb__ome_arrow_direct_reset();
  int64_t reads = 0;
  for (int pass = 0; pass < 2; pass++) /* forward, then backward: other page-cache states */
    for (int k = 0; k < N_IMAGES; k++) {
      int i = pass == 0 ? k : N_IMAGES - 1 - k;
      memset(a, 0xAB, nb);
      memset(b, 0xCD, nb);
      memset(p, 0xEF, nb);
      CHECK_OK(pb_dataset_read(fast, i, a, nb, NULL, &err), &err);
      CHECK_OK(pb_dataset_read(slow, i, b, nb, NULL, &err), &err);
      CHECK_OK(pb_dataset_read(pr, i, p, nb, NULL, &err), &err);
      reads += 2;
      fill_pixels(&m, want, (unsigned)i + 1);
      if (memcmp(a, b, nb) != 0 || memcmp(a, want, nb) != 0 || memcmp(p, want, nb) != 0) {
        fprintf(stderr, "%s (%s): image %d differs between direct and DuckDB reads\n", path,
                format, i);
        exit(1);
      }
      for (int c = 0; c < 3; c++) {
        size_t n = pb_dtype_size(dtype);
        for (int d = 0; d < PB_NDIM; d++) n *= (size_t)crops[c].count[d];
        memset(a, 0xAB, n);
        memset(b, 0xCD, n);
        memset(p, 0xEF, n);
        CHECK_OK(pb_dataset_read_region(fast, i, &crops[c], a, n, NULL, &err), &err);
        CHECK_OK(pb_dataset_read_region(slow, i, &crops[c], b, n, NULL, &err), &err);
        CHECK_OK(pb_dataset_read_region(pr, i, &crops[c], p, n, NULL, &err), &err);
        reads += 2;
        if (memcmp(a, b, n) != 0 || memcmp(p, b, n) != 0) {
          fprintf(stderr, "%s (%s): image %d crop %d differs\n", path, format, i, c);
          exit(1);
        }
      }
    }
  int64_t served, fell;
  pb__ome_arrow_direct_stats(&served, &fell);
  if (served != reads || fell != 0) {
    fprintf(stderr, "%s (%s): direct path served %lld of %lld reads, %lld fell back to DuckDB\n",
            path, format, (long long)served, (long long)reads, (long long)fell);
    exit(1);
  }
  free(a);
  free(b);
  free(p);
  free(want);
  pb_dataset_free(pr);
  pb_dataset_free(fast);
  pb_dataset_free(slow);
  return served;
}

/* Which codec x dtype pairs the two matrices below skip: the extra dtypes are read once,
 * uncompressed. Under the sanitizers each codec is read with one dtype only: the page decoder's
 * path per dtype does not depend on the codec, and the whole matrix cost 80 s of CI's time there
 * (the plain build still reads all of it). */
#ifdef PB_TEST_SANITIZED
#define SKIP_PAIR(c, d) ((c) > 0 && ((d) >= 3 || (d) != (c) % 3))
#else
#define SKIP_PAIR(c, d) ((c) > 0 && (d) >= 3)
#endif

int main(void) {
  char dir[256], path[512], opt[256];
  tmp_dir(dir, sizeof dir, "direct");
  static const char *const pq_codecs[] = {"uncompressed", "zstd", "snappy", "gzip", "lz4_raw"};
  static const pb_dtype dtypes[] = {PB_UINT8, PB_UINT16, PB_FLOAT32, PB_INT16, PB_UINT32,
                                    PB_FLOAT64};
  int sets = 0;
  for (size_t c = 0; c < 5; c++)
    for (size_t d = 0; d < 6; d++) {
      /* planes, 4 rows per row group */
      if (SKIP_PAIR(c, d)) continue;
      snprintf(path, sizeof path, "%s/num_%s_%s.parquet", dir, pq_codecs[c],
               pb_dtype_name(dtypes[d]));
      snprintf(opt, sizeof opt, "layout=planes,parquet_codec=%s,row_group_rows=4", pq_codecs[c]);
      write_set(path, "ome-parquet", dtypes[d], NULL, opt, 0);
      compare(path, "ome-parquet", dtypes[d]);
      sets++;
    }
  for (size_t c = 0; c < 5; c++)
    for (size_t d = 0; d < 6; d++) {
      /* numeric chunks (the default layout) with edge chunks, 3 rows per row group */
      if (SKIP_PAIR(c, d)) continue;
      snprintf(path, sizeof path, "%s/chunks_%s_%s.parquet", dir, pq_codecs[c],
               pb_dtype_name(dtypes[d]));
      snprintf(opt, sizeof opt, "parquet_codec=%s,row_group_rows=3", pq_codecs[c]);
      write_set(path, "ome-parquet", dtypes[d], NULL, opt, 1);
      compare(path, "ome-parquet", dtypes[d]);
      sets++;
    }
  /* One chunk per plane through chunk_shape=, the whole image as one chunk, and a file whose
   * rows carry planes and chunks both under another column name beside other columns. */
  snprintf(path, sizeof path, "%s/chunks_zyx.parquet", dir);
  write_set(path, "ome-parquet", PB_UINT16, NULL, "layout=chunks,chunk_shape=3x24x20", 0);
  compare(path, "ome-parquet", PB_UINT16);
  snprintf(path, sizeof path, "%s/chunks_yx.parquet", dir);
  write_set(path, "ome-parquet", PB_UINT16, NULL, "chunk_shape=24x20,parquet_codec=zstd", 0);
  compare(path, "ome-parquet", PB_UINT16);
  sets += 2;
  {
    char pl[600], ck[600], q[2400];
    snprintf(pl, sizeof pl, "%s/both_planes.parquet", dir);
    snprintf(ck, sizeof ck, "%s/both_chunks.parquet", dir);
    write_set(pl, "ome-parquet", PB_UINT16, NULL, "layout=planes,row_group_rows=4", 0);
    write_set(ck, "ome-parquet", PB_UINT16, NULL, "layout=chunks,row_group_rows=4", 1);
    snprintf(path, sizeof path, "%s/both.parquet", dir);
    snprintf(q, sizeof q,
             "COPY (SELECT p.file_row_number * 10 AS sample, 'tag' || p.file_row_number AS "
             "label, struct_update(p.ome_arrow, chunk_grid := c.ome_arrow.chunk_grid, "
             "chunks := c.ome_arrow.chunks) AS image FROM read_parquet('%s', "
             "file_row_number = true) p JOIN read_parquet('%s', file_row_number = true) c "
             "USING (file_row_number) ORDER BY p.file_row_number) TO '%s' (FORMAT parquet, "
             "ROW_GROUP_SIZE 4)",
             pl, ck, path);
    duckdb_database db;
    duckdb_connection con;
    duckdb_result res;
    CHECK(duckdb_open(NULL, &db) == DuckDBSuccess && duckdb_connect(db, &con) == DuckDBSuccess);
    if (duckdb_query(con, q, &res) != DuckDBError) {
      duckdb_destroy_result(&res);
    } else {
      FAIL("%s: %s", q, duckdb_result_error(&res));
    }
    duckdb_disconnect(&con);
    duckdb_close(&db);
    compare(path, "ome-parquet", PB_UINT16);
    sets++;
  }
  static const char *const leaf[] = {"none", "zstd", "lz4"};
  for (size_t c = 0; c < 5; c++)
    for (size_t l = 0; l < 3; l++) {
      pb_dtype dt = dtypes[(c + l) % 3];
      snprintf(path, sizeof path, "%s/bytes_%s_%s.parquet", dir, pq_codecs[c], leaf[l]);
      snprintf(opt, sizeof opt, "layout=chunk-bytes,parquet_codec=%s,row_group_rows=3",
               pq_codecs[c]);
      write_set(path, "ome-parquet", dt, leaf[l], opt, 1);
      compare(path, "ome-parquet", dt);
      sets++;
    }
  static const char *const od_codecs[] = {"none", "zstd", "snappy", "gzip", "lz4"};
  for (size_t c = 0; c < 5; c++)
    for (int per = 1; per <= 5; per += 4) {
      pb_dtype dt = dtypes[c % 3];
      snprintf(path, sizeof path, "%s/od_%s_%d", dir, od_codecs[c], per);
      snprintf(opt, sizeof opt, "chunks_per_row_group=%d", per);
      write_set(path, "oa-dataset", dt, od_codecs[c], opt, 1);
      compare(path, "oa-dataset", dt);
      sets++;
    }
  printf("direct and DuckDB reads agree on %d datasets\n", sets);
  char cmd[600];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
  CHECK_EQ(system(cmd), 0);
  return 0;
}
