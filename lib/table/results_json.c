/* JSON sink through cJSON: {"metadata":{...},"columns":[{"name","type"}],"rows":[{...}]}.
 * Layout: docs/results.md. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "table/results_internal.h"

/* Integers beyond 2^53 do not survive a JSON double; they are written as strings. */
#define EXACT_LIMIT 9007199254740992LL

static cJSON *cell_json(const struct pb__column *col, size_t r) {
  char num[64];
  if (!col->valid[r]) return cJSON_CreateNull();
  switch (col->type) {
    case PB_COL_STRING: return cJSON_CreateString(col->cells[r].s);
    case PB_COL_INT64: {
      int64_t v = col->cells[r].i;
      snprintf(num, sizeof num, "%lld", (long long)v);
      if (v > EXACT_LIMIT || v < -EXACT_LIMIT) return cJSON_CreateString(num);
      return cJSON_CreateRaw(num); /* raw: cJSON would print through a double */
    }
    case PB_COL_DOUBLE:
      pb__format_double(col->cells[r].d, num, sizeof num);
      return cJSON_CreateRaw(num);
    case PB_COL_BOOL: return cJSON_CreateBool(col->cells[r].i != 0);
  }
  return cJSON_CreateNull();
}

int pb__json_write(const pb_table *t, int fd, const char *path, struct pb_error *err) {
  cJSON *root = cJSON_CreateObject();
  cJSON *meta = cJSON_AddObjectToObject(root, "metadata");
  cJSON *cols = cJSON_AddArrayToObject(root, "columns");
  cJSON *rows = cJSON_AddArrayToObject(root, "rows");
  int ok = root && meta && cols && rows;
  for (size_t i = 0; ok && i < t->nmeta; i++)
    ok = cJSON_AddStringToObject(meta, t->meta[i].key, t->meta[i].value) != NULL;
  for (size_t c = 0; ok && c < t->ncols; c++) {
    cJSON *o = cJSON_CreateObject();
    ok = o != NULL && cJSON_AddItemToArray(cols, o);
    ok = ok && cJSON_AddStringToObject(o, "name", t->cols[c].name) != NULL;
    ok = ok && cJSON_AddStringToObject(o, "type", pb__col_type_name(t->cols[c].type)) != NULL;
  }
  for (size_t r = 0; ok && r < t->nrows; r++) {
    cJSON *o = cJSON_CreateObject();
    ok = o != NULL && cJSON_AddItemToArray(rows, o);
    for (size_t c = 0; ok && c < t->ncols; c++) {
      cJSON *v = cell_json(&t->cols[c], r);
      ok = v != NULL && cJSON_AddItemToObject(o, t->cols[c].name, v);
    }
  }
  char *text = ok ? cJSON_Print(root) : NULL;
  cJSON_Delete(root);
  if (text == NULL) return pb_error_set(err, PB_ENOMEM, "%s: out of memory building JSON", path);
  int rc = pb__write_all(fd, text, strlen(text), path, err);
  if (rc == 0) rc = pb__write_all(fd, "\n", 1, path, err);
  cJSON_free(text);
  return rc;
}

/* Line and column of byte offset off in s, for error messages. */
static void where(const char *s, size_t off, size_t *line, size_t *col) {
  *line = 1;
  *col = 1;
  for (size_t i = 0; i < off; i++) {
    if (s[i] == '\n') {
      (*line)++;
      *col = 1;
    } else {
      (*col)++;
    }
  }
}

static const char *json_kind(const cJSON *v) {
  if (cJSON_IsNull(v)) return "null";
  if (cJSON_IsBool(v)) return "a boolean";
  if (cJSON_IsNumber(v)) return "a number";
  if (cJSON_IsString(v)) return "a string";
  if (cJSON_IsArray(v)) return "an array";
  if (cJSON_IsObject(v)) return "an object";
  return "a raw value";
}

static int is_integral(double d) {
  return isfinite(d) && floor(d) == d && fabs(d) <= (double)EXACT_LIMIT;
}

/* Type of a column from its values, for files without "columns". */
static int infer(const cJSON *rows, const char *name, pb_col_type *type) {
  int seen_b = 0, seen_i = 0, seen_d = 0, seen_s = 0;
  const cJSON *row;
  cJSON_ArrayForEach(row, rows) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(row, name);
    if (v == NULL || cJSON_IsNull(v)) continue;
    if (cJSON_IsBool(v)) seen_b = 1;
    else if (cJSON_IsNumber(v)) {
      if (is_integral(v->valuedouble)) seen_i = 1;
      else seen_d = 1;
    } else if (cJSON_IsString(v)) seen_s = 1;
    else return -1;
  }
  if (seen_s + seen_b + (seen_i || seen_d) > 1) return -1;
  *type = seen_b ? PB_COL_BOOL : seen_d ? PB_COL_DOUBLE : seen_i ? PB_COL_INT64 : PB_COL_STRING;
  return 0;
}

static int put(pb_table *t, size_t c, const cJSON *v, const char *path, size_t r,
               struct pb_error *err) {
  const struct pb__column *col = &t->cols[c];
  if (v == NULL || cJSON_IsNull(v)) return PB_OK;
  int ok = 0, rc = PB_OK;
  switch (col->type) {
    case PB_COL_STRING:
      if ((ok = cJSON_IsString(v))) rc = pb__table_put_str(t, c, v->valuestring, strlen(v->valuestring));
      break;
    case PB_COL_INT64:
      if (cJSON_IsNumber(v) && is_integral(v->valuedouble)) {
        ok = 1;
        rc = pb__table_put_i64(t, c, (int64_t)v->valuedouble);
      } else if (cJSON_IsString(v)) { /* a big integer written as a string */
        char *end;
        long long x = strtoll(v->valuestring, &end, 10);
        if ((ok = end != v->valuestring && *end == '\0')) rc = pb__table_put_i64(t, c, x);
      }
      break;
    case PB_COL_DOUBLE:
      if ((ok = cJSON_IsNumber(v))) rc = pb__table_put_f64(t, c, v->valuedouble);
      break;
    case PB_COL_BOOL:
      if ((ok = cJSON_IsBool(v))) rc = pb__table_put_bool(t, c, cJSON_IsTrue(v));
      break;
  }
  if (!ok)
    return pb_error_set(err, PB_EFORMAT, "%s: row %zu, column '%s': expected %s, found %s", path,
                        r, col->name, pb__col_type_name(col->type), json_kind(v));
  if (rc != 0) return pb_error_set(err, rc, "%s: out of memory", path);
  return PB_OK;
}

static int build(const cJSON *root, const char *path, pb_table *t, struct pb_error *err) {
  const cJSON *rows = root, *cols = NULL, *meta = NULL;
  if (cJSON_IsObject(root)) {
    rows = cJSON_GetObjectItemCaseSensitive(root, "rows");
    cols = cJSON_GetObjectItemCaseSensitive(root, "columns");
    meta = cJSON_GetObjectItemCaseSensitive(root, "metadata");
  }
  if (!cJSON_IsArray(rows))
    return pb_error_set(err, PB_EFORMAT, "%s: no \"rows\" array (nor a top-level array of rows)",
                        path);
  if (meta != NULL && !cJSON_IsObject(meta))
    return pb_error_set(err, PB_EFORMAT, "%s: \"metadata\" is not an object", path);
  if (cols != NULL && !cJSON_IsArray(cols))
    return pb_error_set(err, PB_EFORMAT, "%s: \"columns\" is not an array", path);
  const cJSON *m;
  cJSON_ArrayForEach(m, meta) {
    int rc;
    if (cJSON_IsString(m)) {
      rc = pb_table_set_meta(t, m->string, m->valuestring);
    } else { /* a non-string value keeps its JSON text */
      char *txt = cJSON_PrintUnformatted(m);
      rc = txt ? pb_table_set_meta(t, m->string, txt) : PB_ENOMEM;
      cJSON_free(txt);
    }
    if (rc != 0) return pb_error_set(err, rc, "%s: out of memory", path);
  }
  size_t i = 0;
  const cJSON *c;
  cJSON_ArrayForEach(c, cols) {
    const cJSON *n = cJSON_GetObjectItemCaseSensitive(c, "name");
    const cJSON *ty = cJSON_GetObjectItemCaseSensitive(c, "type");
    if (!cJSON_IsString(n) || !cJSON_IsString(ty))
      return pb_error_set(err, PB_EFORMAT, "%s: columns[%zu] lacks a string \"name\" and \"type\"",
                          path, i);
    int tp = pb__col_type_parse(ty->valuestring, strlen(ty->valuestring));
    if (tp < 0)
      return pb_error_set(err, PB_EFORMAT, "%s: columns[%zu]: unknown type '%s'", path, i,
                          ty->valuestring);
    if (pb_table_add_column(t, n->valuestring, (pb_col_type)tp) != 0)
      return pb_error_set(err, PB_EFORMAT, "%s: column '%s' is declared twice", path,
                          n->valuestring);
    i++;
  }
  /* Without declared columns, take them in order of first appearance, typed by their values. */
  const cJSON *row;
  size_t r = 0;
  cJSON_ArrayForEach(row, rows) {
    if (!cJSON_IsObject(row))
      return pb_error_set(err, PB_EFORMAT, "%s: row %zu is %s, not an object", path, r,
                          json_kind(row));
    const cJSON *v;
    cJSON_ArrayForEach(v, row) {
      if (pb_table_col_index(t, v->string) >= 0) continue;
      if (cols != NULL)
        return pb_error_set(err, PB_EFORMAT, "%s: row %zu has key '%s' that no column declares",
                            path, r, v->string);
      pb_col_type ty;
      if (infer(rows, v->string, &ty) != 0)
        return pb_error_set(err, PB_EFORMAT, "%s: column '%s' mixes value kinds", path, v->string);
      if (pb_table_add_column(t, v->string, ty) != 0)
        return pb_error_set(err, PB_ENOMEM, "%s: out of memory", path);
    }
    r++;
  }
  r = 0;
  cJSON_ArrayForEach(row, rows) {
    if (pb_table_append_row(t) != 0) return pb_error_set(err, PB_ENOMEM, "%s: out of memory", path);
    for (size_t k = 0; k < t->ncols; k++)
      PB_RETURN_NOT_OK(put(t, k, cJSON_GetObjectItemCaseSensitive(row, t->cols[k].name), path, r,
                           err));
    r++;
  }
  return PB_OK;
}

int pb__json_read(const char *path, pb_table **out, struct pb_error *err) {
  *out = NULL;
  void *raw;
  size_t len;
  PB_RETURN_NOT_OK(pb__read_file(path, &raw, &len, err));
  char *data = raw;
  const char *end = NULL;
  cJSON *root = cJSON_ParseWithLengthOpts(data, len, &end, 0);
  if (root == NULL) {
    const char *at = end ? end : cJSON_GetErrorPtr();
    size_t off = at && at >= data && at <= data + len ? (size_t)(at - data) : len;
    size_t line, col;
    where(data, off, &line, &col);
    int rc = pb_error_set(err, PB_EFORMAT, "%s: invalid JSON at line %zu, column %zu%s", path,
                          line, col, len == 0 ? " (empty file)" : "");
    pb_free(data, len);
    return rc;
  }
  pb_table *t = NULL;
  int rc = pb_table_new(&t);
  if (rc != 0) rc = pb_error_set(err, rc, "%s: out of memory", path);
  if (rc == 0) rc = build(root, path, t, err);
  cJSON_Delete(root);
  pb_free(data, len);
  if (rc != 0) {
    pb_table_free(t);
    return rc;
  }
  *out = t;
  return PB_OK;
}
