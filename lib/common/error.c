/* Status codes and error messages. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "pipebench/core.h"

const char *pb_strerror(int code) {
  switch (code) {
    case PB_OK: return "success";
    case PB_EINVAL: return "invalid argument";
    case PB_ENOMEM: return "out of memory";
    case PB_EIO: return "input/output error";
    case PB_EFORMAT: return "malformed or unrecognised file";
    case PB_EUNSUPPORTED: return "not supported";
    case PB_ENOTFOUND: return "not found";
    case PB_ERANGE: return "out of range";
    case PB_EDUCKDB: return "DuckDB error";
    case PB_ECODEC: return "decompression failed";
    case PB_ECANCELED: return "interrupted";
    case PB_ESTATE: return "call made in the wrong state";
    case PB_ECHILD: return "child process failed";
    default: break;
  }
  if (code < 0 && code > PB_E_FIRST) return strerror(-code);
  return "unknown error";
}

int pb_error_set(struct pb_error *err, int code, const char *fmt, ...) {
  if (err != NULL) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->message, sizeof err->message, fmt, ap);
    va_end(ap);
  }
  return code;
}

void pb_error_prefix(struct pb_error *err, const char *fmt, ...) {
  if (err == NULL) return;
  char prefix[512];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(prefix, sizeof prefix, fmt, ap);
  va_end(ap);
  char old[sizeof err->message];
  memcpy(old, err->message, sizeof old);
  old[sizeof old - 1] = '\0';
  snprintf(err->message, sizeof err->message, "%s%s", prefix, old);
}
