/* The Parquet footer parser (see pq_footer.h). Written from the Parquet format specification
 * (parquet.thrift: FileMetaData, SchemaElement, RowGroup, ColumnChunk, ColumnMetaData,
 * Statistics, KeyValue) and the Thrift compact protocol specification. Fields are read only
 * when their wire type is the one the specification gives (others are skipped, as Thrift's own
 * readers do); unknown fields are skipped, so footers of newer writers still parse. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/checked.h"
#include "common/vec.h"
#include "io/io.h"
#include "parquet/pq_footer.h"

/* Thrift compact wire types. */
enum { T_TRUE = 1, T_FALSE = 2, T_I8 = 3, T_I16 = 4, T_I32 = 5, T_I64 = 6, T_DOUBLE = 7,
       T_BINARY = 8, T_LIST = 9, T_SET = 10, T_MAP = 11, T_STRUCT = 12 };

#define MAX_NEST 32   /* structs and containers inside each other while skipping */
#define MAX_SCHEMA 64 /* depth of the schema tree */
#define MAX_CTX 8

/* ---- the reader: bytes, the first failure, and where in the footer it happened ------------ */

typedef struct fr {
  const uint8_t *p, *end;
  int bad;
  const char *why;
  char where[192];
  const char *ctx[MAX_CTX]; /* names of the fields being read, outermost first */
  int64_t idx[MAX_CTX];     /* element index of each, -1 when not a list element */
  int depth;
} fr;

static void ctx_push(fr *r, const char *name, int64_t idx) {
  if (r->depth < MAX_CTX) {
    r->ctx[r->depth] = name;
    r->idx[r->depth] = idx;
  }
  r->depth++;
}

static void ctx_pop(fr *r) { r->depth--; }

static void fail(fr *r, const char *why) {
  if (r->bad) return;
  r->bad = 1;
  r->why = why;
  size_t at = 0;
  r->where[0] = '\0';
  for (int k = 0; k < r->depth && k < MAX_CTX && at < sizeof r->where; k++) {
    int w = r->idx[k] >= 0 ? snprintf(r->where + at, sizeof r->where - at, "%s%s[%lld]",
                                      k ? "." : "", r->ctx[k], (long long)r->idx[k])
                           : snprintf(r->where + at, sizeof r->where - at, "%s%s",
                                      k ? "." : "", r->ctx[k]);
    if (w < 0) break;
    at += (size_t)w;
  }
  if (r->where[0] == '\0') snprintf(r->where, sizeof r->where, "FileMetaData");
}

static size_t left(const fr *r) { return (size_t)(r->end - r->p); }

static uint64_t rd_uvar(fr *r) {
  uint64_t v = 0;
  for (int s = 0; s < 70; s += 7) {
    if (r->p >= r->end) {
      fail(r, "truncated");
      return 0;
    }
    uint8_t b = *r->p++;
    if (s == 63 && (b & 0x7e) != 0) break; /* more than 64 bits */
    v |= (uint64_t)(b & 0x7f) << s;
    if ((b & 0x80) == 0) return v;
  }
  fail(r, "a varint longer than 64 bits");
  return 0;
}

static int64_t rd_zigzag(fr *r) {
  uint64_t v = rd_uvar(r);
  return (int64_t)(v >> 1) ^ -(int64_t)(v & 1);
}

static int32_t rd_i32(fr *r) {
  int64_t v = rd_zigzag(r);
  if (v < INT32_MIN || v > INT32_MAX) {
    fail(r, "an i32 out of range");
    return 0;
  }
  return (int32_t)v;
}

/* A binary or string: its bytes stay in the footer; *n is checked against what is left. */
static const uint8_t *rd_binary(fr *r, size_t *n) {
  uint64_t len = rd_uvar(r);
  *n = 0;
  if (r->bad) return NULL;
  if (len > left(r)) {
    fail(r, "a length past the end of the footer");
    return NULL;
  }
  const uint8_t *b = r->p;
  r->p += len;
  *n = (size_t)len;
  return b;
}

static char *rd_string(fr *r) {
  size_t n;
  const uint8_t *b = rd_binary(r, &n);
  if (r->bad) return NULL;
  char *s = malloc(n + 1);
  if (s == NULL) {
    fail(r, "out of memory");
    return NULL;
  }
  if (n > 0) memcpy(s, b, n);
  s[n] = '\0';
  return s;
}

/* A list or set header: its element type and count; the count is at most the bytes left, as
 * every element takes at least one byte. */
static uint64_t rd_list(fr *r, int *etype) {
  if (r->p >= r->end) {
    fail(r, "truncated");
    return 0;
  }
  uint8_t h = *r->p++;
  uint64_t n = h >> 4;
  *etype = h & 15;
  if (n == 15) n = rd_uvar(r);
  if (r->bad) return 0;
  if (n > left(r)) {
    fail(r, "a list count past the end of the footer");
    return 0;
  }
  return n;
}

/* A field header: 0 at the struct's end, else 1 with *id and *type. */
static int rd_field(fr *r, int *last, int *id, int *type) {
  if (r->p >= r->end) {
    fail(r, "truncated (no end of struct)");
    return 0;
  }
  uint8_t h = *r->p++;
  if (h == 0) return 0;
  *type = h & 15;
  if ((h >> 4) == 0) {
    int64_t v = rd_zigzag(r);
    if (v < INT16_MIN || v > INT16_MAX) fail(r, "a field id out of range");
    *id = (int)v;
  } else {
    *id = *last + (h >> 4);
  }
  *last = *id;
  if (*type == 0 || *type > T_STRUCT) fail(r, "an unknown field type");
  return !r->bad;
}

static void skip(fr *r, int type, int nest);

static void skip_struct(fr *r, int nest) {
  int last = 0, id, type;
  while (!r->bad && rd_field(r, &last, &id, &type)) skip(r, type, nest + 1);
}

static void skip_bytes(fr *r, uint64_t n) {
  if (n > left(r)) fail(r, "truncated");
  else r->p += n;
}

static void skip(fr *r, int type, int nest) {
  if (nest > MAX_NEST) {
    fail(r, "nested too deeply");
    return;
  }
  switch (type) {
  case T_TRUE: case T_FALSE: return; /* a boolean field carries its value in the type */
  case T_I8: skip_bytes(r, 1); return;
  case T_I16: case T_I32: case T_I64: rd_uvar(r); return;
  case T_DOUBLE: skip_bytes(r, 8); return;
  case T_BINARY: skip_bytes(r, rd_uvar(r)); return;
  case T_LIST: case T_SET: {
    int et;
    uint64_t n = rd_list(r, &et);
    for (uint64_t k = 0; k < n && !r->bad; k++) {
      if (et == T_TRUE || et == T_FALSE) skip_bytes(r, 1); /* one byte per boolean element */
      else skip(r, et, nest + 1);
    }
    return;
  }
  case T_MAP: {
    uint64_t n = rd_uvar(r);
    if (n == 0 || r->bad) return;
    if (n > left(r)) {
      fail(r, "a map count past the end of the footer");
      return;
    }
    uint8_t kv = *r->p++;
    for (uint64_t k = 0; k < n && !r->bad; k++) {
      int kt = kv >> 4, vt = kv & 15;
      if (kt == T_TRUE || kt == T_FALSE) skip_bytes(r, 1);
      else skip(r, kt, nest + 1);
      if (vt == T_TRUE || vt == T_FALSE) skip_bytes(r, 1);
      else skip(r, vt, nest + 1);
    }
    return;
  }
  case T_STRUCT: skip_struct(r, nest + 1); return;
  default: fail(r, "an unknown field type"); return;
  }
}

/* Reads an integer field of the expected wire type into *dst, or skips a field of another type
 * (Thrift readers ignore a field whose type is not the declared one). */
static void rd_int_field(fr *r, int type, int want, const char *name, int64_t *dst, int *seen) {
  if (type != want) {
    skip(r, type, 1);
    return;
  }
  ctx_push(r, name, -1);
  *dst = want == T_I32 ? rd_i32(r) : rd_zigzag(r);
  ctx_pop(r);
  if (seen != NULL) *seen = 1;
}

static void need(fr *r, int seen, const char *name) {
  if (!seen && !r->bad) {
    ctx_push(r, name, -1);
    fail(r, "required but absent");
    ctx_pop(r);
  }
}

/* ---- schema --------------------------------------------------------------------------------- */

/* LogicalType is a union: the id of the field it holds (its content is skipped). */
static int32_t rd_logical(fr *r) {
  int last = 0, id, type;
  int32_t which = 0;
  while (!r->bad && rd_field(r, &last, &id, &type)) {
    if (which == 0 && type == T_STRUCT) which = id;
    skip(r, type, 2);
  }
  return which;
}

static void rd_node(fr *r, pb__pq_node *e) {
  memset(e, 0, sizeof *e);
  e->type = e->type_length = e->repetition = e->num_children = e->converted_type = -1;
  e->scale = e->precision = e->field_id = e->parent = e->leaf = -1;
  static const char *const names[] = {"", "type", "type_length", "repetition_type", "name",
                                      "num_children", "converted_type", "scale", "precision",
                                      "field_id"};
  int last = 0, id, type;
  while (!r->bad && rd_field(r, &last, &id, &type)) {
    if (id >= 1 && id <= 9 && id != 4) {
      int64_t v = -1;
      rd_int_field(r, type, T_I32, names[id], &v, NULL);
      int32_t *dst[] = {NULL, &e->type, &e->type_length, &e->repetition, NULL, &e->num_children,
                        &e->converted_type, &e->scale, &e->precision, &e->field_id};
      if (type == T_I32) *dst[id] = (int32_t)v;
    } else if (id == 4 && type == T_BINARY && e->name == NULL) {
      ctx_push(r, "name", -1);
      e->name = rd_string(r);
      ctx_pop(r);
    } else if (id == 10 && type == T_STRUCT) {
      ctx_push(r, "logicalType", -1);
      e->logical = rd_logical(r);
      ctx_pop(r);
    } else {
      skip(r, type, 1);
    }
  }
  need(r, e->name != NULL, "name");
}

static void rd_schema(fr *r, pb__pq_meta *m) {
  int et;
  uint64_t n = rd_list(r, &et);
  if (!r->bad && (et != T_STRUCT || n == 0)) fail(r, "not a non-empty list of structs");
  size_t cap = 0;
  for (uint64_t k = 0; k < n && !r->bad; k++) {
    if (pb__vec_reserve((void **)&m->nodes, &cap, m->n_nodes + 1, sizeof *m->nodes) != 0) {
      fail(r, "out of memory");
      break;
    }
    ctx_push(r, "schema", (int64_t)k);
    rd_node(r, &m->nodes[m->n_nodes++]);
    ctx_pop(r);
  }
}

/* Walks the flattened schema tree: parents, leaves and their levels. */
static void build_tree(fr *r, pb__pq_meta *m) {
  int32_t stack[MAX_SCHEMA];
  int64_t kids[MAX_SCHEMA];
  int top = 0;
  size_t n_leaves = 0;
  ctx_push(r, "schema", 0);
  pb__pq_node *root = &m->nodes[0];
  if (root->num_children < 1) fail(r, "the root has no children");
  stack[0] = 0;
  kids[0] = root->num_children;
  for (size_t i = 1; i < m->n_nodes && !r->bad; i++) {
    r->idx[0] = (int64_t)i;
    while (top > 0 && kids[top] == 0) top--;
    if (kids[top] == 0) {
      fail(r, "a node past the root's children");
      break;
    }
    kids[top]--;
    pb__pq_node *e = &m->nodes[i], *p = &m->nodes[stack[top]];
    e->parent = stack[top];
    e->max_def = p->max_def;
    e->max_rep = p->max_rep;
    if (e->repetition == 1) e->max_def++;
    else if (e->repetition == 2) {
      e->max_def++;
      e->max_rep++;
    } else if (e->repetition != 0) {
      fail(r, "repetition_type absent or unknown");
    }
    if (e->num_children > 0) {
      if (top + 1 >= MAX_SCHEMA) {
        fail(r, "the schema is nested too deeply");
        break;
      }
      stack[++top] = (int32_t)i;
      kids[top] = e->num_children;
    } else if (e->type < 0) {
      fail(r, "a leaf without a type");
    } else {
      e->leaf = (int32_t)n_leaves++;
    }
  }
  while (!r->bad && top >= 0 && kids[top] == 0) top--;
  if (!r->bad && top >= 0) {
    r->idx[0] = (int64_t)m->n_nodes;
    fail(r, "fewer nodes than num_children claims");
  }
  ctx_pop(r);
  if (r->bad) return;
  m->n_leaves = n_leaves;
  m->leaf_node = malloc((n_leaves ? n_leaves : 1) * sizeof *m->leaf_node);
  if (m->leaf_node == NULL) {
    fail(r, "out of memory");
    return;
  }
  for (size_t i = 0; i < m->n_nodes; i++)
    if (m->nodes[i].leaf >= 0) m->leaf_node[m->nodes[i].leaf] = i;
}

/* ---- row groups ----------------------------------------------------------------------------- */

/* Whether path_in_schema (a list of strings, read here) names leaf k. */
static int rd_path(fr *r, const pb__pq_meta *m, size_t k) {
  int et;
  uint64_t n = rd_list(r, &et);
  if (!r->bad && et != T_BINARY) fail(r, "not a list of strings");
  int same = k < m->n_leaves;
  /* the leaf's names, outermost first: walk up from the leaf, then compare in reverse */
  size_t chain[MAX_SCHEMA], depth = 0;
  if (same)
    for (int32_t i = (int32_t)m->leaf_node[k]; i > 0 && depth < MAX_SCHEMA;
         i = m->nodes[i].parent)
      chain[depth++] = (size_t)i;
  if (n != depth) same = 0;
  for (uint64_t j = 0; j < n && !r->bad; j++) {
    size_t len;
    const uint8_t *s = rd_binary(r, &len);
    if (same) {
      const char *name = m->nodes[chain[depth - 1 - j]].name;
      same = strlen(name) == len && memcmp(name, s, len) == 0;
    }
  }
  return same;
}

static void rd_stats(fr *r, pb__pq_chunk *c) {
  int last = 0, id, type;
  while (!r->bad && rd_field(r, &last, &id, &type)) {
    if (id == 3) rd_int_field(r, type, T_I64, "null_count", &c->null_count, NULL);
    else skip(r, type, 3);
  }
}

static void rd_col_meta(fr *r, const pb__pq_meta *m, size_t k, pb__pq_chunk *c) {
  int last = 0, id, type, seen[10] = {0};
  int64_t v;
  while (!r->bad && rd_field(r, &last, &id, &type)) {
    switch (id) {
    case 1: rd_int_field(r, type, T_I32, "type", &v, &seen[1]); c->type = (int32_t)v; break;
    case 2:
      if (type != T_LIST) {
        skip(r, type, 2);
        break;
      }
      ctx_push(r, "encodings", -1);
      int et;
      uint64_t n = rd_list(r, &et);
      if (!r->bad && et != T_I32) fail(r, "not a list of i32");
      for (uint64_t j = 0; j < n && !r->bad; j++) {
        int32_t e = rd_i32(r);
        if (e >= 0 && e < 32) c->encodings |= 1u << e;
      }
      ctx_pop(r);
      seen[2] = 1;
      break;
    case 3:
      if (type != T_LIST) {
        skip(r, type, 2);
        break;
      }
      ctx_push(r, "path_in_schema", -1);
      if (!rd_path(r, m, k) && !r->bad)
        fail(r, "does not name the schema's leaf of this position");
      ctx_pop(r);
      seen[3] = 1;
      break;
    case 4: rd_int_field(r, type, T_I32, "codec", &v, &seen[4]); c->codec = (int32_t)v; break;
    case 5: rd_int_field(r, type, T_I64, "num_values", &c->num_values, &seen[5]); break;
    case 6:
      rd_int_field(r, type, T_I64, "total_uncompressed_size", &c->total_uncompressed_size,
                   &seen[6]);
      break;
    case 7:
      rd_int_field(r, type, T_I64, "total_compressed_size", &c->total_compressed_size,
                   &seen[7]);
      break;
    case 9:
      rd_int_field(r, type, T_I64, "data_page_offset", &c->data_page_offset, &seen[9]);
      break;
    case 10: rd_int_field(r, type, T_I64, "index_page_offset", &c->index_page_offset, NULL); break;
    case 11:
      rd_int_field(r, type, T_I64, "dictionary_page_offset", &c->dictionary_page_offset, NULL);
      break;
    case 12:
      if (type != T_STRUCT) {
        skip(r, type, 2);
        break;
      }
      ctx_push(r, "statistics", -1);
      rd_stats(r, c);
      ctx_pop(r);
      break;
    default: skip(r, type, 2); break;
    }
  }
  static const char *const req[] = {"", "type", "encodings", "path_in_schema", "codec",
                                    "num_values", "total_uncompressed_size",
                                    "total_compressed_size", "", "data_page_offset"};
  for (int f = 1; f <= 9; f++)
    if (f != 8) need(r, seen[f], req[f]);
}

static void rd_chunk(fr *r, const pb__pq_meta *m, size_t k, pb__pq_chunk *c) {
  memset(c, 0, sizeof *c);
  c->index_page_offset = c->dictionary_page_offset = c->null_count = -1;
  int last = 0, id, type, has_meta = 0;
  while (!r->bad && rd_field(r, &last, &id, &type)) {
    if (id == 2) {
      rd_int_field(r, type, T_I64, "file_offset", &c->file_offset, NULL);
    } else if (id == 3 && type == T_STRUCT && !has_meta) {
      ctx_push(r, "meta_data", -1);
      rd_col_meta(r, m, k, c);
      ctx_pop(r);
      has_meta = 1;
    } else if (id == 8 || id == 9) {
      fail(r, "an encrypted column (not supported)");
    } else {
      skip(r, type, 1);
    }
  }
  need(r, has_meta, "meta_data");
}

static void rd_rowgroup(fr *r, pb__pq_meta *m, pb__pq_rowgroup *g, size_t *chunk_cap) {
  memset(g, 0, sizeof *g);
  int last = 0, id, type, seen_cols = 0, seen_size = 0, seen_rows = 0;
  while (!r->bad && rd_field(r, &last, &id, &type)) {
    if (id == 1 && type == T_LIST && !seen_cols) {
      int et;
      uint64_t n = rd_list(r, &et);
      if (!r->bad && et != T_STRUCT) fail(r, "columns: not a list of structs");
      if (!r->bad && n != m->n_leaves) {
        ctx_push(r, "columns", -1);
        fail(r, "a count other than the schema's leaves");
        ctx_pop(r);
      }
      size_t base = m->n_rgs * m->n_leaves;
      if (!r->bad && pb__vec_reserve((void **)&m->chunks, chunk_cap, base + (size_t)n,
                                     sizeof *m->chunks) != 0)
        fail(r, "out of memory");
      for (uint64_t k = 0; k < n && !r->bad; k++) {
        ctx_push(r, "columns", (int64_t)k);
        rd_chunk(r, m, (size_t)k, &m->chunks[base + k]);
        ctx_pop(r);
      }
      seen_cols = 1;
    } else if (id == 2) {
      rd_int_field(r, type, T_I64, "total_byte_size", &g->total_byte_size, &seen_size);
    } else if (id == 3) {
      rd_int_field(r, type, T_I64, "num_rows", &g->num_rows, &seen_rows);
    } else {
      skip(r, type, 1);
    }
  }
  need(r, seen_cols, "columns");
  need(r, seen_size, "total_byte_size");
  need(r, seen_rows, "num_rows");
  if (!r->bad && g->num_rows < 0) {
    ctx_push(r, "num_rows", -1);
    fail(r, "negative");
    ctx_pop(r);
  }
}

static void rd_rowgroups(fr *r, pb__pq_meta *m) {
  int et;
  uint64_t n = rd_list(r, &et);
  if (!r->bad && et != T_STRUCT) fail(r, "not a list of structs");
  size_t cap = 0, chunk_cap = 0;
  int64_t rows = 0;
  for (uint64_t g = 0; g < n && !r->bad; g++) {
    if (pb__vec_reserve((void **)&m->rgs, &cap, m->n_rgs + 1, sizeof *m->rgs) != 0) {
      fail(r, "out of memory");
      break;
    }
    ctx_push(r, "row_groups", (int64_t)g);
    pb__pq_rowgroup *rg = &m->rgs[m->n_rgs];
    rd_rowgroup(r, m, rg, &chunk_cap);
    rg->first_row = rows;
    if (!r->bad && !pb__add_i64_ok(rows, rg->num_rows, &rows)) fail(r, "row counts overflow");
    ctx_pop(r);
    m->n_rgs++;
  }
}

static void rd_kvs(fr *r, pb__pq_meta *m) {
  int et;
  uint64_t n = rd_list(r, &et);
  if (!r->bad && et != T_STRUCT) fail(r, "not a list of structs");
  size_t cap = 0;
  for (uint64_t k = 0; k < n && !r->bad; k++) {
    if (pb__vec_reserve((void **)&m->kv, &cap, m->n_kv + 1, sizeof *m->kv) != 0) {
      fail(r, "out of memory");
      break;
    }
    ctx_push(r, "key_value_metadata", (int64_t)k);
    pb__pq_kv *kv = &m->kv[m->n_kv++];
    kv->key = kv->value = NULL;
    int last = 0, id, type;
    while (!r->bad && rd_field(r, &last, &id, &type)) {
      char **dst = id == 1 ? &kv->key : id == 2 ? &kv->value : NULL;
      if (dst != NULL && type == T_BINARY && *dst == NULL) {
        ctx_push(r, id == 1 ? "key" : "value", -1);
        *dst = rd_string(r);
        ctx_pop(r);
      } else {
        skip(r, type, 2);
      }
    }
    need(r, kv->key != NULL, "key");
    ctx_pop(r);
  }
}

/* ---- FileMetaData --------------------------------------------------------------------------- */

static void rd_file(fr *r, pb__pq_meta *m) {
  int last = 0, id, type, seen_ver = 0, seen_schema = 0, seen_rows = 0, seen_rgs = 0;
  int64_t v = 0;
  while (!r->bad && rd_field(r, &last, &id, &type)) {
    if (id == 1) {
      rd_int_field(r, type, T_I32, "version", &v, &seen_ver);
      m->version = (int32_t)v;
    } else if (id == 2 && type == T_LIST && !seen_schema) {
      rd_schema(r, m);
      if (!r->bad) build_tree(r, m);
      seen_schema = 1;
    } else if (id == 3) {
      rd_int_field(r, type, T_I64, "num_rows", &m->num_rows, &seen_rows);
    } else if (id == 4 && type == T_LIST && !seen_rgs) {
      if (!seen_schema) {
        ctx_push(r, "row_groups", -1);
        fail(r, "before the schema");
        ctx_pop(r);
        break;
      }
      rd_rowgroups(r, m);
      seen_rgs = 1;
    } else if (id == 5 && type == T_LIST && m->kv == NULL) {
      rd_kvs(r, m);
    } else if (id == 6 && type == T_BINARY && m->created_by == NULL) {
      ctx_push(r, "created_by", -1);
      m->created_by = rd_string(r);
      ctx_pop(r);
    } else {
      skip(r, type, 1);
    }
  }
  need(r, seen_ver, "version");
  need(r, seen_schema, "schema");
  need(r, seen_rows, "num_rows");
  need(r, seen_rgs, "row_groups");
}

void pb__pq_meta_destroy(pb__pq_meta *m) {
  if (m == NULL) return;
  for (size_t i = 0; i < m->n_nodes; i++) free(m->nodes[i].name);
  for (size_t i = 0; i < m->n_kv; i++) {
    free(m->kv[i].key);
    free(m->kv[i].value);
  }
  free(m->nodes);
  free(m->leaf_node);
  free(m->rgs);
  free(m->chunks);
  free(m->kv);
  free(m->created_by);
  memset(m, 0, sizeof *m);
}

int pb__pq_meta_parse(const uint8_t *buf, size_t n, const char *path, pb__pq_meta *m,
                      struct pb_error *err) {
  memset(m, 0, sizeof *m);
  fr r;
  memset(&r, 0, sizeof r);
  r.p = buf;
  r.end = buf + n;
  rd_file(&r, m);
  if (!r.bad && r.p != r.end) fail(&r, "bytes after the end of FileMetaData");
  if (r.bad) {
    int oom = strcmp(r.why, "out of memory") == 0;
    pb__pq_meta_destroy(m);
    return pb_error_set(err, oom ? PB_ENOMEM : PB_EFORMAT,
                        "%s: Parquet footer, %s: %s (at byte %zu of %zu)", path, r.where, r.why,
                        (size_t)(r.p - buf), n);
  }
  return PB_OK;
}

int pb__pq_footer_locate(const uint8_t tail[8], uint64_t file_size, const char *path,
                         uint64_t *off, uint64_t *len, struct pb_error *err) {
  if (file_size < 12)
    return pb_error_set(err, PB_EFORMAT, "%s: not a Parquet file (%llu bytes)", path,
                        (unsigned long long)file_size);
  if (memcmp(tail + 4, "PARE", 4) == 0)
    return pb_error_set(err, PB_EUNSUPPORTED, "%s: an encrypted Parquet footer (not supported)",
                        path);
  if (memcmp(tail + 4, "PAR1", 4) != 0)
    return pb_error_set(err, PB_EFORMAT, "%s: not a Parquet file (no PAR1 at its end)", path);
  uint64_t n = (uint64_t)tail[0] | (uint64_t)tail[1] << 8 | (uint64_t)tail[2] << 16 |
               (uint64_t)tail[3] << 24;
  /* the file: "PAR1", the column chunks, the footer, its length, "PAR1" */
  if (n == 0 || n > file_size - 12 || n > PB__PQ_FOOTER_MAX)
    return pb_error_set(err, PB_EFORMAT,
                        "%s: Parquet footer length %llu does not fit the file's %llu bytes%s",
                        path, (unsigned long long)n, (unsigned long long)file_size,
                        n > PB__PQ_FOOTER_MAX ? " (or the 1 GiB bound)" : "");
  *off = file_size - 8 - n;
  *len = n;
  return PB_OK;
}

static int read_at(int fd, uint8_t *dst, size_t n, uint64_t off) {
  size_t got = 0;
  while (got < n) {
    ssize_t k = pread(fd, dst + got, n - got, (off_t)(off + got));
    if (k < 0 && errno == EINTR) continue;
    if (k < 0) return -errno;
    if (k == 0) return PB_EFORMAT; /* shorter than it was a moment ago */
    got += (size_t)k;
  }
  return PB_OK;
}

/* Over a URL: the last 8 bytes, then the footer (two range requests after the open's HEAD). */
static int meta_read_url(const char *path, pb__pq_meta *m, struct pb_error *err) {
  pb_read_options o;
  pb__io_options_resolve(NULL, &o);
  pb__io_file *f;
  PB_RETURN_NOT_OK(pb__io_open(path, &o, &f, err));
  uint64_t size = pb__io_size(f), off = 0, len = 0;
  uint8_t tail[8];
  int rc = size >= 12 ? pb__io_pread(f, tail, 8, size - 8, err) : PB_OK;
  if (rc == PB_OK) rc = pb__pq_footer_locate(tail, size, path, &off, &len, err);
  uint8_t *buf = NULL;
  if (rc == PB_OK && (buf = malloc((size_t)len)) == NULL)
    rc = pb_error_set(err, PB_ENOMEM, "%s: out of memory for a %llu-byte footer", path,
                      (unsigned long long)len);
  if (rc == PB_OK) rc = pb__io_pread(f, buf, (size_t)len, off, err);
  pb__io_close(f);
  if (rc == PB_OK) rc = pb__pq_meta_parse(buf, (size_t)len, path, m, err);
  free(buf);
  return rc;
}

int pb__pq_meta_read(const char *path, pb__pq_meta *m, struct pb_error *err) {
  memset(m, 0, sizeof *m);
  if (pb__io_is_url(path)) return meta_read_url(path, m, err);
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return pb_error_set(err, -errno, "%s: %s", path, strerror(errno));
  struct stat st;
  int rc = PB_OK;
  if (fstat(fd, &st) != 0) rc = pb_error_set(err, -errno, "%s: %s", path, strerror(errno));
  else if (!S_ISREG(st.st_mode))
    rc = pb_error_set(err, PB_EFORMAT, "%s: not a regular file", path);
  uint8_t tail[8];
  uint64_t off = 0, len = 0, size = rc == PB_OK ? (uint64_t)st.st_size : 0;
  if (rc == PB_OK && size >= 12 && (rc = read_at(fd, tail, 8, size - 8)) != PB_OK)
    rc = pb_error_set(err, rc, "%s: cannot read its end: %s", path, pb_strerror(rc));
  if (rc == PB_OK) rc = pb__pq_footer_locate(tail, size, path, &off, &len, err);
  uint8_t *buf = NULL;
  if (rc == PB_OK && (buf = malloc((size_t)len)) == NULL)
    rc = pb_error_set(err, PB_ENOMEM, "%s: out of memory for a %llu-byte footer", path,
                      (unsigned long long)len);
  if (rc == PB_OK && (rc = read_at(fd, buf, (size_t)len, off)) != PB_OK)
    rc = pb_error_set(err, rc, "%s: cannot read its footer: %s", path, pb_strerror(rc));
  close(fd);
  if (rc == PB_OK) rc = pb__pq_meta_parse(buf, (size_t)len, path, m, err);
  free(buf);
  return rc;
}

size_t pb__pq_leaf_path(const pb__pq_meta *m, size_t leaf, char *buf, size_t size) {
  size_t chain[MAX_SCHEMA], depth = 0, at = 0;
  for (int32_t i = (int32_t)m->leaf_node[leaf]; i > 0 && depth < MAX_SCHEMA;
       i = m->nodes[i].parent)
    chain[depth++] = (size_t)i;
  if (size > 0) buf[0] = '\0';
  for (size_t j = depth; j-- > 0;) {
    int w = snprintf(at < size ? buf + at : NULL, at < size ? size - at : 0, "%s%s",
                     j + 1 < depth ? ", " : "", m->nodes[chain[j]].name);
    if (w > 0) at += (size_t)w;
  }
  return at;
}

int64_t pb__pq_find_leaf(const pb__pq_meta *m, const char *path) {
  char buf[2048];
  for (size_t k = 0; k < m->n_leaves; k++) {
    size_t n = pb__pq_leaf_path(m, k, buf, sizeof buf);
    if (n < sizeof buf && strcmp(buf, path) == 0) return (int64_t)k;
  }
  return -1;
}
