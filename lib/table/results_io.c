/* pb_table_write / pb_table_read: sink choice and the atomic write around every sink. */
#include <stdio.h>
#include <errno.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "table/results_internal.h"

static pb_sink by_extension(const char *path) {
  const char *dot = strrchr(path, '.');
  const char *slash = strrchr(path, '/');
  if (dot == NULL || (slash != NULL && dot < slash)) return PB_SINK_AUTO;
  if (strcasecmp(dot, ".parquet") == 0 || strcasecmp(dot, ".pq") == 0) return PB_SINK_PARQUET;
  if (strcasecmp(dot, ".csv") == 0) return PB_SINK_CSV;
  if (strcasecmp(dot, ".json") == 0) return PB_SINK_JSON;
  return PB_SINK_AUTO;
}

int pb_table_write(const pb_table *t, const char *path, pb_sink sink, struct pb_error *err) {
  if (t == NULL || path == NULL) return pb_error_set(err, PB_EINVAL, "pb_table_write: NULL argument");
  if (sink == PB_SINK_AUTO) sink = by_extension(path);
  if (sink == PB_SINK_AUTO)
    return pb_error_set(err, PB_EINVAL,
                        "%s: cannot tell the format from the name (use .parquet, .csv or .json)",
                        path);
  if (sink == PB_SINK_PARQUET && t->ncols == 0)
    return pb_error_set(err, PB_EINVAL, "%s: a Parquet file needs at least one column", path);
  char tmp[4096];
  int fd;
  PB_RETURN_NOT_OK(pb__atomic_open(path, tmp, sizeof tmp, &fd, err));
  int rc;
  uint64_t hash = 0;
  switch (sink) {
    case PB_SINK_CSV: rc = pb__csv_write(t, fd, path, &hash, err); break;
    case PB_SINK_JSON: rc = pb__json_write(t, fd, path, err); break;
    case PB_SINK_PARQUET:
      /* DuckDB writes the file by name; the descriptor only reserved the name. */
      close(fd);
      fd = -1;
      rc = pb__parquet_write(t, tmp, path, err);
      break;
    default: rc = pb_error_set(err, PB_EINVAL, "%s: unknown sink %d", path, (int)sink); break;
  }
  if (fd >= 0 && close(fd) != 0 && rc == 0)
    rc = pb_error_set(err, -errno, "%s: close of %s failed: %s", path, tmp, strerror(errno));
  if (rc != 0) {
    pb__atomic_abort(tmp);
    return rc;
  }
  PB_RETURN_NOT_OK(pb__atomic_commit(tmp, path, err));
  /* after the CSV: until it is replaced the old sidecar's hash names the old file, so a
   * reader never takes it for the new one */
  return sink == PB_SINK_CSV ? pb__csv_write_sidecar(t, path, hash, err) : PB_OK;
}

/* For names without a known extension: Parquet by its magic, JSON by its first character. */
static pb_sink sniff(const char *path) {
  FILE *f = fopen(path, "rb");
  if (f == NULL) return PB_SINK_CSV;
  char head[4] = {0};
  size_t n = fread(head, 1, sizeof head, f);
  int c = ' ';
  if (n == 4 && memcmp(head, "PAR1", 4) == 0) {
    fclose(f);
    return PB_SINK_PARQUET;
  }
  rewind(f);
  while ((c = fgetc(f)) != EOF && (c == ' ' || c == '\t' || c == '\n' || c == '\r')) {
  }
  fclose(f);
  return c == '{' || c == '[' ? PB_SINK_JSON : PB_SINK_CSV;
}

int pb_table_read(const char *path, pb_sink sink, pb_table **out, struct pb_error *err) {
  if (out == NULL) return pb_error_set(err, PB_EINVAL, "pb_table_read: NULL argument");
  *out = NULL;
  if (path == NULL) return pb_error_set(err, PB_EINVAL, "pb_table_read: NULL path");
  if (access(path, F_OK) != 0)
    return pb_error_set(err, PB_ENOTFOUND, "%s: cannot open: no such file", path);
  if (sink == PB_SINK_AUTO) sink = by_extension(path);
  if (sink == PB_SINK_AUTO) sink = sniff(path);
  switch (sink) {
    case PB_SINK_PARQUET: return pb__parquet_read(path, out, err);
    case PB_SINK_CSV: return pb__csv_read(path, out, err);
    case PB_SINK_JSON: return pb__json_read(path, out, err);
    default: return pb_error_set(err, PB_EINVAL, "%s: unknown sink %d", path, (int)sink);
  }
}
