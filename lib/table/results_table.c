/* The column-typed table behind every results sink: storage, cells and metadata. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "table/results_internal.h"

static char *dup_n(const char *s, size_t n) {
  char *p = malloc(n + 1);
  if (p == NULL) return NULL;
  memcpy(p, s, n);
  p[n] = '\0';
  return p;
}

int pb_table_new(pb_table **out) {
  if (out == NULL) return PB_EINVAL;
  *out = calloc(1, sizeof **out);
  return *out == NULL ? PB_ENOMEM : PB_OK;
}

static void free_column(struct pb__column *c, size_t nrows, size_t cap_rows) {
  if (c->type == PB_COL_STRING && c->cells != NULL)
    for (size_t r = 0; r < nrows; r++) free(c->cells[r].s);
  pb_free(c->cells, cap_rows * sizeof *c->cells);
  pb_free(c->valid, cap_rows);
  free(c->name);
}

void pb_table_free(pb_table *t) {
  if (t == NULL) return;
  for (size_t i = 0; i < t->ncols; i++) free_column(&t->cols[i], t->nrows, t->cap_rows);
  free(t->cols);
  for (size_t i = 0; i < t->nmeta; i++) {
    free(t->meta[i].key);
    free(t->meta[i].value);
  }
  free(t->meta);
  free(t);
}

static long find_col(const pb_table *t, const char *name) {
  for (size_t i = 0; i < t->ncols; i++)
    if (strcmp(t->cols[i].name, name) == 0) return (long)i;
  return -1;
}

static int alloc_rows(struct pb__column *c, size_t cap) {
  if (cap == 0) return PB_OK;
  c->cells = pb_alloc(cap * sizeof *c->cells);
  c->valid = pb_alloc(cap);
  if (c->cells == NULL || c->valid == NULL) {
    pb_free(c->cells, cap * sizeof *c->cells);
    pb_free(c->valid, cap);
    c->cells = NULL;
    c->valid = NULL;
    return PB_ENOMEM;
  }
  memset(c->cells, 0, cap * sizeof *c->cells);
  memset(c->valid, 0, cap);
  return PB_OK;
}

int pb_table_add_column(pb_table *t, const char *name, pb_col_type type) {
  if (t == NULL || name == NULL || (int)type < PB_COL_STRING || (int)type > PB_COL_BOOL)
    return PB_EINVAL;
  long idx = find_col(t, name);
  if (idx >= 0) return t->cols[idx].type == type ? PB_OK : PB_EINVAL;
  if (t->ncols == t->cap_cols) {
    size_t cap = t->cap_cols ? t->cap_cols * 2 : 8;
    struct pb__column *nc = realloc(t->cols, cap * sizeof *nc);
    if (nc == NULL) return PB_ENOMEM;
    t->cols = nc;
    t->cap_cols = cap;
  }
  struct pb__column c = {0};
  c.type = type;
  c.name = dup_n(name, strlen(name));
  if (c.name == NULL) return PB_ENOMEM;
  /* Earlier rows hold NULL in a column that appears later. */
  if (alloc_rows(&c, t->cap_rows) != PB_OK) {
    free(c.name);
    return PB_ENOMEM;
  }
  t->cols[t->ncols++] = c;
  return PB_OK;
}

int pb_table_append_row(pb_table *t) {
  if (t == NULL) return PB_EINVAL;
  if (t->nrows == t->cap_rows) {
    size_t cap = t->cap_rows ? t->cap_rows * 2 : 64;
    /* Allocate every column's new arrays first, so a failure leaves the table unchanged. */
    struct pb__column *next = calloc(t->ncols ? t->ncols : 1, sizeof *next);
    if (next == NULL) return PB_ENOMEM;
    for (size_t i = 0; i < t->ncols; i++) {
      if (alloc_rows(&next[i], cap) != PB_OK) {
        for (size_t j = 0; j < i; j++) {
          pb_free(next[j].cells, cap * sizeof *next[j].cells);
          pb_free(next[j].valid, cap);
        }
        free(next);
        return PB_ENOMEM;
      }
    }
    for (size_t i = 0; i < t->ncols; i++) {
      struct pb__column *c = &t->cols[i];
      if (t->nrows > 0) {
        memcpy(next[i].cells, c->cells, t->nrows * sizeof *c->cells);
        memcpy(next[i].valid, c->valid, t->nrows);
      }
      pb_free(c->cells, t->cap_rows * sizeof *c->cells);
      pb_free(c->valid, t->cap_rows);
      c->cells = next[i].cells;
      c->valid = next[i].valid;
    }
    free(next);
    t->cap_rows = cap;
  }
  for (size_t i = 0; i < t->ncols; i++) {
    t->cols[i].valid[t->nrows] = 0;
    memset(&t->cols[i].cells[t->nrows], 0, sizeof t->cols[i].cells[0]);
  }
  t->nrows++;
  return PB_OK;
}

/* Finds or declares the column for a set_* call on the current row. */
static int target(pb_table *t, const char *col, pb_col_type type, size_t *idx) {
  if (t == NULL || col == NULL) return PB_EINVAL;
  if (t->nrows == 0) return PB_ESTATE;
  long i = find_col(t, col);
  if (i < 0) {
    PB_RETURN_NOT_OK(pb_table_add_column(t, col, type));
    i = (long)t->ncols - 1;
  }
  *idx = (size_t)i;
  return PB_OK;
}

int pb__table_put_str(pb_table *t, size_t col, const char *v, size_t len) {
  struct pb__column *c = &t->cols[col];
  if (c->type != PB_COL_STRING) return PB_EINVAL;
  size_t r = t->nrows - 1;
  char *s = NULL;
  if (v != NULL) {
    s = dup_n(v, len);
    if (s == NULL) return PB_ENOMEM;
  }
  free(c->cells[r].s);
  c->cells[r].s = s;
  c->valid[r] = v != NULL;
  return PB_OK;
}

int pb__table_put_i64(pb_table *t, size_t col, int64_t v) {
  struct pb__column *c = &t->cols[col];
  size_t r = t->nrows - 1;
  if (c->type == PB_COL_DOUBLE) return pb__table_put_f64(t, col, (double)v);
  if (c->type != PB_COL_INT64) return PB_EINVAL;
  c->cells[r].i = v;
  c->valid[r] = 1;
  return PB_OK;
}

int pb__table_put_f64(pb_table *t, size_t col, double v) {
  struct pb__column *c = &t->cols[col];
  if (c->type != PB_COL_DOUBLE) return PB_EINVAL;
  size_t r = t->nrows - 1;
  c->cells[r].d = isfinite(v) ? v : 0.0;
  c->valid[r] = isfinite(v) ? 1 : 0;
  return PB_OK;
}

int pb__table_put_bool(pb_table *t, size_t col, int v) {
  struct pb__column *c = &t->cols[col];
  if (c->type != PB_COL_BOOL) return PB_EINVAL;
  size_t r = t->nrows - 1;
  c->cells[r].i = v != 0;
  c->valid[r] = 1;
  return PB_OK;
}

int pb_table_set_str(pb_table *t, const char *col, const char *v) {
  size_t i;
  PB_RETURN_NOT_OK(target(t, col, PB_COL_STRING, &i));
  return pb__table_put_str(t, i, v, v ? strlen(v) : 0);
}

int pb_table_set_i64(pb_table *t, const char *col, int64_t v) {
  size_t i;
  PB_RETURN_NOT_OK(target(t, col, PB_COL_INT64, &i));
  return pb__table_put_i64(t, i, v);
}

int pb_table_set_f64(pb_table *t, const char *col, double v) {
  size_t i;
  PB_RETURN_NOT_OK(target(t, col, PB_COL_DOUBLE, &i));
  return pb__table_put_f64(t, i, v);
}

int pb_table_set_bool(pb_table *t, const char *col, int v) {
  size_t i;
  PB_RETURN_NOT_OK(target(t, col, PB_COL_BOOL, &i));
  return pb__table_put_bool(t, i, v);
}

int pb_table_set_null(pb_table *t, const char *col) {
  if (t == NULL || col == NULL) return PB_EINVAL;
  if (t->nrows == 0) return PB_ESTATE;
  long i = find_col(t, col);
  if (i < 0) return PB_ENOTFOUND;
  struct pb__column *c = &t->cols[i];
  size_t r = t->nrows - 1;
  if (c->type == PB_COL_STRING) {
    free(c->cells[r].s);
    c->cells[r].s = NULL;
  }
  c->valid[r] = 0;
  return PB_OK;
}

size_t pb_table_rows(const pb_table *t) { return t ? t->nrows : 0; }
size_t pb_table_cols(const pb_table *t) { return t ? t->ncols : 0; }

const char *pb_table_col_name(const pb_table *t, size_t col) {
  return t && col < t->ncols ? t->cols[col].name : NULL;
}

pb_col_type pb_table_col_type(const pb_table *t, size_t col) {
  return t && col < t->ncols ? t->cols[col].type : PB_COL_STRING;
}

long pb_table_col_index(const pb_table *t, const char *name) {
  return t && name ? find_col(t, name) : -1;
}

static const struct pb__column *cell(const pb_table *t, size_t row, size_t col) {
  if (t == NULL || row >= t->nrows || col >= t->ncols) return NULL;
  return &t->cols[col];
}

int pb_table_is_null(const pb_table *t, size_t row, size_t col) {
  const struct pb__column *c = cell(t, row, col);
  return c == NULL || !c->valid[row];
}

const char *pb_table_get_str(const pb_table *t, size_t row, size_t col) {
  const struct pb__column *c = cell(t, row, col);
  if (c == NULL || c->type != PB_COL_STRING || !c->valid[row]) return NULL;
  return c->cells[row].s;
}

int64_t pb_table_get_i64(const pb_table *t, size_t row, size_t col) {
  const struct pb__column *c = cell(t, row, col);
  if (c == NULL || !c->valid[row]) return 0;
  if (c->type == PB_COL_INT64 || c->type == PB_COL_BOOL) return c->cells[row].i;
  if (c->type == PB_COL_DOUBLE) {
    double d = c->cells[row].d;
    /* Saturate rather than invoke undefined conversion. */
    if (d >= 9223372036854775807.0) return INT64_MAX;
    if (d <= -9223372036854775808.0) return INT64_MIN;
    return (int64_t)d;
  }
  return 0;
}

double pb_table_get_f64(const pb_table *t, size_t row, size_t col) {
  const struct pb__column *c = cell(t, row, col);
  if (c == NULL || !c->valid[row]) return NAN;
  if (c->type == PB_COL_DOUBLE) return c->cells[row].d;
  if (c->type == PB_COL_INT64 || c->type == PB_COL_BOOL) return (double)c->cells[row].i;
  return NAN;
}

int pb_table_get_bool(const pb_table *t, size_t row, size_t col) {
  const struct pb__column *c = cell(t, row, col);
  if (c == NULL || !c->valid[row] || c->type == PB_COL_STRING) return 0;
  if (c->type == PB_COL_DOUBLE) return c->cells[row].d != 0.0;
  return c->cells[row].i != 0;
}

int pb_table_set_meta(pb_table *t, const char *key, const char *value) {
  if (t == NULL || key == NULL || value == NULL) return PB_EINVAL;
  char *v = dup_n(value, strlen(value));
  if (v == NULL) return PB_ENOMEM;
  for (size_t i = 0; i < t->nmeta; i++) {
    if (strcmp(t->meta[i].key, key) == 0) {
      free(t->meta[i].value);
      t->meta[i].value = v;
      return PB_OK;
    }
  }
  if (t->nmeta == t->cap_meta) {
    size_t cap = t->cap_meta ? t->cap_meta * 2 : 16;
    struct pb__meta *nm = realloc(t->meta, cap * sizeof *nm);
    if (nm == NULL) {
      free(v);
      return PB_ENOMEM;
    }
    t->meta = nm;
    t->cap_meta = cap;
  }
  char *k = dup_n(key, strlen(key));
  if (k == NULL) {
    free(v);
    return PB_ENOMEM;
  }
  t->meta[t->nmeta].key = k;
  t->meta[t->nmeta].value = v;
  t->nmeta++;
  return PB_OK;
}

const char *pb_table_get_meta(const pb_table *t, const char *key) {
  if (t == NULL || key == NULL) return NULL;
  for (size_t i = 0; i < t->nmeta; i++)
    if (strcmp(t->meta[i].key, key) == 0) return t->meta[i].value;
  return NULL;
}

size_t pb_table_meta_count(const pb_table *t) { return t ? t->nmeta : 0; }

void pb_table_meta_at(const pb_table *t, size_t i, const char **key, const char **value) {
  const char *k = NULL, *v = NULL;
  if (t != NULL && i < t->nmeta) {
    k = t->meta[i].key;
    v = t->meta[i].value;
  }
  if (key) *key = k;
  if (value) *value = v;
}

int pb_table_set_env(pb_table *t, const pb_env *env) {
  if (t == NULL || env == NULL) return PB_EINVAL;
  int n = pb_env_field_count();
  for (int i = 0; i < n; i++) {
    const char *k, *v;
    char tmp[64], key[160];
    pb_env_field(env, i, &k, &v, tmp, sizeof tmp);
    if (k == NULL || k[0] == '\0') continue;
    snprintf(key, sizeof key, "env.%s", k);
    PB_RETURN_NOT_OK(pb_table_set_meta(t, key, v ? v : ""));
  }
  return PB_OK;
}

const char *pb__col_type_name(pb_col_type type) {
  switch (type) {
    case PB_COL_STRING: return "string";
    case PB_COL_INT64: return "int64";
    case PB_COL_DOUBLE: return "double";
    case PB_COL_BOOL: return "bool";
  }
  return "string";
}

int pb__col_type_parse(const char *name, size_t len) {
  static const char *names[] = {"string", "int64", "double", "bool"};
  for (int i = 0; i < 4; i++)
    if (strlen(names[i]) == len && memcmp(names[i], name, len) == 0) return i;
  return -1;
}

void pb__format_double(double v, char *buf, size_t size) {
  /* The fewest significant digits (1 to 17) that read back to the same double, laid out as
   * Python's repr() does: plain notation for exponents -4 to 15 ("0.0001", "68.948149",
   * "100.0"), else "d.ddde+XX" ("1e+16", "5e-324"). */
  char e[40];
  for (int prec = 1; prec <= 17; prec++) {
    snprintf(e, sizeof e, "%.*e", prec - 1, v);
    if (strtod(e, NULL) == v) break;
  }
  if (!isfinite(v)) { /* not stored by the table (NULL), but keep the text readable */
    snprintf(buf, size, "%s", e);
    return;
  }
  const char *p = e;
  int neg = *p == '-';
  if (neg) p++;
  char digits[24];
  size_t nd = 0;
  for (; *p != 'e' && *p != '\0'; p++)
    if (*p >= '0' && *p <= '9' && nd + 1 < sizeof digits) digits[nd++] = *p;
  while (nd > 1 && digits[nd - 1] == '0') nd--;
  digits[nd] = '\0';
  int exp = *p == 'e' ? atoi(p + 1) : 0;
  char out[64];
  size_t o = 0;
  if (neg) out[o++] = '-';
  if (exp < -4 || exp >= 16) {
    out[o++] = digits[0];
    if (nd > 1) {
      out[o++] = '.';
      for (size_t i = 1; i < nd; i++) out[o++] = digits[i];
    }
    snprintf(out + o, sizeof out - o, "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
  } else if (exp < 0) {
    out[o++] = '0';
    out[o++] = '.';
    for (int i = -1; i > exp; i--) out[o++] = '0';
    for (size_t i = 0; i < nd; i++) out[o++] = digits[i];
    out[o] = '\0';
  } else {
    for (int i = 0; i <= exp; i++) out[o++] = (size_t)i < nd ? digits[i] : '0';
    out[o++] = '.';
    if ((size_t)exp + 1 >= nd) out[o++] = '0';
    for (size_t i = (size_t)exp + 1; i < nd; i++) out[o++] = digits[i];
    out[o] = '\0';
  }
  snprintf(buf, size, "%s", out);
}
