/* Option parsing and messages for every command. */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "pipebench/loader.h"
#include "pipebench/results.h"

static int find_opt(const cli_command *cmd, const char *name, size_t len) {
  for (int i = 0; cmd->opts != NULL && cmd->opts[i].name != NULL; i++)
    if (strlen(cmd->opts[i].name) == len && strncmp(cmd->opts[i].name, name, len) == 0) return i;
  return -1;
}

int cli_usage_error(const char *cmd, const char *fmt, ...) {
  va_list ap;
  fprintf(stderr, "pipebench %s: ", cmd);
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fprintf(stderr, "\ntry 'pipebench %s --help'\n", cmd);
  return CLI_USAGE;
}

int cli_fail(const char *cmd, const char *fmt, ...) {
  va_list ap;
  fprintf(stderr, "pipebench %s: ", cmd);
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputc('\n', stderr);
  return CLI_FAIL;
}

/* help with "{}" replaced by the default, into buf */
static void render_help(const cli_command *cmd, const cli_opt *o, char *buf, size_t size) {
  char dv[256];
  const char *h = o->help, *mark = strstr(h, "{}");
  if (mark == NULL) {
    snprintf(buf, size, "%s", h);
    return;
  }
  cli_default_text(cmd, o, dv, sizeof dv);
  snprintf(buf, size, "%.*s%s%s", (int)(mark - h), h, dv, mark + 2);
}

void cli_print_help(const cli_command *cmd, FILE *f) {
  fprintf(f, "usage: pipebench %s %s\n\n%s\n", cmd->name, cmd->usage, cmd->summary);
  if (cmd->details != NULL) fprintf(f, "\n%s\n", cmd->details);
  fprintf(f, "\noptions:\n");
  for (int i = 0; cmd->opts != NULL && cmd->opts[i].name != NULL; i++) {
    const cli_opt *o = &cmd->opts[i];
    char left[80], help[1024], sh[8] = "";
    if (o->short_name != 0) snprintf(sh, sizeof sh, "-%c, ", o->short_name);
    snprintf(left, sizeof left, "%s--%s%s%s", sh, o->name, o->arg ? " " : "", o->arg ? o->arg : "");
    render_help(cmd, o, help, sizeof help);
    fprintf(f, "  %-26s %s\n", left, help);
  }
  fprintf(f, "  %-26s %s\n", "--help", "show this help and exit");
}

/* Options whose placeholder names a path, and every positional argument (all are paths), must
 * not be empty: "" would resolve to the current folder or, joined with "/name", to the root. */
static int is_path_arg(const char *arg) {
  return arg != NULL && (strcmp(arg, "DIR") == 0 || strcmp(arg, "FILE") == 0 ||
                         strcmp(arg, "PATH") == 0 || strcmp(arg, "OUT") == 0);
}

static int check_empty_paths(const cli_command *cmd, cli_args *out) {
  for (int k = 0; k < out->n_opts; k++)
    if (out->set[k] && is_path_arg(cmd->opts[k].arg) && out->values[k] != NULL &&
        out->values[k][0] == '\0') {
      cli_args_free(out);
      return cli_usage_error(cmd->name, "--%s: an empty path names no file or folder",
                             cmd->opts[k].name);
    }
  for (int i = 0; i < out->n_pos; i++)
    if (out->pos[i][0] == '\0') {
      cli_args_free(out);
      return cli_usage_error(cmd->name, "an empty path names no file or folder");
    }
  return CLI_OK;
}

static int short_opt(const cli_command *cmd, char c) {
  for (int i = 0; cmd->opts != NULL && cmd->opts[i].name != NULL; i++)
    if (cmd->opts[i].short_name != 0 && cmd->opts[i].short_name == c) return i;
  return -1;
}

/* Option k was named at argv[i] (its "=value" at eq, or NULL): stores its value. Returns the
 * index of the last argument it took, or -CLI_USAGE / -CLI_FAIL (message printed, out freed). */
static int take_value(const cli_command *cmd, int argc, char **argv, int i, int k, const char *eq,
                      cli_args *out) {
  const cli_opt *o = &cmd->opts[k];
  free(out->values[k]);
  out->values[k] = NULL;
  out->set[k] = 1;
  if (o->arg == NULL) {
    if (eq != NULL) {
      cli_args_free(out);
      return -cli_usage_error(cmd->name, "option '--%s' takes no value", o->name);
    }
    return i;
  }
  int multi = strlen(o->arg) > 3 && strcmp(o->arg + strlen(o->arg) - 3, "...") == 0;
  if (eq != NULL) {
    out->values[k] = strdup(eq + 1);
  } else {
    if (i + 1 >= argc || (strncmp(argv[i + 1], "--", 2) == 0 && strlen(argv[i + 1]) > 2)) {
      cli_args_free(out);
      return -cli_usage_error(cmd->name, "option '--%s' needs a value (%s)", o->name, o->arg);
    }
    size_t total = 0;
    int j = i + 1;
    for (; j < argc; j++) {
      if (j > i + 1 && (!multi || strncmp(argv[j], "--", 2) == 0)) break;
      total += strlen(argv[j]) + 1;
    }
    char *v = malloc(total + 1);
    if (v != NULL) {
      v[0] = '\0';
      for (int m = i + 1; m < j; m++) {
        if (m > i + 1) strcat(v, ",");
        strcat(v, argv[m]);
      }
    }
    out->values[k] = v;
    i = j - 1;
  }
  if (out->values[k] == NULL) {
    cli_args_free(out);
    return -CLI_FAIL;
  }
  return i;
}

int cli_parse(const cli_command *cmd, int argc, char **argv, cli_args *out) {
  memset(out, 0, sizeof *out);
  out->cmd = cmd;
  out->opts = cmd->opts;
  for (int i = 0; cmd->opts != NULL && cmd->opts[i].name != NULL; i++) out->n_opts++;
  for (int i = 0; i < argc; i++) {
    const char *a = argv[i];
    if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
      cli_print_help(cmd, stdout);
      cli_args_free(out);
      return -1;
    }
    int k = -1;
    const char *eq = NULL;
    if (strncmp(a, "--", 2) == 0 && a[2] != '\0') {
      const char *name = a + 2;
      eq = strchr(name, '=');
      size_t len = eq ? (size_t)(eq - name) : strlen(name);
      k = find_opt(cmd, name, len);
      if (k < 0) {
        cli_args_free(out);
        return cli_usage_error(cmd->name, "unknown option '--%.*s'", (int)len, name);
      }
    } else if (a[0] == '-' && a[1] != '\0' && a[2] == '\0') {
      k = short_opt(cmd, a[1]); /* "-x" of a table entry; anything else is an argument */
    }
    if (k >= 0) {
      i = take_value(cmd, argc, argv, i, k, eq, out);
      if (i < 0) return -i;
      continue;
    }
    if (out->n_pos >= cmd->max_pos || out->n_pos >= CLI_MAX_POS) {
      cli_args_free(out);
      return cli_usage_error(cmd->name, "unexpected argument '%s'", a);
    }
    out->pos[out->n_pos++] = a;
  }
  if (out->n_pos < cmd->min_pos) {
    cli_args_free(out);
    return cli_usage_error(cmd->name, "missing argument (usage: pipebench %s %s)", cmd->name,
                           cmd->usage);
  }
  return check_empty_paths(cmd, out);
}

void cli_args_free(cli_args *a) {
  for (int i = 0; i < CLI_MAX_OPTS; i++) {
    free(a->values[i]);
    a->values[i] = NULL;
  }
}

static int index_of(const cli_args *a, const char *name) {
  for (int i = 0; i < a->n_opts; i++)
    if (strcmp(a->opts[i].name, name) == 0) return i;
  return -1;
}

const char *cli_get(const cli_args *a, const char *name) {
  int k = index_of(a, name);
  return k >= 0 ? a->values[k] : NULL;
}

const char *cli_value(const cli_args *a, const char *name) {
  int k = index_of(a, name);
  if (k < 0) return NULL;
  return a->values[k] != NULL ? a->values[k] : a->opts[k].dflt;
}

int cli_has(const cli_args *a, const char *name) {
  int k = index_of(a, name);
  return k >= 0 && a->set[k];
}

/* ---- values checked and stored by their table entry ----------------------------------------- */

/* Does the comma-separated list hold word? Its index (from 0), or -1. */
static int choice_index(const char *choices, const char *word) {
  int i = 0;
  size_t n = strlen(word);
  for (const char *p = choices; p != NULL && *p != '\0'; i++) {
    const char *end = strchr(p, ',');
    size_t len = end ? (size_t)(end - p) : strlen(p);
    if (len == n && strncmp(p, word, n) == 0) return i;
    p = end ? end + 1 : NULL;
  }
  return -1;
}

/* The choices as "a, b, c" (sep ", ") or "a, b or c" (last " or "). */
static void choice_list(const char *choices, int with_or, char *buf, size_t size) {
  size_t used = 0;
  int n = 1;
  for (const char *p = choices; *p; p++) n += *p == ',';
  buf[0] = '\0';
  int i = 0;
  for (const char *p = choices; p != NULL && *p != '\0'; i++) {
    const char *end = strchr(p, ',');
    int len = end ? (int)(end - p) : (int)strlen(p);
    const char *sep = i == 0 ? "" : with_or && i == n - 1 ? " or " : ", ";
    int w = snprintf(buf + used, size - used, "%s%.*s", sep, len, p);
    if (w < 0 || (size_t)w >= size - used) return;
    used += (size_t)w;
    p = end ? end + 1 : NULL;
  }
}

static int parse_long(const char *v, long *out) {
  char *end;
  errno = 0;
  long x = strtol(v, &end, 10);
  if (errno != 0 || end == v || *end != '\0') return -1;
  *out = x;
  return 0;
}

static int parse_double(const char *v, double *out) {
  char *end;
  errno = 0;
  double x = strtod(v, &end);
  if (errno != 0 || end == v || *end != '\0' || !isfinite(x)) return -1;
  *out = x;
  return 0;
}

/* Checks value v of option o (usage error printed when bad); with field non-NULL stores it. */
static int check_store(const cli_command *cmd, const cli_opt *o, const char *v, void *params) {
  void *field = params != NULL && o->field != NULL ? (char *)params + o->offset : NULL;
  long l = 0;
  double d = 0;
  switch (o->type) {
  case CLI_FLAG:
    if (field != NULL && o->set == NULL) *(int *)field = (o->flags & CLI_NEGATE) ? 0 : 1;
    break;
  case CLI_INT:
    if (parse_long(v, &l) != 0 || l < o->lo || l > o->hi)
      return cli_usage_error(cmd->name, "--%s must be an integer from %ld to %ld, not '%s'",
                             o->name, o->lo, o->hi, v);
    if (field != NULL && o->set == NULL) {
      if (o->size == sizeof(int)) *(int *)field = (int)l;
      else *(int64_t *)field = (int64_t)l;
    }
    break;
  case CLI_DOUBLE:
    if (parse_double(v, &d) != 0 || d < o->dlo || d > o->dhi)
      return cli_usage_error(cmd->name, "--%s must be a number from %g to %g, not '%s'", o->name,
                             o->dlo, o->dhi, v);
    if (field != NULL && o->set == NULL) {
      if (o->size == sizeof(float)) *(float *)field = (float)d;
      else *(double *)field = d;
    }
    break;
  case CLI_ENUM: {
    int idx = choice_index(o->choices, v);
    if (idx < 0 && o->set == NULL) {
      char list[512];
      choice_list(o->choices, !(o->flags & CLI_UNKNOWN), list, sizeof list);
      if (o->flags & CLI_UNKNOWN)
        return cli_usage_error(cmd->name, "unknown %s '%s' (%s)", o->name, v, list);
      return cli_usage_error(cmd->name, "--%s must be %s, not '%s'", o->name, list, v);
    }
    if (field != NULL && o->set == NULL) {
      if (o->flags & CLI_INDEX) *(int *)field = idx;
      else *(const char **)field = v;
    }
    break;
  }
  case CLI_STRING:
  case CLI_LIST:
    if (field != NULL && o->set == NULL) *(const char **)field = v;
    break;
  }
  if (o->set != NULL && params != NULL) return o->set(params, field, o, cmd->name, v);
  return CLI_OK;
}

int cli_fill(const cli_args *a, void *params) {
  for (int k = 0; k < a->n_opts; k++) {
    const cli_opt *o = &a->opts[k];
    const char *v = a->values[k] != NULL ? a->values[k] : o->dflt;
    if (o->type == CLI_FLAG ? !a->set[k] : v == NULL) continue;
    PB_RETURN_NOT_OK(check_store(a->cmd, o, v, params));
  }
  return CLI_OK;
}

int cli_long(const cli_args *a, const char *name, long *out) {
  int k = index_of(a, name);
  const char *v = k >= 0 ? cli_value(a, name) : NULL;
  *out = 0;
  if (v == NULL) return CLI_OK;
  PB_RETURN_NOT_OK(check_store(a->cmd, &a->opts[k], v, NULL));
  return parse_long(v, out) == 0 ? CLI_OK : CLI_USAGE;
}

int cli_double(const cli_args *a, const char *name, double *out) {
  int k = index_of(a, name);
  const char *v = k >= 0 ? cli_value(a, name) : NULL;
  *out = 0;
  if (v == NULL) return CLI_OK;
  PB_RETURN_NOT_OK(check_store(a->cmd, &a->opts[k], v, NULL));
  return parse_double(v, out) == 0 ? CLI_OK : CLI_USAGE;
}

/* ---- the table shown: defaults, JSON ------------------------------------------------------- */

static const char *const type_names[] = {"flag", "int", "double", "string", "enum", "list"};

/* The value of o's field in the command's defaults struct, as text ("" when none). */
static void field_default_text(const cli_command *cmd, const cli_opt *o, char *buf, size_t size) {
  buf[0] = '\0';
  if (o->field == NULL || cmd->defaults == NULL) return;
  if (o->show != NULL) {
    o->show(cmd->defaults, o, buf, size);
    return;
  }
  if (o->set != NULL) return; /* a field of its own kind: only its shower can say */
  const void *f = (const char *)cmd->defaults + o->offset;
  switch (o->type) {
  case CLI_FLAG:
    snprintf(buf, size, "%s", (*(const int *)f != 0) != ((o->flags & CLI_NEGATE) != 0) ? "on" : "off");
    break;
  case CLI_INT:
    if (o->size == sizeof(int)) snprintf(buf, size, "%d", *(const int *)f);
    else snprintf(buf, size, "%lld", (long long)*(const int64_t *)f);
    break;
  case CLI_DOUBLE:
    snprintf(buf, size, "%g", o->size == sizeof(float) ? (double)*(const float *)f : *(const double *)f);
    break;
  case CLI_ENUM:
    if (o->flags & CLI_INDEX) {
      int idx = *(const int *)f, i = 0;
      for (const char *p = o->choices; p != NULL && *p != '\0'; i++) {
        const char *end = strchr(p, ',');
        if (i == idx) {
          snprintf(buf, size, "%.*s", end ? (int)(end - p) : (int)strlen(p), p);
          return;
        }
        p = end ? end + 1 : NULL;
      }
      return;
    }
    if (*(const char *const *)f != NULL) snprintf(buf, size, "%s", *(const char *const *)f);
    break;
  case CLI_STRING:
  case CLI_LIST:
    if (*(const char *const *)f != NULL) snprintf(buf, size, "%s", *(const char *const *)f);
    break;
  }
}

void cli_default_text(const cli_command *cmd, const cli_opt *o, char *buf, size_t size) {
  if (o->dflt != NULL) snprintf(buf, size, "%s", o->dflt);
  else field_default_text(cmd, o, buf, size);
}

static void json_str(FILE *f, const char *s) {
  if (s == NULL) {
    fputs("null", f);
    return;
  }
  fputc('"', f);
  for (; *s; s++) {
    unsigned char ch = (unsigned char)*s;
    if (ch == '"' || ch == '\\') fprintf(f, "\\%c", ch);
    else if (ch < 0x20) fprintf(f, "\\u%04x", ch);
    else fputc(ch, f);
  }
  fputc('"', f);
}

void cli_print_options_json(const cli_command *cmd, FILE *f) {
  fprintf(f, "{\"command\":");
  json_str(f, cmd->name);
  fprintf(f, ",\"params\":");
  json_str(f, cmd->params);
  fprintf(f, ",\"python\":");
  json_str(f, cmd->python);
  fprintf(f, ",\"options\":[");
  for (int i = 0; cmd->opts != NULL && cmd->opts[i].name != NULL; i++) {
    const cli_opt *o = &cmd->opts[i];
    char dv[256], cv[256], help[1024], sh[2] = {o->short_name, '\0'};
    cli_default_text(cmd, o, dv, sizeof dv);
    field_default_text(cmd, o, cv, sizeof cv);
    render_help(cmd, o, help, sizeof help);
    fprintf(f, "%s\n{\"name\":", i ? "," : "");
    json_str(f, o->name);
    fprintf(f, ",\"short\":");
    json_str(f, o->short_name ? sh : NULL);
    fprintf(f, ",\"arg\":");
    json_str(f, o->arg);
    fprintf(f, ",\"type\":\"%s\",\"field\":", type_names[o->type]);
    json_str(f, o->field);
    if (o->field != NULL) fprintf(f, ",\"offset\":%zu,\"size\":%zu", o->offset, o->size);
    fprintf(f, ",\"default\":");
    json_str(f, dv[0] || o->dflt != NULL ? dv : NULL);
    fprintf(f, ",\"c_default\":");
    json_str(f, cv[0] ? cv : NULL);
    if (o->type == CLI_INT) fprintf(f, ",\"min\":%ld,\"max\":%ld", o->lo, o->hi);
    if (o->type == CLI_DOUBLE) fprintf(f, ",\"min\":%.17g,\"max\":%.17g", o->dlo, o->dhi);
    if (o->choices != NULL) {
      fprintf(f, ",\"choices\":");
      json_str(f, o->choices);
    }
    fprintf(f, ",\"negate\":%s,\"python\":", (o->flags & CLI_NEGATE) ? "true" : "false");
    json_str(f, o->py);
    fprintf(f, ",\"help\":");
    json_str(f, help);
    fputc('}', f);
  }
  fprintf(f, "\n]}\n");
}

int cli_progress_enabled(void) { return isatty(STDERR_FILENO); }

void cli_progress(const char *what, long done, long total, double elapsed_s) {
  if (!cli_progress_enabled()) return;
  if (total <= 0) {
    fprintf(stderr, "\r\033[K");
    fflush(stderr);
    return;
  }
  double left = done > 0 ? elapsed_s * (double)(total - done) / (double)done : 0.0;
  fprintf(stderr, "\r\033[K%s [%ld/%ld] %.0fs elapsed, ~%.0fs left", what, done, total, elapsed_s,
          left);
  fflush(stderr);
}

int cli_mkdir_parent(const char *file_path) {
  char buf[4096];
  if (snprintf(buf, sizeof buf, "%s", file_path) >= (int)sizeof buf) return -ENAMETOOLONG;
  char *slash = strrchr(buf, '/');
  if (slash == NULL || slash == buf) return 0;
  *slash = '\0';
  struct pb_error err = {{0}};
  int rc = pb_mkdirs(buf, &err);
  if (rc == PB_OK) return 0;
  errno = rc < 0 && rc > -4096 ? -rc : ENOTDIR; /* -errno, or a path that is no folder */
  return -errno;
}

/* ---- remote storage ------------------------------------------------------------------------ */

int cli_remote_apply(const cli_args *a) {
  if (index_of(a, "insecure") < 0) return CLI_OK;
  char v[64];
  long n;
  double d;
  if (cli_has(a, "insecure")) setenv("PIPEBENCH_INSECURE", "1", 1);
  if (cli_has(a, "trace-requests")) setenv("PIPEBENCH_TRACE_REQUESTS", "1", 1);
  if (cli_has(a, "timeout")) {
    PB_RETURN_NOT_OK(cli_double(a, "timeout", &d));
    snprintf(v, sizeof v, "%.17g", d);
    setenv("PIPEBENCH_TIMEOUT", v, 1);
  }
  if (cli_has(a, "retries")) {
    PB_RETURN_NOT_OK(cli_long(a, "retries", &n));
    snprintf(v, sizeof v, "%ld", n);
    setenv("PIPEBENCH_RETRIES", v, 1);
  }
  if (cli_get(a, "disk-cache") != NULL) {
    char c[4200];
    snprintf(c, sizeof c, "disk:%s", cli_get(a, "disk-cache"));
    setenv("PIPEBENCH_READ_CACHE", c, 1);
  }
  if (cli_has(a, "in-flight")) {
    PB_RETURN_NOT_OK(cli_long(a, "in-flight", &n));
    snprintf(v, sizeof v, "%ld", n);
    setenv("PIPEBENCH_IN_FLIGHT", v, 1);
  }
  return CLI_OK;
}

int cli_set_bytes_in_flight(void *params, void *field, const cli_opt *o, const char *cmd,
                            const char *value) {
  (void)params, (void)o;
  pb_loader_params lp = PB_LOADER_PARAMS_DEFAULTS;
  struct pb_error e;
  if (pb_loader_params_set(&lp, "bytes_in_flight", value, &e) != PB_OK)
    return cli_usage_error(cmd, "--bytes-in-flight: '%s' is not a size (bytes, or N with a K, M "
                           "or G suffix; 0: auto)", value);
  *(int64_t *)field = lp.bytes_in_flight;
  return CLI_OK;
}

void cli_show_i64(const void *params, const cli_opt *o, char *buf, size_t size) {
  int64_t v;
  memcpy(&v, (const char *)params + o->offset, sizeof v);
  snprintf(buf, size, "%lld", (long long)v);
}
