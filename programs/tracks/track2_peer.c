/* Track 2's torch DataLoader peer: the same files, batch sizes and workers read by
 * torch.utils.data.DataLoader (python/pipebench_peer.py), as extra rows of track 2's table. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pipebench/sys.h"
#include "pipebench/results.h"
#include "tools/peer.h"
#include "tracks/track2.h"

static double find_pipebench_sps(const pb_table *t, const char *format, const char *cache, int64_t bs,
                                 int64_t w, int64_t repeat) {
  long cf = pb_table_col_index(t, PB__COL_FORMAT), cc = pb_table_col_index(t, T2_CACHE);
  long cb = pb_table_col_index(t, T2_BATCH_SIZE), cw = pb_table_col_index(t, T2_NUM_WORKERS);
  long cr = pb_table_col_index(t, PB__COL_REPEAT), cs = pb_table_col_index(t, T2_SAMPLES_PER_SEC);
  long cl = pb_table_col_index(t, T2_LOADER);
  if (cf < 0 || cc < 0 || cb < 0 || cw < 0 || cr < 0 || cs < 0) return NAN;
  for (size_t r = 0; r < pb_table_rows(t); r++) {
    if (cl < 0 || pb_table_is_null(t, r, (size_t)cl) ||
        strcmp(pb_table_get_str(t, r, (size_t)cl), "pipebench") != 0)
      continue;
    if (strcmp(pb_table_get_str(t, r, (size_t)cf), format) != 0) continue;
    if (strcmp(pb_table_get_str(t, r, (size_t)cc), cache) != 0) continue;
    if (pb_table_get_i64(t, r, (size_t)cb) != bs || pb_table_get_i64(t, r, (size_t)cw) != w) continue;
    if (pb_table_get_i64(t, r, (size_t)cr) != repeat) continue;
    return pb_table_get_f64(t, r, (size_t)cs);
  }
  return NAN;
}

static int run_peer(pb_run_ctx *c, pb_table *t, int fi, const char *cache, const int *bss, int nb,
                    const int *ws, int nw, struct pb_error *err) {
  char cfg_path[4200], res_path[4200], err_path[4200], script[4200];
  snprintf(cfg_path, sizeof cfg_path, "%s/data/.peer-%s-%s.json", c->p.out, c->formats[fi], cache);
  snprintf(res_path, sizeof res_path, "%s/data/.peer-%s-%s.result.json", c->p.out, c->formats[fi], cache);
  snprintf(err_path, sizeof err_path, "%s/data/.peer-%s-%s.log", c->p.out, c->formats[fi], cache);
  snprintf(script, sizeof script, "%s/pipebench_peer.py", pb__python_dir());
  cJSON *cfg = cJSON_CreateObject();
  cJSON_AddStringToObject(cfg, "format", c->formats[fi]);
  cJSON_AddStringToObject(cfg, "path", c->paths[fi]);
  cJSON_AddStringToObject(cfg, "cache", cache);
  cJSON *b = cJSON_AddArrayToObject(cfg, "batch_sizes");
  for (int i = 0; i < nb; i++) cJSON_AddItemToArray(b, cJSON_CreateNumber(bss[i]));
  cJSON *w = cJSON_AddArrayToObject(cfg, "workers");
  for (int i = 0; i < nw; i++) cJSON_AddItemToArray(w, cJSON_CreateNumber(ws[i]));
  cJSON_AddNumberToObject(cfg, "batches", c->p.batches);
  cJSON_AddNumberToObject(cfg, "window_ms", c->p.window_ms);
  cJSON_AddNumberToObject(cfg, "repeats", c->p.repeats);
  char *text = cJSON_Print(cfg);
  cJSON_Delete(cfg);
  /* atomic: a link planted at the name is replaced, never written through */
  int rc = text ? pb_write_file_atomic(cfg_path, text, strlen(text), err) : PB_ENOMEM;
  free(text);
  if (rc != PB_OK) return rc;
  unlink(res_path);
  char *argv[] = {(char *)c->p.python, script, cfg_path, res_path, NULL};
  rc = pb__run_child(argv, 1800.0, err_path, err);
  if (rc != PB_OK) return rc;
  cJSON *res = pb_load_json(res_path, err);
  if (res == NULL) return PB_EFORMAT;
  const cJSON *rows = cJSON_GetObjectItem(res, "rows"), *row;
  const cJSON *vers = cJSON_GetObjectItem(res, "versions");
  const cJSON *torch_v = cJSON_GetObjectItem(vers, "torch");
  double preload_s = cJSON_GetNumberValue(cJSON_GetObjectItem(res, "preload_s"));
  double *lat = NULL;
  size_t cap = 0;
  cJSON_ArrayForEach(row, rows) {
    const cJSON *bl = cJSON_GetObjectItem(row, "batch_s");
    size_t n = (size_t)cJSON_GetArraySize(bl);
    if (n > cap) {
      free(lat);
      cap = n;
      lat = calloc(cap, sizeof *lat);
      if (lat == NULL) {
        cJSON_Delete(res);
        return pb_error_set(err, PB_ENOMEM, "out of memory");
      }
    }
    size_t k = 0;
    double total = 0;
    const cJSON *v;
    cJSON_ArrayForEach(v, bl) total += (lat[k++] = v->valuedouble);
    pb_summary s;
    if (pb_summarize(lat, n, &s) != PB_OK) continue;
    int64_t bs = (int64_t)cJSON_GetNumberValue(cJSON_GetObjectItem(row, "batch_size"));
    int64_t wk = (int64_t)cJSON_GetNumberValue(cJSON_GetObjectItem(row, "workers"));
    int64_t rep = (int64_t)cJSON_GetNumberValue(cJSON_GetObjectItem(row, "repeat"));
    double samples = cJSON_GetNumberValue(cJSON_GetObjectItem(row, "samples"));
    pb__row_common(c, t, c->formats[fi], (int)rep);
    const cJSON *ln = cJSON_GetObjectItem(row, "loader"); /* image folders: PIL or decode_jpeg */
    pb_table_set_str(t, T2_LOADER, cJSON_IsString(ln) ? ln->valuestring : "torch-dataloader");
    pb_table_set_str(t, T2_DECODE, "cpu"); /* the DataLoader's worker processes */
    pb_table_set_str(t, "peer_version", cJSON_IsString(torch_v) ? torch_v->valuestring : "");
    pb_table_set_str(t, T2_CACHE, cache);
    pb_table_set_i64(t, T2_BATCH_SIZE, bs);
    pb_table_set_i64(t, T2_NUM_WORKERS, wk);
    pb_table_set_str(t, "transform", "normalize");
    pb_table_set_f64(t, T2_FIRST_BATCH_TIME, cJSON_GetNumberValue(cJSON_GetObjectItem(row, "first_batch_s")));
    pb_table_set_i64(t, "num_batches", (int64_t)n);
    pb__add_summary_columns(t, &s, T2_SUMMARY_PREFIX);
    double sps = total > 0 ? samples / total : NAN;
    pb_table_set_f64(t, T2_SAMPLES_PER_SEC, sps);
    pb_table_set_f64(t, "preload_s", preload_s);
    double mine = find_pipebench_sps(t, c->formats[fi], cache, bs, wk, rep);
    pb_table_set_f64(t, T2_OVER_PEER, mine / sps);
  }
  free(lat);
  cJSON_Delete(res);
  unlink(cfg_path);
  unlink(res_path);
  unlink(err_path);
  return PB_OK;
}

int pb__track2_peer(pb_run_ctx *c, pb_table *t, const int *bss, int nb, const int *ws, int nw,
                    struct pb_error *err) {
  int rc = PB_OK;
  for (int fi = 0; fi < c->nf && rc == PB_OK; fi++) {
    if (strcmp(c->formats[fi], "tiff") != 0 && strcmp(c->formats[fi], "ome-zarr") != 0 &&
        strcmp(c->formats[fi], "imagefolder") != 0)
      continue;
    if (c->crop[fi] > 0) { /* the peer stacks images as they are: it needs one size */
      pb__run_report(c, "track 2 peer: %s: images of different sizes; the torch DataLoader peer "
                        "reads one size only and is left out", c->formats[fi]);
      continue;
    }
    static const char *const caches[] = {"none", "preload"};
    for (int k = 0; k < 2 && rc == PB_OK; k++) {
      if (!pb__list_has(c->p.caches, caches[k])) continue;
      char what[128];
      snprintf(what, sizeof what, "track 2 peer: torch DataLoader over %s, cache=%s", c->formats[fi], caches[k]);
      if (c->p.progress != NULL) c->p.progress(c->p.progress_ctx, what, c->step, c->total_steps);
      /* The preloaded peer reads from a numpy array whatever the format: one configuration
       * (batch 16, 2 workers) is enough to compare with pipebench's preload cache. */
      static const int ref_bs[] = {16}, ref_w[] = {2};
      if (k == 1) rc = run_peer(c, t, fi, caches[k], ref_bs, 1, ref_w, 1, err);
      else rc = run_peer(c, t, fi, caches[k], bss, nb, ws, nw, err);
      if (rc != PB_OK) pb_error_prefix(err, "track 2 peer (%s): ", c->formats[fi]);
    }
  }
  return rc;
}
