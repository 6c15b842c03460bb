/* What pb_infer_run reads and writes besides the measuring: the output folder checked before any
 * pass runs, the plain CSV (header and rows only, so that any CSV reader takes it as it is) with
 * its environment in a JSON file of the same stem, a `pipebench gen` folder as the data source,
 * and the process's resident memory for the CPU rows. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "pipebench/format.h"
#include "pipebench/infer.h"

#include "pipebench/sys.h"
#include "infer/infer_internal.h"
#include "pipebench/results.h"

/* The first of dir and its parents that does not exist yet, into made ("" when dir exists). */
static void first_missing(const char *dir, char *made, size_t size) {
  made[0] = '\0';
  char buf[4096];
  snprintf(buf, sizeof buf, "%s", dir);
  struct stat st;
  while (buf[0] != '\0' && stat(buf, &st) != 0 && errno == ENOENT) {
    snprintf(made, size, "%s", buf);
    char *slash = strrchr(buf, '/');
    if (slash == NULL || slash == buf) break;
    *slash = '\0';
  }
}

void pb__infer_unmake_output(const char *dir, const char *made) {
  if (dir == NULL || made == NULL || made[0] == '\0') return;
  char buf[4096];
  snprintf(buf, sizeof buf, "%s", dir);
  for (;;) { /* empty folders only, from dir up to the first one this call made */
    if (rmdir(buf) != 0) return;
    if (strcmp(buf, made) == 0) return;
    char *slash = strrchr(buf, '/');
    if (slash == NULL || slash == buf) return;
    *slash = '\0';
  }
}

int pb__infer_check_output(const char *dir, char *made, size_t made_size, struct pb_error *err) {
  if (made_size > 0) made[0] = '\0';
  if (dir == NULL) return PB_OK;
  if (dir[0] == '\0') return pb_error_set(err, PB_EINVAL, "--output-dir: an empty path");
  first_missing(dir, made, made_size);
  PB_RETURN_NOT_OK(pb_mkdirs(dir, err));
  char probe[4200];
  snprintf(probe, sizeof probe, "%s/.pipebench-probe-XXXXXX", dir);
  int fd = mkstemp(probe);
  if (fd < 0) {
    int e = errno;
    pb__infer_unmake_output(dir, made);
    return pb_error_set(err, PB_EIO, "%s: cannot write results there: %s", dir, strerror(e));
  }
  close(fd);
  unlink(probe);
  return PB_OK;
}

/* ---- the plain CSV and the environment beside it ------------------------------------------- */

static void put_field(FILE *f, const char *s) {
  if (strpbrk(s, ",\"\r\n") == NULL) {
    fputs(s, f);
    return;
  }
  fputc('"', f);
  for (; *s; s++) {
    if (*s == '"') fputc('"', f);
    fputc(*s, f);
  }
  fputc('"', f);
}

static void put_cell(FILE *f, const pb_table *t, size_t r, size_t c) {
  if (pb_table_is_null(t, r, c)) return; /* an empty field */
  switch (pb_table_col_type(t, c)) {
  case PB_COL_STRING: put_field(f, pb_table_get_str(t, r, c)); break;
  case PB_COL_INT64: fprintf(f, "%lld", (long long)pb_table_get_i64(t, r, c)); break;
  case PB_COL_BOOL: fputs(pb_table_get_bool(t, r, c) ? "True" : "False", f); break;
  case PB_COL_DOUBLE: { /* the shortest text that reads back to the same double */
    char num[64];
    pb_format_double(pb_table_get_f64(t, r, c), num, sizeof num);
    fputs(num, f);
    break;
  }
  }
}

/* The rows as CSV text, into a new buffer *text (the caller frees it). */
static int csv_text(const pb_table *t, char **text, size_t *size, struct pb_error *err) {
  *text = NULL;
  *size = 0;
  FILE *f = open_memstream(text, size);
  if (f == NULL) return pb_error_set(err, PB_ENOMEM, "out of memory");
  for (size_t c = 0; c < pb_table_cols(t); c++) {
    if (c) fputc(',', f);
    put_field(f, pb_table_col_name(t, c));
  }
  fputc('\n', f);
  for (size_t r = 0; r < pb_table_rows(t); r++) {
    for (size_t c = 0; c < pb_table_cols(t); c++) {
      if (c) fputc(',', f);
      put_cell(f, t, r, c);
    }
    fputc('\n', f);
  }
  int bad = ferror(f);
  fclose(f);
  if (bad) {
    free(*text);
    *text = NULL;
    return pb_error_set(err, PB_ENOMEM, "out of memory");
  }
  return PB_OK;
}

int pb__infer_write_csv(const pb_table *t, const char *path, struct pb_error *err) {
  char *text = NULL;
  size_t size = 0;
  PB_RETURN_NOT_OK(csv_text(t, &text, &size, err));
  int rc = pb_write_file_atomic(path, text, size, err);
  free(text);
  return rc;
}

/* Gives the CSV text the first free name of dir/benchmark_results_<stamp>[_N].csv, into path:
 * written whole to a hidden temporary first, then linked to the name (link(2) never replaces
 * a file, so two calls in the same second never share one, and no reader sees a partial
 * file). Where the file system has no hard links, the name is reserved with O_EXCL and the
 * temporary renamed over it. */
static int claim(const char *dir, const char *stamp, const char *text, size_t size, char *path,
                 size_t path_size, struct pb_error *err) {
  char tmp[4400];
  snprintf(tmp, sizeof tmp, "%s/.benchmark_results_%s.csv.claim-%ld", dir, stamp, (long)getpid());
  int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
  if (fd < 0) return pb_error_set(err, PB_EIO, "%s: cannot write results there: %s", dir, strerror(errno));
  int rc = pb_write_all(fd, text, size, tmp, err);
  if (rc == PB_OK && fsync(fd) != 0)
    rc = pb_error_set(err, PB_EIO, "%s: cannot write: %s", tmp, strerror(errno));
  if (close(fd) != 0 && rc == PB_OK)
    rc = pb_error_set(err, PB_EIO, "%s: cannot write: %s", tmp, strerror(errno));
  for (int k = 1; rc == PB_OK; k++) {
    if (k == 1) snprintf(path, path_size, "%s/benchmark_results_%s.csv", dir, stamp);
    else snprintf(path, path_size, "%s/benchmark_results_%s_%d.csv", dir, stamp, k);
    if (link(tmp, path) == 0) break;
    int e = errno;
    if (e == EEXIST && k < 10000) continue;
    if (e == EPERM || e == ENOTSUP || e == EOPNOTSUPP || e == ENOSYS) {
      int r = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
      if (r < 0 && errno == EEXIST && k < 10000) continue;
      if (r >= 0) {
        close(r);
        if (rename(tmp, path) == 0) break;
        e = errno;
        unlink(path);
      } else {
        e = errno;
      }
    }
    rc = pb_error_set(err, PB_EIO, "%s: cannot create: %s", path, strerror(e));
  }
  unlink(tmp);
  if (rc != PB_OK) path[0] = '\0';
  return rc;
}

int pb__infer_save(const pb_infer_params *p, pb__infer_ctx *c, struct pb_error *err) {
  if (p->output_dir == NULL || c->rows == NULL || pb_table_rows(c->rows) == 0) return PB_OK;
  char *text = NULL;
  size_t size = 0;
  PB_RETURN_NOT_OK(csv_text(c->rows, &text, &size, err));
  int rc = PB_OK;
  if (c->csv_path[0] == '\0') {
    rc = pb_mkdirs(p->output_dir, err);
    if (rc == PB_OK)
      rc = claim(p->output_dir, c->stamp, text, size, c->csv_path, sizeof c->csv_path, err);
    if (rc == PB_OK) { /* the environment beside it, under the same stem */
      snprintf(c->env_path, sizeof c->env_path, "%.*s.json",
               (int)(strlen(c->csv_path) - strlen(".csv")), c->csv_path);
      rc = pb__infer_write_env(c->rows, c->env_path, err);
    }
  } else {
    rc = pb_write_file_atomic(c->csv_path, text, size, err);
  }
  free(text);
  return rc;
}

int pb__infer_write_env(const pb_table *t, const char *path, struct pb_error *err) {
  cJSON *root = cJSON_CreateObject();
  for (size_t i = 0; root != NULL && i < pb_table_meta_count(t); i++) {
    const char *k, *v;
    pb_table_meta_at(t, i, &k, &v);
    cJSON_AddStringToObject(root, k, v);
  }
  char *text = root ? cJSON_Print(root) : NULL;
  cJSON_Delete(root);
  if (text == NULL) return pb_error_set(err, PB_ENOMEM, "out of memory for %s", path);
  int rc = pb_write_file_atomic(path, text, strlen(text), err);
  free(text);
  return rc;
}

/* ---- the data source ----------------------------------------------------------------------- */

/* A folder that `pipebench gen` wrote holds manifest.json with "kind": "pipebench.dataset" and
 * "formats": {name: path inside the folder}. Picks `format` there (or the first readable one)
 * into out; a plain dataset path is taken as it is. */
int pb__infer_resolve_source(const char *src, const char *format, char *out, size_t out_size,
                             char *fmt_out, size_t fmt_size, struct pb_error *err) {
  snprintf(out, out_size, "%s", src);
  snprintf(fmt_out, fmt_size, "%s", format != NULL ? format : "");
  char manifest[4200];
  snprintf(manifest, sizeof manifest, "%s/manifest.json", src);
  void *data = NULL;
  size_t size = 0;
  int url = pb_location_is_url(src);
  if (url) { /* a HEAD; a dataset URL that is no folder has none */
    int kind = 0;
    PB_RETURN_NOT_OK(pb_location_stat(manifest, &kind, NULL, err));
    if (kind != 1) return PB_OK;
    PB_RETURN_NOT_OK(pb_location_read(manifest, (size_t)256 << 20, &data, &size, err));
  } else {
    struct stat st;
    if (stat(manifest, &st) != 0 || !S_ISREG(st.st_mode)) return PB_OK;
    PB_RETURN_NOT_OK(pb_read_file(manifest, &data, &size, err));
  }
  cJSON *j = NULL;
  struct pb_error pe;
  pb_json_parse(data, size, manifest, &j, &pe); /* not JSON: not gen's manifest */
  pb_free(data, size);
  const cJSON *kind = cJSON_GetObjectItemCaseSensitive(j, "kind");
  const cJSON *formats = cJSON_GetObjectItemCaseSensitive(j, "formats");
  if (!cJSON_IsString(kind) || strcmp(kind->valuestring, "pipebench.dataset") != 0 ||
      !cJSON_IsObject(formats)) {
    cJSON_Delete(j);
    return PB_OK; /* some other folder's manifest: the folder is opened as a dataset */
  }
  char listed[1024] = "";
  int rc = PB_ENOTFOUND;
  const cJSON *f;
  cJSON_ArrayForEach(f, formats) {
    if (!cJSON_IsString(f) || rc == PB_OK) continue;
    size_t l = strlen(listed);
    snprintf(listed + l, sizeof listed - l, "%s%s", l ? ", " : "", f->string);
    if (format != NULL && strcmp(format, f->string) != 0) continue;
    /* An entry is a path inside the folder: no '..', no absolute path, no link out of it. */
    int irc = url ? PB_OK : pb_entry_inside(src, f->valuestring, "the dataset folder", err);
    if (irc != PB_OK) {
      cJSON_Delete(j);
      return irc;
    }
    char path[4400];
    snprintf(path, sizeof path, "%s/%s", src, f->valuestring);
    pb_dataset *ds = NULL;
    struct pb_error e2 = {{0}};
    int orc = pb_dataset_open(path, f->string, &ds, &e2);
    pb_dataset_free(ds);
    if (orc == PB_OK || format != NULL) {
      snprintf(out, out_size, "%s", path);
      snprintf(fmt_out, fmt_size, "%s", f->string);
      rc = PB_OK;
    }
  }
  cJSON_Delete(j);
  if (rc == PB_OK) return PB_OK;
  if (format != NULL)
    return pb_error_set(err, PB_EINVAL, "%s holds no format '%s' (it has: %s)", src, format,
                        listed);
  return pb_error_set(err, PB_EFORMAT, "%s: none of its formats (%s) could be opened", src, listed);
}

/* ---- resident memory ----------------------------------------------------------------------- */

static double status_kib(const char *key) {
  FILE *f = fopen("/proc/self/status", "r");
  if (f == NULL) return NAN;
  char line[256];
  double v = NAN;
  size_t n = strlen(key);
  while (fgets(line, sizeof line, f) != NULL)
    if (strncmp(line, key, n) == 0 && line[n] == ':') v = strtod(line + n + 1, NULL);
  fclose(f);
  return v;
}

double pb__infer_rss_mark(void) {
  /* "5" resets the peak (VmHWM) to the present resident size (Linux 4.0 and later); where that
   * is refused the peak so far is the baseline, and only growth beyond it counts. */
  int fd = open("/proc/self/clear_refs", O_WRONLY | O_CLOEXEC);
  if (fd >= 0) {
    if (write(fd, "5", 1) != 1) { /* the peak stays; growth beyond it still counts */
    }
    close(fd);
  }
  double hwm = status_kib("VmHWM");
  return isfinite(hwm) ? hwm : status_kib("VmRSS");
}

double pb__infer_rss_growth_mb(double mark_kib) {
  double hwm = status_kib("VmHWM");
  if (!isfinite(hwm) || !isfinite(mark_kib)) return NAN;
  return hwm > mark_kib ? (hwm - mark_kib) / 1024.0 : 0.0;
}
