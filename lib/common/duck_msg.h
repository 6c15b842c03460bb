/* DuckDB's error text for people: DuckDB appends the query with a caret ("\n\nLINE 1: ..."),
 * and pipebench's own SQL is no help to the reader of an error about their file. Internal. */
#ifndef PB_CORE_DUCK_MSG_H
#define PB_CORE_DUCK_MSG_H

#include <string.h>

/** Length of m up to the echoed query (m may be NULL: the fallback text's length). */
static inline int pb__duck_msg_len(const char *m) {
  if (m == NULL) return (int)strlen("DuckDB error");
  const char *ctx = strstr(m, "\n\nLINE ");
  size_t n = ctx != NULL ? (size_t)(ctx - m) : strlen(m);
  while (n > 0 && (m[n - 1] == '\n' || m[n - 1] == ' ')) n--;
  return n > 4096 ? 4096 : (int)n;
}

/** Arguments for "%.*s": DuckDB's message m without the echoed query. */
#define PB__DUCK_MSG(m) pb__duck_msg_len(m), ((m) != NULL ? (m) : "DuckDB error")

#endif
