/* The one growable string: SQL, OME-XML, HTML and JSON text are built with it. A failed
 * allocation is remembered and makes later appends do nothing, so a builder checks once, at
 * the end. Internal. */
#ifndef PB_COMMON_STRBUF_H
#define PB_COMMON_STRBUF_H

#include <stddef.h>

#include "pipebench/core.h"
#include "pipebench/sys.h"

/** Zero-initialise (`pb__strbuf b = {0};`); release with pb__strbuf_destroy. p is NULL or
 * NUL-terminated; n bytes are used. */
typedef pb_strbuf pb__strbuf; /* the public pb_strbuf (pipebench/sys.h) */

void pb__strbuf_putn(pb__strbuf *b, const char *s, size_t n);
void pb__strbuf_puts(pb__strbuf *b, const char *s);
/** printf-style append (any length). */
void pb__strbuf_printf(pb__strbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/** Appends s between two q characters, doubling each q inside: an SQL literal with '\'', an SQL
 * identifier with '"'. */
void pb__strbuf_quoted(pb__strbuf *b, const char *s, char q);
/** The text so far ("" when nothing was appended). */
const char *pb__strbuf_str(const pb__strbuf *b);
/** PB_ENOMEM when an append failed, else 0. */
int pb__strbuf_status(const pb__strbuf *b);
/** Hands the text to the caller (free() it; NULL when nothing was appended or an append failed)
 * and leaves b empty. */
char *pb__strbuf_take(pb__strbuf *b);
void pb__strbuf_destroy(pb__strbuf *b);

/** Writes s as a single-quoted SQL literal ('' for ') into a fixed buf. PB_EINVAL when it does
 * not fit. */
int pb__sql_quote(char *buf, size_t size, const char *s);

#endif
