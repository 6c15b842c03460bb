/* The growable string and SQL quoting. */
#include "common/strbuf.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Room for need more bytes and a NUL; 0 or -1 (and oom set). */
static int reserve(pb__strbuf *b, size_t need) {
  if (b->oom) return -1;
  if (b->n + need + 1 <= b->cap) return 0;
  size_t cap = b->cap ? b->cap : 256;
  while (cap < b->n + need + 1) {
    if (cap > ((size_t)-1) / 2) {
      b->oom = 1;
      return -1;
    }
    cap *= 2;
  }
  char *np = realloc(b->p, cap);
  if (np == NULL) {
    b->oom = 1;
    return -1;
  }
  b->p = np;
  b->cap = cap;
  return 0;
}

void pb__strbuf_putn(pb__strbuf *b, const char *s, size_t n) {
  if (reserve(b, n) != 0) return;
  if (n > 0) memcpy(b->p + b->n, s, n);
  b->n += n;
  b->p[b->n] = '\0';
}

void pb__strbuf_puts(pb__strbuf *b, const char *s) { pb__strbuf_putn(b, s, strlen(s)); }

static void strbuf_vprintf(pb__strbuf *b, const char *fmt, va_list ap) {
  if (b->oom) return;
  va_list again;
  va_copy(again, ap);
  size_t room = b->cap > b->n ? b->cap - b->n : 0;
  int k = vsnprintf(room > 0 ? b->p + b->n : NULL, room, fmt, ap);
  if (k >= 0 && (size_t)k >= room && reserve(b, (size_t)k) == 0) {
    vsnprintf(b->p + b->n, b->cap - b->n, fmt, again);
  }
  va_end(again);
  if (k < 0) b->oom = 1;
  else if (!b->oom) b->n += (size_t)k; /* it fitted, or was written again after reserve */
}

void pb__strbuf_printf(pb__strbuf *b, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  strbuf_vprintf(b, fmt, ap);
  va_end(ap);
}

/* The public name (pipebench/sys.h). */
void pb_strbuf_printf(pb_strbuf *b, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  strbuf_vprintf(b, fmt, ap);
  va_end(ap);
}

void pb__strbuf_quoted(pb__strbuf *b, const char *s, char q) {
  pb__strbuf_putn(b, &q, 1);
  for (const char *p = s; *p;) {
    const char *next = strchr(p, q);
    if (next == NULL) {
      pb__strbuf_puts(b, p);
      break;
    }
    pb__strbuf_putn(b, p, (size_t)(next - p) + 1);
    pb__strbuf_putn(b, &q, 1);
    p = next + 1;
  }
  pb__strbuf_putn(b, &q, 1);
}

const char *pb__strbuf_str(const pb__strbuf *b) { return b->p != NULL ? b->p : ""; }

int pb__strbuf_status(const pb__strbuf *b) { return b->oom ? PB_ENOMEM : PB_OK; }

char *pb__strbuf_take(pb__strbuf *b) {
  char *p = b->oom ? NULL : b->p;
  if (b->oom) free(b->p);
  memset(b, 0, sizeof *b);
  return p;
}

void pb__strbuf_destroy(pb__strbuf *b) {
  if (b == NULL) return;
  free(b->p);
  memset(b, 0, sizeof *b);
}

int pb__sql_quote(char *buf, size_t size, const char *s) {
  size_t o = 0;
  if (size < 3) return PB_EINVAL;
  buf[o++] = '\'';
  for (; *s; s++) {
    if (o + 3 >= size) return PB_EINVAL;
    if (*s == '\'') buf[o++] = '\'';
    buf[o++] = *s;
  }
  buf[o++] = '\'';
  buf[o] = '\0';
  return PB_OK;
}
