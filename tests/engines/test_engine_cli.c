/* pipebench infer and train from the outside: exit codes, the CSV's columns, the metrics JSON. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "check.h"

static int run(const char *args, char *out, size_t size) {
  char cmd[4096];
  snprintf(cmd, sizeof cmd, "%s %s 2>&1", PIPEBENCH_CLI, args);
  FILE *p = popen(cmd, "r");
  CHECK(p != NULL);
  size_t n = fread(out, 1, size - 1, p);
  out[n] = '\0';
  int st = pclose(p);
  return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static char *slurp(const char *path) {
  FILE *f = fopen(path, "rb");
  if (f == NULL) return NULL;
  static char buf[1 << 16];
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  buf[n] = '\0';
  fclose(f);
  return buf;
}

int main(void) {
  static char out[1 << 16];
  char dir[] = "/tmp/pb_engine_cli_XXXXXX", args[2048], path[2048];
  CHECK(mkdtemp(dir) != NULL);

  CHECK_EQ(run("infer --model resnet18", out, sizeof out), 1);
  CHECK(strstr(out, "resnet50") != NULL && strstr(out, "vit_b_16") != NULL);
  CHECK_EQ(run("infer --framework tensorflow", out, sizeof out), 1);
  CHECK(strstr(out, "torch") != NULL);
  CHECK_EQ(run("infer --batch-sizes 0", out, sizeof out), 1);
  CHECK_EQ(run("infer --dtype int4", out, sizeof out), 1);
  CHECK(strstr(out, "bfloat16") != NULL);
  CHECK_EQ(run("train --loss hinge", out, sizeof out), 1);

  snprintf(args, sizeof args,
           "infer --batch-sizes 1 3 --iterations 4 --warmup 1 --threads 1 --output-dir %s/raw", dir);
  int rc = run(args, out, sizeof out);
  fputs(out, stdout);
  CHECK_EQ(rc, 0);
  CHECK(strncmp(out, "device: ", 8) == 0); /* the device comes first */
  CHECK(strstr(out, "batch    3:") != NULL);
  const char *res = strstr(out, "results: ");
  CHECK(res != NULL);
  snprintf(path, sizeof path, "%.*s", (int)strcspn(res + 9, "\n"), res + 9);
  char *csv = slurp(path);
  CHECK(csv != NULL);
  const char *cols[] = {"framework", "model", "device", "device_type", "batch_size", "input_shape",
                        "dtype", "latency_p50_ms", "latency_p95_ms", "latency_p99_ms",
                        "latency_mean_ms", "latency_std_ms", "latency_min_ms", "latency_max_ms",
                        "throughput_ips", "memory_mb", "compilation_time_ms", "n", "timestamp",
                        "git_commit"};
  for (size_t i = 0; i < sizeof cols / sizeof cols[0]; i++) {
    if (strstr(csv, cols[i]) == NULL) fprintf(stderr, "column %s missing\n", cols[i]);
    CHECK(strstr(csv, cols[i]) != NULL);
  }
  CHECK(strstr(csv, "3x1x100x100") != NULL);

  snprintf(args, sizeof args,
           "train --num-images 8 --batch-size 4 --epochs 2 --threads 1 --metrics-out %s/m.json", dir);
  rc = run(args, out, sizeof out);
  fputs(out, stdout);
  CHECK_EQ(rc, 0);
  snprintf(path, sizeof path, "%s/m.json", dir);
  char *js = slurp(path);
  CHECK(js != NULL);
  const char *keys[] = {"total_time_s", "first_epoch_time_s", "first_batch_data_s",
                        "first_batch_compute_s", "peak_rss_mb", "engine_memory_mb",
                        "throughput_ips", "final_loss"};
  for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) CHECK(strstr(js, keys[i]) != NULL);
  CHECK(strstr(js, "\"steps\":\t4") != NULL);

  snprintf(args, sizeof args, "rm -rf %s", dir);
  CHECK(system(args) == 0);
  printf("infer and train commands ok\n");
  return 0;
}
