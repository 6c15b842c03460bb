/* CSV sink: a header and RFC 4180 rows only, so that any CSV reader (pandas.read_csv as it
 * is) takes the file; the metadata and column types go to a sidecar, NAME.csv-metadata.json,
 * tied to the CSV's bytes by a hash. Files of the older layout ("# key: value" lines and a
 * "# types:" line before the header) are still read. Layout: docs/results.md. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include <cjson/cJSON.h>

#include "table/results_internal.h"

/* FNV-1a over the CSV's bytes: a sidecar describes the file whose hash it holds, and no other
 * (not a CSV rewritten by another tool, nor a newer one beside a sidecar not yet replaced). */
static uint64_t fnv1a(uint64_t h, const char *s, size_t n) {
  for (size_t i = 0; i < n; i++) {
    h ^= (unsigned char)s[i];
    h *= 1099511628211ULL;
  }
  return h;
}
#define FNV_START 14695981039346656037ULL

/* ---- writing ---------------------------------------------------------------------------- */

/* Buffered output to the temporary file, so big tables never sit whole in memory twice. */
struct out {
  int fd;
  const char *name;
  char buf[1 << 16];
  size_t n;
  int rc;
  uint64_t hash;
  struct pb_error *err;
};

static void out_flush(struct out *o) {
  if (o->rc == 0 && o->n > 0) o->rc = pb__write_all(o->fd, o->buf, o->n, o->name, o->err);
  o->n = 0;
}

static void out_putn(struct out *o, const char *s, size_t n) {
  while (n > 0 && o->rc == 0) {
    if (o->n == sizeof o->buf) out_flush(o);
    size_t k = sizeof o->buf - o->n;
    if (k > n) k = n;
    memcpy(o->buf + o->n, s, k);
    o->hash = fnv1a(o->hash, s, k);
    o->n += k;
    s += k;
    n -= k;
  }
}

static void out_puts(struct out *o, const char *s) { out_putn(o, s, strlen(s)); }

/* A field in RFC 4180 form. The empty string is quoted, so an empty unquoted field means NULL;
 * a field starting with '#' is quoted so that no line of the file reads as a comment to
 * readers that skip '#' lines (DuckDB's comment option, pandas). */
static void out_field(struct out *o, const char *s) {
  if (s[0] != '\0' && s[0] != '#' && strpbrk(s, ",\"\r\n") == NULL) {
    out_puts(o, s);
    return;
  }
  out_puts(o, "\"");
  for (const char *p = s; *p; p++) {
    const char *q = strchr(p, '"');
    if (q == NULL) {
      out_puts(o, p);
      break;
    }
    out_putn(o, p, (size_t)(q - p) + 1);
    out_puts(o, "\"");
    p = q;
  }
  out_puts(o, "\"");
}

int pb__csv_write(const pb_table *t, int fd, const char *path, uint64_t *hash,
                  struct pb_error *err) {
  struct out *o = malloc(sizeof *o);
  if (o == NULL) return pb_error_set(err, PB_ENOMEM, "%s: out of memory", path);
  o->fd = fd;
  o->name = path;
  o->n = 0;
  o->rc = 0;
  o->hash = FNV_START;
  o->err = err;
  for (size_t c = 0; c < t->ncols; c++) {
    if (c) out_puts(o, ",");
    out_field(o, t->cols[c].name);
  }
  out_puts(o, "\n");
  char num[64];
  for (size_t r = 0; r < t->nrows && o->rc == 0; r++) {
    for (size_t c = 0; c < t->ncols; c++) {
      const struct pb__column *col = &t->cols[c];
      if (c) out_puts(o, ",");
      if (!col->valid[r]) continue;
      switch (col->type) {
        case PB_COL_STRING: out_field(o, col->cells[r].s); break;
        case PB_COL_INT64:
          snprintf(num, sizeof num, "%lld", (long long)col->cells[r].i);
          out_puts(o, num);
          break;
        case PB_COL_DOUBLE:
          pb__format_double(col->cells[r].d, num, sizeof num);
          out_puts(o, num);
          break;
        case PB_COL_BOOL: out_puts(o, col->cells[r].i ? "true" : "false"); break;
      }
    }
    out_puts(o, "\n");
  }
  out_flush(o);
  int rc = o->rc;
  if (hash != NULL) *hash = o->hash;
  free(o);
  return rc;
}

/* ---- the sidecar ------------------------------------------------------------------------- */

/* The names of the CSV on the Web (W3C CSVW) datatypes for ours. */
static const char *csvw_type(pb_col_type t) {
  switch (t) {
    case PB_COL_INT64: return "long";
    case PB_COL_DOUBLE: return "double";
    case PB_COL_BOOL: return "boolean";
    default: return "string";
  }
}

static int csvw_type_parse(const char *s) {
  if (strcmp(s, "long") == 0 || strcmp(s, "integer") == 0) return PB_COL_INT64;
  if (strcmp(s, "double") == 0 || strcmp(s, "number") == 0) return PB_COL_DOUBLE;
  if (strcmp(s, "boolean") == 0) return PB_COL_BOOL;
  if (strcmp(s, "string") == 0) return PB_COL_STRING;
  return -1;
}

void pb__csv_sidecar_path(const char *path, char *out, size_t size) {
  snprintf(out, size, "%s-metadata.json", path);
}

int pb__csv_write_sidecar(const pb_table *t, const char *path, uint64_t hash,
                          struct pb_error *err) {
  /* Only beside a file: /dev/stdout or a terminal gets the CSV alone. */
  struct stat st;
  if (stat(path, &st) != 0 || !S_ISREG(st.st_mode)) return PB_OK;
  char side[4200], hex[24];
  pb__csv_sidecar_path(path, side, sizeof side);
  snprintf(hex, sizeof hex, "%016llx", (unsigned long long)hash);
  const char *slash = strrchr(path, '/');
  cJSON *root = cJSON_CreateObject();
  int ok = root != NULL;
  ok = ok && cJSON_AddStringToObject(root, "@context", "http://www.w3.org/ns/csvw") != NULL;
  ok = ok && cJSON_AddStringToObject(root, "url", slash ? slash + 1 : path) != NULL;
  ok = ok && cJSON_AddStringToObject(root, "pipebench:csv_fnv1a64", hex) != NULL;
  cJSON *schema = ok ? cJSON_AddObjectToObject(root, "tableSchema") : NULL;
  cJSON *cols = schema ? cJSON_AddArrayToObject(schema, "columns") : NULL;
  ok = ok && cols != NULL;
  for (size_t c = 0; ok && c < t->ncols; c++) {
    cJSON *o = cJSON_CreateObject();
    ok = o != NULL && cJSON_AddItemToArray(cols, o);
    ok = ok && cJSON_AddStringToObject(o, "name", t->cols[c].name) != NULL;
    ok = ok && cJSON_AddStringToObject(o, "datatype", csvw_type(t->cols[c].type)) != NULL;
  }
  cJSON *meta = ok ? cJSON_AddObjectToObject(root, "pipebench:metadata") : NULL;
  ok = ok && meta != NULL;
  for (size_t i = 0; ok && i < t->nmeta; i++)
    ok = cJSON_AddStringToObject(meta, t->meta[i].key, t->meta[i].value) != NULL;
  char *text = ok ? cJSON_Print(root) : NULL;
  cJSON_Delete(root);
  if (text == NULL) return pb_error_set(err, PB_ENOMEM, "%s: out of memory", side);
  size_t n = strlen(text);
  text[n] = '\n'; /* cJSON's buffer ends in the NUL replaced here: one line end, no NUL */
  int rc = pb_write_file_atomic(side, text, n + 1, err);
  free(text);
  return rc;
}

/* What a sidecar says about the CSV of `len` bytes at data: the types (in *types, n of them)
 * and the metadata (into t). Returns 1 when it describes this very file, 0 otherwise (no
 * sidecar, another file's, unreadable: the CSV is then read as one from elsewhere). */
static int read_sidecar(const char *path, const char *data, size_t len, pb_table *t,
                        pb_col_type **types, long *ntypes) {
  char side[4200];
  pb__csv_sidecar_path(path, side, sizeof side);
  struct stat st;
  if (stat(side, &st) != 0 || !S_ISREG(st.st_mode)) return 0;
  void *raw = NULL;
  size_t n = 0;
  if (pb__read_file(side, &raw, &n, NULL) != PB_OK) return 0;
  cJSON *root = cJSON_ParseWithLength(raw, n);
  pb_free(raw, n);
  char hex[24];
  snprintf(hex, sizeof hex, "%016llx", (unsigned long long)fnv1a(FNV_START, data, len));
  const cJSON *h = cJSON_GetObjectItemCaseSensitive(root, "pipebench:csv_fnv1a64");
  const cJSON *cols = cJSON_GetObjectItemCaseSensitive(
      cJSON_GetObjectItemCaseSensitive(root, "tableSchema"), "columns");
  int ok = cJSON_IsString(h) && strcmp(h->valuestring, hex) == 0 && cJSON_IsArray(cols);
  size_t nc = ok ? (size_t)cJSON_GetArraySize(cols) : 0;
  pb_col_type *ty = ok ? malloc((nc ? nc : 1) * sizeof *ty) : NULL;
  ok = ok && ty != NULL;
  size_t k = 0;
  const cJSON *c, *none = NULL;
  cJSON_ArrayForEach(c, (ok ? cols : none)) {
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(c, "datatype");
    int v = cJSON_IsString(dt) ? csvw_type_parse(dt->valuestring) : -1;
    if (v < 0) ok = 0;
    else ty[k++] = (pb_col_type)v;
  }
  const cJSON *meta = cJSON_GetObjectItemCaseSensitive(root, "pipebench:metadata"), *m;
  cJSON_ArrayForEach(m, (ok ? meta : none)) {
    if (cJSON_IsString(m) && pb_table_set_meta(t, m->string, m->valuestring) != PB_OK) ok = 0;
  }
  cJSON_Delete(root);
  if (!ok) {
    free(ty);
    return 0;
  }
  *types = ty;
  *ntypes = (long)nc;
  return 1;
}

/* ---- reading ---------------------------------------------------------------------------- */

struct field {
  size_t off; /* into the scratch buffer, NUL-terminated there */
  size_t len;
  int quoted;
};

struct record {
  size_t first; /* index of its first field */
  size_t count;
  size_t line;  /* line where it starts, 1-based */
};

struct parser {
  const char *path;
  const char *s;
  size_t len, pos, line;
  char *scratch;
  size_t sn;
  struct field *f;
  size_t nf, capf;
  struct record *r;
  size_t nr, capr;
  struct pb_error *err;
};

static int push_field(struct parser *p, struct field fl) {
  if (p->nf == p->capf) {
    size_t cap = p->capf ? p->capf * 2 : 256;
    struct field *n = realloc(p->f, cap * sizeof *n);
    if (n == NULL) return pb_error_set(p->err, PB_ENOMEM, "%s: out of memory", p->path);
    p->f = n;
    p->capf = cap;
  }
  p->f[p->nf++] = fl;
  return PB_OK;
}

/* Parses one record starting at p->pos (which is < len). */
static int parse_record(struct parser *p) {
  struct record rec = {p->nf, 0, p->line};
  for (;;) {
    struct field fl = {p->sn, 0, 0};
    if (p->pos < p->len && p->s[p->pos] == '"') {
      fl.quoted = 1;
      p->pos++;
      for (;;) {
        if (p->pos >= p->len)
          return pb_error_set(p->err, PB_EFORMAT,
                              "%s: line %zu: quoted field is not closed before the end of file",
                              p->path, rec.line);
        char c = p->s[p->pos];
        if (c == '"') {
          if (p->pos + 1 < p->len && p->s[p->pos + 1] == '"') {
            p->scratch[p->sn++] = '"';
            p->pos += 2;
            continue;
          }
          p->pos++;
          break;
        }
        if (c == '\n') p->line++;
        p->scratch[p->sn++] = c;
        p->pos++;
      }
      if (p->pos < p->len && strchr(",\r\n", p->s[p->pos]) == NULL)
        return pb_error_set(p->err, PB_EFORMAT,
                            "%s: line %zu: unexpected '%c' after a closing quote", p->path,
                            p->line, p->s[p->pos]);
    } else {
      while (p->pos < p->len && p->s[p->pos] != ',' && p->s[p->pos] != '\n' &&
             p->s[p->pos] != '\r')
        p->scratch[p->sn++] = p->s[p->pos++];
    }
    fl.len = p->sn - fl.off;
    p->scratch[p->sn++] = '\0';
    PB_RETURN_NOT_OK(push_field(p, fl));
    rec.count++;
    if (p->pos < p->len && p->s[p->pos] == ',') {
      p->pos++;
      continue;
    }
    if (p->pos < p->len && p->s[p->pos] == '\r') p->pos++;
    if (p->pos < p->len && p->s[p->pos] == '\n') {
      p->pos++;
      p->line++;
    }
    break;
  }
  if (p->nr == p->capr) {
    size_t cap = p->capr ? p->capr * 2 : 256;
    struct record *n = realloc(p->r, cap * sizeof *n);
    if (n == NULL) return pb_error_set(p->err, PB_ENOMEM, "%s: out of memory", p->path);
    p->r = n;
    p->capr = cap;
  }
  p->r[p->nr++] = rec;
  return PB_OK;
}

/* Undoes the escapes of the older layout's comment lines on s[0..n) into dst (NUL-terminated); stops at an unescaped ':' when
 * is_key. Returns how many input bytes were consumed. */
static size_t unescape(const char *s, size_t n, char *dst, int is_key) {
  size_t i = 0, o = 0;
  while (i < n) {
    char c = s[i];
    if (c == ':' && is_key) break;
    if (c == '\\' && i + 1 < n) {
      char e = s[i + 1];
      dst[o++] = e == 'n' ? '\n' : e == 'r' ? '\r' : e;
      i += 2;
      continue;
    }
    dst[o++] = c;
    i++;
  }
  dst[o] = '\0';
  return i;
}

static int parse_i64(const char *s, int64_t *v) {
  if (*s == '\0') return 0;
  char *end;
  errno = 0;
  long long x = strtoll(s, &end, 10);
  if (errno != 0 || *end != '\0') return 0;
  *v = (int64_t)x;
  return 1;
}

static int parse_f64(const char *s, double *v) {
  if (*s == '\0') return 0;
  char *end;
  errno = 0;
  double x = strtod(s, &end);
  if (*end != '\0') return 0;
  *v = x;
  return 1;
}

static int parse_bool(const char *s, int *v, int strict) {
  if (strcasecmp(s, "true") == 0 || (!strict && strcmp(s, "1") == 0)) {
    *v = 1;
    return 1;
  }
  if (strcasecmp(s, "false") == 0 || (!strict && strcmp(s, "0") == 0)) {
    *v = 0;
    return 1;
  }
  return 0;
}

/* Infers a column's type from its non-NULL values: int64, else double, else bool, else string. */
static pb_col_type infer(const struct parser *p, size_t col) {
  int can_i = 1, can_d = 1, can_b = 1, any = 0;
  for (size_t r = 1; r < p->nr; r++) {
    const struct field *fl = &p->f[p->r[r].first + col];
    const char *s = p->scratch + fl->off;
    if (fl->len == 0) {
      if (fl->quoted) return PB_COL_STRING; /* "" is an empty string, not a NULL */
      continue;
    }
    any = 1;
    int64_t i;
    double d;
    int b;
    if (can_i && !parse_i64(s, &i)) can_i = 0;
    if (can_d && !parse_f64(s, &d)) can_d = 0;
    if (can_b && !parse_bool(s, &b, 1)) can_b = 0;
    if (!can_i && !can_d && !can_b) return PB_COL_STRING;
  }
  if (!any) return PB_COL_STRING;
  return can_i ? PB_COL_INT64 : can_d ? PB_COL_DOUBLE : can_b ? PB_COL_BOOL : PB_COL_STRING;
}

static int fill(struct parser *p, pb_table *t) {
  for (size_t r = 1; r < p->nr; r++) {
    const struct record *rec = &p->r[r];
    if (rec->count != t->ncols)
      return pb_error_set(p->err, PB_EFORMAT, "%s: line %zu has %zu field%s, the header has %zu",
                          p->path, rec->line, rec->count, rec->count == 1 ? "" : "s", t->ncols);
    PB_RETURN_NOT_OK(pb_table_append_row(t));
    for (size_t c = 0; c < t->ncols; c++) {
      const struct field *fl = &p->f[rec->first + c];
      const char *s = p->scratch + fl->off;
      pb_col_type type = t->cols[c].type;
      if (fl->len == 0 && (!fl->quoted || type != PB_COL_STRING)) continue; /* NULL */
      int rc = PB_OK, ok = 1;
      switch (type) {
        case PB_COL_STRING: rc = pb__table_put_str(t, c, s, fl->len); break;
        case PB_COL_INT64: {
          int64_t v;
          ok = parse_i64(s, &v);
          if (ok) rc = pb__table_put_i64(t, c, v);
          break;
        }
        case PB_COL_DOUBLE: {
          double v;
          ok = parse_f64(s, &v);
          if (ok) rc = pb__table_put_f64(t, c, v);
          break;
        }
        case PB_COL_BOOL: {
          int v;
          ok = parse_bool(s, &v, 0);
          if (ok) rc = pb__table_put_bool(t, c, v);
          break;
        }
      }
      if (!ok)
        return pb_error_set(p->err, PB_EFORMAT, "%s: line %zu, column '%s': '%.64s' is not a valid %s",
                            p->path, rec->line, t->cols[c].name, s, pb__col_type_name(type));
      if (rc != 0) return pb_error_set(p->err, rc, "%s: out of memory", p->path);
    }
  }
  return PB_OK;
}

/* Parses "a,b,c" type names; returns how many, or -1 when one is unknown. */
static long parse_types(const char *s, pb_col_type **types) {
  *types = NULL;
  size_t n = 0, cap = 0;
  while (*s == ' ') s++;
  if (*s == '\0') return 0;
  for (;;) {
    const char *e = strchr(s, ',');
    size_t len = e ? (size_t)(e - s) : strlen(s);
    while (len > 0 && (s[len - 1] == ' ' || s[len - 1] == '\r')) len--;
    int ty = pb__col_type_parse(s, len);
    if (ty < 0) {
      free(*types);
      *types = NULL;
      return -1;
    }
    if (n == cap) {
      cap = cap ? cap * 2 : 16;
      pb_col_type *nt = realloc(*types, cap * sizeof *nt);
      if (nt == NULL) {
        free(*types);
        *types = NULL;
        return -1;
      }
      *types = nt;
    }
    (*types)[n++] = (pb_col_type)ty;
    if (e == NULL) break;
    s = e + 1;
    while (*s == ' ') s++;
  }
  return (long)n;
}

int pb__csv_read(const char *path, pb_table **out, struct pb_error *err) {
  *out = NULL;
  void *raw;
  size_t len;
  PB_RETURN_NOT_OK(pb__read_file(path, &raw, &len, err));
  char *data = raw;
  struct parser p = {0};
  p.path = path;
  p.s = data;
  p.len = len;
  p.line = 1;
  p.err = err;
  pb_table *t = NULL;
  char *types_text = NULL;
  int rc = pb_table_new(&t);
  p.scratch = malloc(2 * len + 2);
  if (rc == 0 && p.scratch == NULL) rc = PB_ENOMEM;
  if (rc != 0) rc = pb_error_set(err, PB_ENOMEM, "%s: out of memory", path);
  /* Leading comment lines: metadata, the last "types" one gives the column types. */
  while (rc == 0 && p.pos < len && data[p.pos] == '#') {
    const char *ls = data + p.pos + 1;
    const char *nl = memchr(ls, '\n', len - p.pos - 1);
    size_t n = nl ? (size_t)(nl - ls) : len - p.pos - 1;
    p.pos += n + 1 + (nl ? 1 : 0);
    p.line++;
    if (n > 0 && ls[n - 1] == '\r') n--;
    if (n > 0 && ls[0] == ' ') {
      ls++;
      n--;
    }
    char *key = malloc(n + 1), *val = malloc(n + 1);
    if (key == NULL || val == NULL) {
      free(key);
      free(val);
      rc = pb_error_set(err, PB_ENOMEM, "%s: out of memory", path);
      break;
    }
    size_t used = unescape(ls, n, key, 1);
    if (used < n) { /* stopped at ':'; otherwise a plain comment */
      size_t vs = used + 1;
      if (vs < n && ls[vs] == ' ') vs++;
      unescape(ls + vs, n - vs, val, 0);
      /* Only the last "types" line gives the types; an earlier one was user metadata. */
      if (types_text != NULL) {
        rc = pb_table_set_meta(t, "types", types_text);
        free(types_text);
        types_text = NULL;
      }
      if (strcmp(key, "types") == 0) {
        types_text = val;
        val = NULL;
      } else if (rc == 0) {
        rc = pb_table_set_meta(t, key, val);
      }
      if (rc != 0) rc = pb_error_set(err, rc, "%s: out of memory", path);
    }
    free(key);
    free(val);
  }
  if (rc == 0 && p.pos >= len)
    rc = pb_error_set(err, PB_EFORMAT, "%s: no header line (empty CSV file)", path);
  pb_col_type *types = NULL;
  long ntypes = -1;
  /* no comment lines (pipebench's layout since they went): the sidecar, when it is this
   * file's */
  if (rc == 0 && types_text == NULL && pb_table_meta_count(t) == 0)
    (void)read_sidecar(path, data, len, t, &types, &ntypes);
  if (rc == 0 && types_text != NULL) {
    ntypes = parse_types(types_text, &types);
    if (ntypes < 0) { /* not ours: keep it as metadata and infer */
      rc = pb_table_set_meta(t, "types", types_text);
      if (rc != 0) rc = pb_error_set(err, rc, "%s: out of memory", path);
    }
  }
  while (rc == 0 && p.pos < len) rc = parse_record(&p);
  if (rc == 0) {
    size_t ncols = p.r[0].count;
    /* A table of no columns writes an empty header line. */
    if (ntypes == 0 && ncols == 1 && p.f[0].len == 0 && !p.f[0].quoted) ncols = 0;
    if (ntypes > 0 && (size_t)ntypes != ncols)
      rc = pb_error_set(err, PB_EFORMAT, "%s: the types line names %ld columns, the header has %zu",
                        path, ntypes, ncols);
    for (size_t c = 0; c < ncols && rc == 0; c++) {
      const char *name = p.scratch + p.f[c].off;
      /* Check counts before inferring, so inference never reads past a short record. */
      if (c == 0)
        for (size_t r = 1; r < p.nr && rc == 0; r++)
          if (p.r[r].count != ncols)
            rc = pb_error_set(err, PB_EFORMAT, "%s: line %zu has %zu field%s, the header has %zu",
                              path, p.r[r].line, p.r[r].count, p.r[r].count == 1 ? "" : "s",
                              ncols);
      if (rc != 0) break;
      pb_col_type ty = ntypes > 0 ? types[c] : infer(&p, c);
      rc = pb_table_add_column(t, name, ty);
      if (rc == PB_EINVAL)
        rc = pb_error_set(err, PB_EFORMAT, "%s: column name '%s' appears twice", path, name);
      else if (rc != 0)
        rc = pb_error_set(err, rc, "%s: out of memory", path);
    }
    if (rc == 0 && ncols > 0) rc = fill(&p, t);
  }
  free(types);
  free(types_text);
  free(p.scratch);
  free(p.f);
  free(p.r);
  pb_free(data, len);
  if (rc != 0) {
    pb_table_free(t);
    return rc;
  }
  *out = t;
  return PB_OK;
}
