/* The table of tracks is complete and its schemas are the truth: every track has a schema, a
 * plot and a report section; a small run writes only columns its track declares; and the
 * plots and the report read only columns the track of each table declares. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ftw.h>
#include <sys/stat.h>
#include <unistd.h>

#include "pipebench/bench.h"
#include "pipebench/gen.h"
#include "pipebench/results.h"
#include "report/report_internal.h"
#include "tracks/tracks.h"

#include "check.h"

/* The fields of pb_run_params a track may name as its options. */
static const char *const known_options[] = {
    "repeats", "warmup", "samples", "batches", "window_ms", "batch_sizes", "workers", "caches",
    "transforms", "seed", "python", "library", "peer", "model", "steps", "t3_batch", "t3_workers",
    "emulate_ms", "train", "cold", "device", "dtype", "framework", "torch_model", "torch_compile",
    "reads_in_flight", "bytes_in_flight", NULL};

static int listed(const char *const *names, const char *s) {
  for (size_t i = 0; names != NULL && names[i] != NULL; i++)
    if (strcmp(names[i], s) == 0) return 1;
  return 0;
}

static void check_registry(void) {
  size_t n = pb__track_count();
  CHECK(n >= 1);
  EXPECT(n <= PB__RP_TRACKS);
  EXPECT(pb__track_at(n) == NULL);
  EXPECT(pb__track_find("no such track") == NULL);
  static const char *const common[] = {PB__COMMON_COLUMNS};
  for (size_t i = 0; i < n; i++) {
    const pb__track *t = pb__track_at(i);
    const pb__report_view *v = &t->view;
    CHECK(t != NULL && v->id != NULL && v->id[0] != '\0');
    fprintf(stderr, "track %s: %s\n", v->id, t->name ? t->name : "(no name)");
    EXPECT(pb__track_find(v->id) == t);
    EXPECT(t->name != NULL && t->name[0] != '\0');
    EXPECT(t->measure != NULL);
    EXPECT(v->title != NULL && v->title[0] != '\0');
    EXPECT(v->plot != NULL);
    EXPECT(v->section != NULL);
    CHECK(v->table != NULL && v->schema != NULL && v->schema[0] != NULL);
    CHECK(t->options != NULL && t->options[0] != NULL);
    for (size_t k = 0; t->options[k] != NULL; k++)
      if (!listed(known_options, t->options[k]))
        EXPECT_FAIL("track %s: option '%s' is no field of pb_run_params", v->id, t->options[k]);
    for (size_t j = 0; j < i; j++) {
      EXPECT(strcmp(pb__track_at(j)->view.id, v->id) != 0);
      EXPECT(strcmp(pb__track_at(j)->view.table, v->table) != 0);
    }
    /* the schema: the common columns first, no name twice */
    size_t nc = 0;
    while (v->schema[nc] != NULL) nc++;
    for (size_t k = 0; k < sizeof common / sizeof common[0]; k++)
      EXPECT(k < nc && strcmp(v->schema[k], common[k]) == 0);
    for (size_t a = 0; a < nc; a++)
      for (size_t b = a + 1; b < nc; b++)
        if (strcmp(v->schema[a], v->schema[b]) == 0)
          EXPECT_FAIL("track %s: column '%s' is in its schema twice", v->id, v->schema[a]);
    EXPECT(v->plot_needs != NULL && listed(v->schema, v->plot_needs));
    if (v->round_keys != NULL) {
      for (size_t k = 0; v->round_keys[k] != NULL; k++)
        if (!listed(v->schema, v->round_keys[k]))
          EXPECT_FAIL("track %s: round key '%s' is not in its schema", v->id, v->round_keys[k]);
      EXPECT(v->round_metric != NULL && listed(v->schema, v->round_metric));
      EXPECT(v->round_what != NULL);
    }
  }
}

/* The public list of tracks is the table; a run with no tracks named runs them all. */
static void check_public_list(void) {
  size_t n = 0;
  const char *name = NULL;
  for (const char *id; (id = pb_run_track(n, &name)) != NULL; n++) {
    EXPECT_STREQ(id, pb__track_at(n)->view.id);
    EXPECT_STREQ(name, pb__track_at(n)->name);
  }
  EXPECT_EQ(n, pb__track_count());
  EXPECT(pb_run_track(n, &name) == NULL && name == NULL);
  pb_run_params p = PB_RUN_PARAMS_DEFAULTS;
  EXPECT(p.tracks == NULL);
  p.repeats = 0; /* stops after the tracks are checked, before anything runs */
  struct pb_error e = {{0}};
  EXPECT_EQ(pb_run(&p, &e), PB_EINVAL);
  EXPECT_CONTAINS(e.message, "repeats");
}

/* ---- the watcher: every column a reader looks up must be in the table's track's schema ---- */

typedef struct watch {
  long lookups[PB__RP_TRACKS];
  int bad;
} watch;

static void on_lookup(void *ctx, const pb_table *t, const char *col) {
  watch *w = ctx;
  const char *id = pb_table_get_meta(t, "pipebench.track");
  const pb__track *tr = id != NULL ? pb__track_find(id) : NULL;
  if (tr == NULL) return; /* not a track's table (infer results) */
  for (size_t i = 0; i < pb__track_count(); i++)
    if (pb__track_at(i) == tr) w->lookups[i]++;
  if (!listed(tr->view.schema, col)) {
    if (w->bad < 20) fprintf(stderr, "track %s: a reader looks up column '%s', not in its schema\n", id, col);
    w->bad++;
  }
}

/* The watcher itself sees a column outside the schema. */
static void check_watcher(void) {
  pb_table *t = NULL;
  CHECK_OK(pb_table_new(&t), NULL);
  pb_table_set_meta(t, "pipebench.track", pb__track_at(0)->view.id);
  pb_table_append_row(t);
  pb_table_set_str(t, "format", "raw");
  watch w = {{0}, 0};
  pb__report_watch_columns(on_lookup, &w);
  (void)pb__report_median(t, "no column of any schema", NULL, 0, NULL);
  (void)pb__report_str(t, 0, "format");
  pb__report_watch_columns(NULL, NULL);
  EXPECT_EQ(w.bad, 1);
  EXPECT_EQ(w.lookups[0], 2);
  pb_table_free(t);
}

/* A track measuring may not write a column its schema lacks. */
static void check_writer_guard(const char *dir) {
  pb_run_ctx *c = calloc(1, sizeof *c);
  CHECK(c != NULL);
  snprintf(c->data_dir, sizeof c->data_dir, "%s", dir);
  c->p.out = dir;
  c->schema = pb__track_at(0)->view.schema;
  pb_table *t = NULL;
  CHECK_OK(pb_table_new(&t), NULL);
  pb_table_append_row(t);
  pb_table_set_str(t, "format", "raw");
  pb_table_set_f64(t, "not_declared", 1.0);
  struct pb_error e = {{0}};
  EXPECT_EQ(pb__write_table(c, t, "guard.parquet", &e), PB_ESTATE);
  EXPECT_CONTAINS(e.message, "not_declared");
  char path[4200];
  snprintf(path, sizeof path, "%s/data/guard.parquet", dir);
  EXPECT(access(path, F_OK) != 0);
  pb_table_free(t);
  free(c);
}

/* ---- a small run, and the report read back under the watcher ----------------------------- */

static const pb__track *track_of_table(const pb_table *t) {
  const char *id = pb_table_get_meta(t, "pipebench.track");
  return id != NULL ? pb__track_find(id) : NULL;
}

/* Every column of OUT/data/<table>.parquet is in the schema of the track that wrote it. */
static void check_written(const char *out, const pb__track *tr) {
  char path[4200];
  snprintf(path, sizeof path, "%s/data/%s.parquet", out, tr->view.table);
  pb_table *t = NULL;
  struct pb_error e = {{0}};
  CHECK_OK(pb_table_read(path, PB_SINK_PARQUET, &t, &e), &e);
  EXPECT(pb_table_rows(t) > 0);
  EXPECT(track_of_table(t) == tr);
  for (size_t c = 0; c < pb_table_cols(t); c++)
    if (!listed(tr->view.schema, pb_table_col_name(t, c)))
      EXPECT_FAIL("%s: column '%s' is not in track %s's schema", path, pb_table_col_name(t, c),
                  tr->view.id);
  pb_table_free(t);
}

/* A row of the torch DataLoader peer, so that the readers of peer rows run too. */
static void add_peer_row(const char *out, const pb__track *tr) {
  char path[4200];
  snprintf(path, sizeof path, "%s/data/%s.parquet", out, tr->view.table);
  pb_table *t = NULL;
  struct pb_error e = {{0}};
  CHECK_OK(pb_table_read(path, PB_SINK_PARQUET, &t, &e), &e);
  const char *format = pb_table_get_str(t, 0, (size_t)pb_table_col_index(t, "format"));
  char fmt[64];
  snprintf(fmt, sizeof fmt, "%s", format);
  pb_table_append_row(t);
  pb_table_set_str(t, "format", fmt);
  pb_table_set_str(t, "loader", "torch-dataloader");
  pb_table_set_str(t, "cache", "none");
  pb_table_set_i64(t, "batch_size", 2);
  pb_table_set_i64(t, "num_workers", 0);
  pb_table_set_f64(t, "samples_per_sec", 100.0);
  pb_table_set_f64(t, "first_batch_time", 0.01);
  pb_table_set_f64(t, "pipebench_over_peer", 2.0);
  pb_table_set_str(t, "peer_version", "test");
  CHECK_OK(pb_table_write(t, path, PB_SINK_PARQUET, &e), &e);
  pb_table_free(t);
}

/* Track 4's table made by hand (its measuring needs torch): every schema column, two formats,
 * and the run id of the run's other tables (the report refuses tables of different runs). */
static void write_track4(const char *out, const pb__track *tr) {
  pb_table *t = NULL, *t1 = NULL;
  char path1[4200];
  snprintf(path1, sizeof path1, "%s/data/%s.parquet", out, pb__track_at(0)->view.table);
  CHECK_OK(pb_table_read(path1, PB_SINK_PARQUET, &t1, NULL), NULL);
  CHECK(pb_table_get_meta(t1, "pipebench.run_id") != NULL);
  CHECK_OK(pb_table_new(&t), NULL);
  pb_table_set_meta(t, "pipebench.track", tr->view.id);
  pb_table_set_meta(t, "pipebench.run_id", pb_table_get_meta(t1, "pipebench.run_id"));
  pb_table_free(t1);
  static const char *const formats[] = {"raw", "tiff"};
  for (int f = 0; f < 2; f++)
    for (int r = 0; r < 2; r++) {
      pb_table_append_row(t);
      for (size_t k = 0; tr->view.schema[k] != NULL; k++) {
        const char *col = tr->view.schema[k];
        if (strcmp(col, "format") == 0) pb_table_set_str(t, col, formats[f]);
        else if (strcmp(col, "repeat") == 0) pb_table_set_i64(t, col, r);
        else if (strcmp(col, "cache_state") == 0 || strcmp(col, "transform") == 0 ||
                 strcmp(col, "timestamp") == 0 || strcmp(col, "git_commit") == 0 ||
                 strcmp(col, "hostname") == 0 || strcmp(col, "peer_version") == 0)
          pb_table_set_str(t, col, "x");
        else pb_table_set_f64(t, col, 1e-4 * (double)(k + 1) * (f + 1));
      }
    }
  char path[4200];
  snprintf(path, sizeof path, "%s/data/%s.parquet", out, tr->view.table);
  struct pb_error e = {{0}};
  CHECK_OK(pb_table_write(t, path, PB_SINK_PARQUET, &e), &e);
  pb_table_free(t);
}

static void check_run_and_report(const char *dir) {
  char ds[4200], out[4200];
  snprintf(ds, sizeof ds, "%s/ds", dir);
  snprintf(out, sizeof out, "%s/out", dir);
  pb_gen_params g = PB_GEN_PARAMS_DEFAULTS;
  g.rows = 24;
  g.shape[PB_Y] = g.shape[PB_X] = 16;
  g.formats = "raw";
  struct pb_error e = {{0}};
  CHECK_OK(pb_gen(ds, &g, &e), &e);
  /* every track the run can measure without torch; track 4's table is made below */
  char tracks[64] = "";
  const pb__track *t4 = NULL;
  for (size_t i = 0; i < pb__track_count(); i++) {
    const pb__track *tr = pb__track_at(i);
    if (listed(tr->options, "python") && !listed(tr->options, "peer")) {
      t4 = tr;
      continue;
    }
    size_t u = strlen(tracks);
    snprintf(tracks + u, sizeof tracks - u, "%s%s", u ? "," : "", tr->view.id);
  }
  pb_run_params p = PB_RUN_PARAMS_DEFAULTS;
  p.data = ds;
  p.out = out;
  p.tracks = tracks;
  p.repeats = 2;
  p.warmup = 1;
  p.samples = 4;
  p.batches = 2;
  p.window_ms = 1;
  p.batch_sizes = "2";
  p.workers = "0";
  p.caches = "none,preload";
  p.transforms = "none";
  p.peer = 0;
  p.steps = 2;
  p.t3_batch = 4;
  p.t3_workers = 0;
  p.emulate_ms = 0.05;
  CHECK_OK(pb_run(&p, &e), &e);
  for (size_t i = 0; i < pb__track_count(); i++)
    if (pb__track_at(i) != t4) check_written(out, pb__track_at(i));
  const pb__track *t2 = pb__track_find("2");
  if (t2 != NULL) add_peer_row(out, t2);
  if (t4 != NULL) write_track4(out, t4);

  size_t n = pb__track_count();
  const pb__report_view *views[PB__RP_TRACKS];
  for (size_t i = 0; i < n; i++) views[i] = &pb__track_at(i)->view;
  watch w = {{0}, 0};
  pb__report_watch_columns(on_lookup, &w);
  int written = 0;
  EXPECT_OK(pb__report_plots(views, n, out, NULL, NULL, &written, &e), &e);
  EXPECT_EQ(written, (int)n);
  EXPECT_OK(pb__report_write(views, n, out, NULL, NULL, &e), &e);
  pb__report_watch_columns(NULL, NULL);
  EXPECT_EQ(w.bad, 0);
  for (size_t i = 0; i < n; i++)
    if (w.lookups[i] == 0) EXPECT_FAIL("track %s: no reader looked at its table", views[i]->id);
  /* the peer row was read: its line is in the report */
  char md[4200];
  snprintf(md, sizeof md, "%s/report.md", out);
  FILE *f = fopen(md, "r");
  CHECK(f != NULL);
  static char text[1 << 20];
  size_t len = fread(text, 1, sizeof text - 1, f);
  text[len] = '\0';
  fclose(f);
  EXPECT_CONTAINS(text, "pipebench against the torch DataLoader peer");
  for (size_t i = 0; i < n; i++) EXPECT_CONTAINS(text, views[i]->title);
}

static int remove_one(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
  (void)st;
  (void)flag;
  (void)ftw;
  return remove(path);
}

int main(void) {
  char dir[] = "/tmp/pb_test_tracks_XXXXXX";
  CHECK(mkdtemp(dir) != NULL);
  check_registry();
  check_public_list();
  check_watcher();
  check_writer_guard(dir);
  check_run_and_report(dir);
  if (check_failures() == 0) nftw(dir, remove_one, 16, FTW_DEPTH | FTW_PHYS);
  return check_failures() != 0;
}
