/* A Parquet file's footer (FileMetaData, Thrift compact protocol) parsed by pipebench itself:
 * the schema, the row groups and their column chunks (where each lies, its codec, sizes,
 * encodings and the statistics' null count), and the key-value metadata. It replaces DuckDB's
 * parquet_schema()/parquet_metadata() where pipebench needs only where column chunks lie: DuckDB
 * builds far more per row group than that, which made files of many row groups slow to open.
 * The parser works on bytes in memory (however they were read) and trusts none of them: every
 * length and count is checked against the bytes that are left, nesting is bounded, and a
 * malformed footer is PB_EFORMAT naming the file and the field. Internal; see
 * docs/format-ome-arrow.md, "The footer". */
#ifndef PB_PARQUET_PQ_FOOTER_H
#define PB_PARQUET_PQ_FOOTER_H

#include <stddef.h>
#include <stdint.h>

#include "pipebench/core.h"

/** The largest footer accepted (bytes of FileMetaData). */
#define PB__PQ_FOOTER_MAX ((uint64_t)1 << 30)

/** One node of the schema, in the footer's depth-first order (element 0 is the root). Fields
 * the footer leaves out are -1. */
typedef struct pb__pq_node {
  char *name;          /**< NUL-terminated; owned by the metadata */
  int32_t type;        /**< physical type (leaves), -1 for groups */
  int32_t type_length, repetition, num_children, converted_type, scale, precision, field_id;
  int32_t logical;     /**< the LogicalType union's field id (1 STRING, 3 LIST, ...), 0: none */
  int32_t parent;      /**< index of the parent node, -1 for the root */
  int32_t leaf;        /**< index among the leaves (column chunks), -1 for groups */
  int16_t max_def, max_rep; /**< levels of the node (the root's are 0) */
} pb__pq_node;

/** One column chunk of one row group. Absent optional fields are -1. */
typedef struct pb__pq_chunk {
  int64_t file_offset, num_values, total_uncompressed_size, total_compressed_size;
  int64_t data_page_offset, index_page_offset, dictionary_page_offset;
  int64_t null_count;     /**< statistics.null_count, -1 when absent */
  int32_t type, codec;    /**< physical type and codec, the format's numbers */
  uint32_t encodings;     /**< bit e set: encoding e is listed (encodings 0..31) */
} pb__pq_chunk;

typedef struct pb__pq_rowgroup {
  int64_t num_rows, total_byte_size;
  int64_t first_row; /**< rows of the earlier row groups */
} pb__pq_rowgroup;

typedef struct pb__pq_kv {
  char *key, *value; /**< NUL-terminated; value NULL when the footer has none */
} pb__pq_kv;

/** A parsed footer. Owned by the caller; release with pb__pq_meta_destroy. Chunk g of leaf k
 * is chunks[g * n_leaves + k]. Of the statistics only the null count is kept (pipebench
 * filters nothing by min/max), so the footer's bytes need not outlive the parse. */
typedef struct pb__pq_meta {
  int32_t version;
  int64_t num_rows;
  pb__pq_node *nodes;
  size_t n_nodes, n_leaves;
  size_t *leaf_node; /**< n_leaves entries: the node of each leaf */
  pb__pq_rowgroup *rgs;
  size_t n_rgs;
  pb__pq_chunk *chunks;
  pb__pq_kv *kv;
  size_t n_kv;
  char *created_by; /**< NULL when absent */
} pb__pq_meta;

/** Parses FileMetaData from buf[0..n) (the footer without its length and magic) into *m,
 * copying what it keeps (buf may be released afterwards). path names the file in errors.
 * On failure *m holds nothing to release. */
int pb__pq_meta_parse(const uint8_t *buf, size_t n, const char *path, pb__pq_meta *m,
                      struct pb_error *err);

/** Where the footer of a file of file_size bytes lies, from its last 8 bytes (tail): *off and
 * *len. PB_EFORMAT, naming path, when the file is too short, is not Parquet, has an encrypted
 * footer, or claims a footer longer than the file or PB__PQ_FOOTER_MAX. */
int pb__pq_footer_locate(const uint8_t tail[8], uint64_t file_size, const char *path,
                         uint64_t *off, uint64_t *len, struct pb_error *err);

/** Reads and parses the footer of the Parquet file at path. */
int pb__pq_meta_read(const char *path, pb__pq_meta *m, struct pb_error *err);

void pb__pq_meta_destroy(pb__pq_meta *m);

/** The leaf's path in the schema as DuckDB's parquet_metadata() writes it ("a, b, c") into
 * buf; the length it needs (as snprintf). */
size_t pb__pq_leaf_path(const pb__pq_meta *m, size_t leaf, char *buf, size_t size);

/** The leaf whose path (as pb__pq_leaf_path writes it) is path, or -1. */
int64_t pb__pq_find_leaf(const pb__pq_meta *m, const char *path);

#endif
