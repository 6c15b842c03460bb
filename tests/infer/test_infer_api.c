/* pb_infer_run and pb_train_run called as a library: parameters checked before anything runs,
 * one row per batch size with the statistics of exactly `iterations` passes, the notes that
 * replace printing, the CSV written where asked, the training metrics. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "pipebench/infer.h"
#include "pipebench/results.h"

typedef struct notes {
  char text[8192];
  int warnings;
} notes;

static void on_note(void *ctx, int level, const char *line) {
  notes *n = ctx;
  size_t len = strlen(n->text);
  snprintf(n->text + len, sizeof n->text - len, "%s\n", line);
  n->warnings += level == 1;
}

static void bad_params(void) {
  struct pb_error err = {{0}};
  pb_table *rows = (pb_table *)&err; /* set to NULL by a failing call */
  pb_infer_params p = PB_INFER_PARAMS_DEFAULTS;
  p.frameworks = "pipebench,caffe";
  EXPECT_EQ(pb_infer_run(&p, &rows, NULL, 0, &err), PB_EINVAL);
  EXPECT_CONTAINS(err.message, "unknown framework 'caffe'");
  EXPECT(rows == NULL);
  pb_infer_params_init(&p);
  p.model = "resnet";
  EXPECT_EQ(pb_infer_run(&p, NULL, NULL, 0, &err), PB_EINVAL);
  EXPECT_CONTAINS(err.message, "vit_b_16");
  pb_infer_params_init(&p);
  p.dtype = "int8";
  EXPECT_EQ(pb_infer_run(&p, NULL, NULL, 0, &err), PB_EINVAL);
  pb_infer_params_init(&p);
  int zero[] = {4, 0};
  p.batch_sizes = zero, p.n_batch_sizes = 2;
  EXPECT_EQ(pb_infer_run(&p, NULL, NULL, 0, &err), PB_EINVAL);
  EXPECT_CONTAINS(err.message, "not 0");
  pb_infer_params_init(&p);
  p.iterations = 0;
  EXPECT_EQ(pb_infer_run(&p, NULL, NULL, 0, &err), PB_EINVAL);
  pb_infer_params_init(&p);
  p.data_source = "/nonexistent/dataset";
  EXPECT_EQ(pb_infer_run(&p, NULL, NULL, 0, &err), PB_ENOTFOUND);
  EXPECT_CONTAINS(err.message, "/nonexistent/dataset");
  EXPECT_EQ(pb_infer_run(NULL, NULL, NULL, 0, &err), PB_EINVAL);

  pb_train_params t = PB_TRAIN_PARAMS_DEFAULTS;
  t.loss = "hinge";
  EXPECT_EQ(pb_train_run(&t, NULL, &err), PB_EINVAL);
  EXPECT_CONTAINS(err.message, "hinge");
  pb_train_params_init(&t);
  t.num_images = 3, t.batch_size = 4;
  EXPECT_EQ(pb_train_run(&t, NULL, &err), PB_EINVAL);
  EXPECT_CONTAINS(err.message, "larger than the 3 images");
}

static void engine_rows(const char *dir) {
  struct pb_error err = {{0}};
  notes n = {{0}, 0};
  int bss[] = {2, 1};
  pb_infer_params p = PB_INFER_PARAMS_DEFAULTS;
  p.batch_sizes = bss, p.n_batch_sizes = 2, p.iterations = 5, p.warmup = 2, p.threads = 1;
  p.output_dir = dir, p.note = on_note, p.note_ctx = &n;
  pb_table *rows = NULL;
  char csv[4096];
  CHECK_OK(pb_infer_run(&p, &rows, csv, sizeof csv, &err), &err);
  CHECK_EQ(pb_table_rows(rows), 2);
  long cfw = pb_table_col_index(rows, "framework"), cbs = pb_table_col_index(rows, "batch_size");
  long cn = pb_table_col_index(rows, "n"), cw = pb_table_col_index(rows, "warmup");
  long cp50 = pb_table_col_index(rows, "latency_p50_ms"), cthr = pb_table_col_index(rows, "throughput_ips");
  long cshape = pb_table_col_index(rows, "input_shape"), cdev = pb_table_col_index(rows, "device_type");
  CHECK(cfw >= 0 && cbs >= 0 && cn >= 0 && cw >= 0 && cp50 >= 0 && cthr >= 0 && cshape >= 0 && cdev >= 0);
  for (size_t r = 0; r < 2; r++) {
    EXPECT_STREQ(pb_table_get_str(rows, r, (size_t)cfw), "onednn");
    EXPECT_STREQ(pb_table_get_str(rows, r, (size_t)cdev), "cpu");
    EXPECT_EQ(pb_table_get_i64(rows, r, (size_t)cbs), bss[r]);
    EXPECT_EQ(pb_table_get_i64(rows, r, (size_t)cn), 5);
    EXPECT_EQ(pb_table_get_i64(rows, r, (size_t)cw), 2);
    double p50 = pb_table_get_f64(rows, r, (size_t)cp50), thr = pb_table_get_f64(rows, r, (size_t)cthr);
    EXPECT(p50 > 0 && thr > 0);
  }
  EXPECT_STREQ(pb_table_get_str(rows, 0, (size_t)cshape), "2x1x100x100");
  EXPECT_STREQ(pb_table_get_str(rows, 1, (size_t)cshape), "1x1x100x100");
  /* notes replace printing: the device first, then the file */
  EXPECT(strncmp(n.text, "device: cpu", 11) == 0);
  EXPECT_CONTAINS(n.text, "results: ");
  EXPECT_CONTAINS(n.text, csv);
  EXPECT_EQ(n.warnings, 0); /* p.plot is 0: no plot line either */
  pb_table *back = NULL;
  CHECK_OK(pb_table_read(csv, PB_SINK_CSV, &back, &err), &err);
  EXPECT_EQ(pb_table_rows(back), 2);
  pb_table_free(back);
  pb_table_free(rows);
  unlink(csv);
}

static void train_metrics(const char *dir) {
  struct pb_error err = {{0}};
  char path[4200];
  snprintf(path, sizeof path, "%s/train.json", dir);
  notes n = {{0}, 0};
  pb_train_params t = PB_TRAIN_PARAMS_DEFAULTS;
  t.num_images = 10, t.batch_size = 4, t.epochs = 2, t.threads = 1, t.metrics_path = path;
  t.note = on_note, t.note_ctx = &n;
  pb_train_result r;
  CHECK_OK(pb_train_run(&t, &r, &err), &err);
  EXPECT_EQ(r.steps, 4); /* 10 images, batch 4, the partial batch dropped, 2 epochs */
  EXPECT_EQ(r.images, 10);
  EXPECT(r.total_s > 0 && r.compute_s > 0 && r.throughput_ips > 0);
  EXPECT(isfinite(r.first_loss) && isfinite(r.final_loss));
  EXPECT(isfinite(r.data_wait_fraction) && r.data_wait_fraction >= 0 && r.data_wait_fraction < 1);
  EXPECT_STREQ(r.device, "cpu");
  EXPECT_CONTAINS(n.text, "epoch 2: ");
  EXPECT(access(path, R_OK) == 0);
  unlink(path);
}

int main(void) {
  char dir[] = "/tmp/pb_infer_api_XXXXXX";
  CHECK(mkdtemp(dir) != NULL);
  bad_params();
  engine_rows(dir);
  train_metrics(dir);
  rmdir(dir);
  if (check_failures() == 0) printf("infer and train API ok\n");
  return check_failures() != 0;
}
