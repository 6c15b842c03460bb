/* pipebench layout: the sizes and offsets of the public structs, as this library was built.
 * Bindings that copy a struct by hand (python/pipebench uses ctypes) check their copy against
 * it when they load the library, so a field added, moved or resized in a header is an error
 * at import rather than a silently wrong read. */
#ifndef PIPEBENCH_LAYOUT_H
#define PIPEBENCH_LAYOUT_H

#include "pipebench/core.h"

#ifdef __cplusplus
extern "C" {
#endif

/** One field of a public struct: its name as the header spells it, offsetof and sizeof. */
typedef struct pb_field_layout {
  const char *name;
  size_t offset;
  size_t size;
} pb_field_layout;

/** The layout of the public struct `name` ("pb_loader_params", "pb_error", ...): *fields
 * (may be NULL) gets a static array of its *n_fields fields in declaration order (may be NULL).
 * Returns sizeof the struct, or 0 (and *fields NULL, *n_fields 0) for a name it does not
 * describe. */
PB_API size_t pb_struct_layout(const char *name, const pb_field_layout **fields, size_t *n_fields);

/** Name of the i-th struct pb_struct_layout describes (from 0), or NULL past the last. Static. */
PB_API const char *pb_struct_layout_name(size_t i);

#ifdef __cplusplus
}
#endif
#endif
