/* Shared pieces of the pipebench command line: option tables, parsing, messages. */
#ifndef PB_CLI_H
#define PB_CLI_H

#include <stdio.h>

#include "pipebench/core.h"

/** Exit codes (README lists them). */
enum { CLI_OK = 0, CLI_USAGE = 1, CLI_FAIL = 2, CLI_REGRESSION = 3 };

/** One option. arg NULL: a flag. arg ending in "...": takes one or more values (until the next
 * "--option"); they are joined with commas. */
typedef struct cli_opt {
  const char *name; /**< without the leading "--" */
  const char *arg;  /**< placeholder shown in help ("N", "FILE", "LIST..."), or NULL */
  const char *help;
} cli_opt;

#define CLI_MAX_OPTS 48
#define CLI_MAX_POS 8

typedef struct cli_args {
  const cli_opt *opts;
  int n_opts;
  char *values[CLI_MAX_OPTS]; /**< owned copies; NULL when absent */
  int set[CLI_MAX_OPTS];
  const char *pos[CLI_MAX_POS];
  int n_pos;
} cli_args;

/** A command of the tool. */
typedef struct cli_command {
  const char *name;
  const char *summary;
  const char *usage;     /**< after "pipebench NAME " */
  const char *details;   /**< extra help text or NULL */
  const cli_opt *opts;   /**< terminated by {NULL} */
  int max_pos;           /**< positional arguments accepted */
  int min_pos;
  int (*run)(const cli_args *args);
} cli_command;

/** Parses argv (after the command name). Returns CLI_OK, CLI_USAGE (message printed to stderr)
 * or -1 when --help was printed (the caller exits 0). */
int cli_parse(const cli_command *cmd, int argc, char **argv, cli_args *out);
void cli_args_free(cli_args *a);
const char *cli_get(const cli_args *a, const char *name);
int cli_has(const cli_args *a, const char *name);
/** Integer option with bounds; on a bad value prints a usage error and returns CLI_USAGE. */
int cli_get_long(const cli_args *a, const char *cmd, const char *name, long dflt, long lo, long hi,
                 long *out);
int cli_get_double(const cli_args *a, const char *cmd, const char *name, double dflt, double lo,
                   double hi, double *out);
void cli_print_help(const cli_command *cmd, FILE *f);
/** Prints "pipebench CMD: message" and the help hint to stderr; returns CLI_USAGE. */
int cli_usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/** Prints "pipebench CMD: message" to stderr; returns CLI_FAIL. */
int cli_fail(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/** Is stderr a terminal (progress lines are drawn only then)? */
int cli_progress_enabled(void);
/** Draws "\r<what> [done/total] eta" on stderr when enabled; total 0 clears the line. */
void cli_progress(const char *what, long done, long total, double elapsed_s);

/** Creates the folders above a file path (pb_mkdirs on its dirname); 0 or -errno. */
int cli_mkdir_parent(const char *file_path);

/* The commands, one file each. */
extern const cli_command cli_cmd_calibrate;
extern const cli_command cli_cmd_infer;
extern const cli_command cli_cmd_train;
extern const cli_command cli_cmd_gen;
extern const cli_command cli_cmd_convert;
extern const cli_command cli_cmd_inspect;
extern const cli_command cli_cmd_verify;
extern const cli_command cli_cmd_run;
extern const cli_command cli_cmd_report;
extern const cli_command cli_cmd_revs;

#endif
