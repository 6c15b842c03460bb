/* Option parsing and messages for every command. */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
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

void cli_print_help(const cli_command *cmd, FILE *f) {
  fprintf(f, "usage: pipebench %s %s\n\n%s\n", cmd->name, cmd->usage, cmd->summary);
  if (cmd->details != NULL) fprintf(f, "\n%s\n", cmd->details);
  fprintf(f, "\noptions:\n");
  for (int i = 0; cmd->opts != NULL && cmd->opts[i].name != NULL; i++) {
    char left[64];
    snprintf(left, sizeof left, "--%s%s%s", cmd->opts[i].name, cmd->opts[i].arg ? " " : "",
             cmd->opts[i].arg ? cmd->opts[i].arg : "");
    fprintf(f, "  %-26s %s\n", left, cmd->opts[i].help);
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

int cli_parse(const cli_command *cmd, int argc, char **argv, cli_args *out) {
  memset(out, 0, sizeof *out);
  out->opts = cmd->opts;
  for (int i = 0; cmd->opts != NULL && cmd->opts[i].name != NULL; i++) out->n_opts++;
  for (int i = 0; i < argc; i++) {
    const char *a = argv[i];
    if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
      cli_print_help(cmd, stdout);
      cli_args_free(out);
      return -1;
    }
    if (strncmp(a, "--", 2) == 0 && a[2] != '\0') {
      const char *name = a + 2;
      const char *eq = strchr(name, '=');
      size_t len = eq ? (size_t)(eq - name) : strlen(name);
      int k = find_opt(cmd, name, len);
      if (k < 0) {
        cli_args_free(out);
        return cli_usage_error(cmd->name, "unknown option '--%.*s'", (int)len, name);
      }
      const cli_opt *o = &cmd->opts[k];
      free(out->values[k]);
      out->values[k] = NULL;
      out->set[k] = 1;
      if (o->arg == NULL) {
        if (eq != NULL) {
          cli_args_free(out);
          return cli_usage_error(cmd->name, "option '--%s' takes no value", o->name);
        }
        continue;
      }
      int multi = strlen(o->arg) > 3 && strcmp(o->arg + strlen(o->arg) - 3, "...") == 0;
      if (eq != NULL) {
        out->values[k] = strdup(eq + 1);
      } else {
        if (i + 1 >= argc || (strncmp(argv[i + 1], "--", 2) == 0 && strlen(argv[i + 1]) > 2)) {
          cli_args_free(out);
          return cli_usage_error(cmd->name, "option '--%s' needs a value (%s)", o->name, o->arg);
        }
        size_t total = 0;
        int j = i + 1;
        for (; j < argc; j++) {
          if (j > i + 1 && (!multi || strncmp(argv[j], "--", 2) == 0)) break;
          total += strlen(argv[j]) + 1;
        }
        char *v = malloc(total + 1);
        if (v == NULL) return CLI_FAIL;
        v[0] = '\0';
        for (int m = i + 1; m < j; m++) {
          if (m > i + 1) strcat(v, ",");
          strcat(v, argv[m]);
        }
        out->values[k] = v;
        i = j - 1;
      }
      if (out->values[k] == NULL) return CLI_FAIL;
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

int cli_has(const cli_args *a, const char *name) {
  int k = index_of(a, name);
  return k >= 0 && a->set[k];
}

int cli_get_long(const cli_args *a, const char *cmd, const char *name, long dflt, long lo, long hi,
                 long *out) {
  const char *v = cli_get(a, name);
  if (v == NULL) {
    *out = dflt;
    return CLI_OK;
  }
  char *end;
  errno = 0;
  long x = strtol(v, &end, 10);
  if (errno != 0 || end == v || *end != '\0' || x < lo || x > hi)
    return cli_usage_error(cmd, "--%s must be an integer from %ld to %ld, not '%s'", name, lo, hi, v);
  *out = x;
  return CLI_OK;
}

int cli_get_double(const cli_args *a, const char *cmd, const char *name, double dflt, double lo,
                   double hi, double *out) {
  const char *v = cli_get(a, name);
  if (v == NULL) {
    *out = dflt;
    return CLI_OK;
  }
  char *end;
  errno = 0;
  double x = strtod(v, &end);
  if (errno != 0 || end == v || *end != '\0' || !isfinite(x) || x < lo || x > hi)
    return cli_usage_error(cmd, "--%s must be a number from %g to %g, not '%s'", name, lo, hi, v);
  *out = x;
  return CLI_OK;
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
