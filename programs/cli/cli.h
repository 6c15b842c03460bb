/* Shared pieces of the pipebench command line: option tables, parsing, messages. */
#ifndef PB_CLI_H
#define PB_CLI_H

#include <stddef.h>
#include <stdio.h>

#include "pipebench/core.h"

/** Exit codes (README lists them). */
enum { CLI_OK = 0, CLI_USAGE = 1, CLI_FAIL = 2, CLI_REGRESSION = 3 };

/** What an option takes; the parser converts and checks the value by it. */
typedef enum cli_type {
  CLI_FLAG,   /**< no value; sets its int field to 1 (0 with CLI_NEGATE) */
  CLI_INT,    /**< an integer from lo to hi; an int or int64_t/uint64_t field (by its size) */
  CLI_DOUBLE, /**< a finite number from dlo to dhi; a double or float field */
  CLI_STRING, /**< text; a const char * field */
  CLI_ENUM,   /**< one of choices; the text (const char *) or, CLI_INDEX, its index (int) */
  CLI_LIST,   /**< comma-separated text; with an arg ending in "..." several values are taken
                   (up to the next --option) and joined with commas */
} cli_type;

enum {
  CLI_NEGATE = 1,   /**< CLI_FLAG: the option clears its field (--no-peer clears peer) */
  CLI_INDEX = 2,    /**< CLI_ENUM: store the choice's index (an int field), not its text */
  CLI_UNKNOWN = 4,  /**< CLI_ENUM: "unknown NAME 'X' (a, b)" instead of "--NAME must be a or b" */
};

struct cli_opt;
/** Stores a checked value where the plain field copy does not fit (a unit, two fields, a parse
 * of its own): params is the command's struct, field the option's place in it. Returns CLI_OK,
 * or prints a usage error and returns CLI_USAGE. */
typedef int (*cli_setter)(void *params, void *field, const struct cli_opt *o, const char *cmd,
                          const char *value);
/** Writes the default of a setter's option, read from the defaults struct, into buf. */
typedef void (*cli_shower)(const void *params, const struct cli_opt *o, char *buf, size_t size);

/** One option of a command: one line of its table (see docs/options.md). The field is named with
 * CLI_AT(params type, field); an option without one (the command reads it with cli_value) has
 * field NULL. Its default is the field's value in the command's defaults struct (its
 * PB_*_DEFAULTS macro), or dflt where the command line's default is its own: dflt is used as if
 * it were given. "{}" in help shows the default. */
typedef struct cli_opt {
  const char *name;   /**< without the leading "--" */
  char short_name;    /**< "-x" (0: none) */
  const char *arg;    /**< placeholder shown in help ("N", "FILE", "LIST..."), NULL for flags */
  cli_type type;
  const char *field;  /**< the params field it sets, as C spells it; NULL: none */
  size_t offset, size;
  long lo, hi;        /**< CLI_INT */
  double dlo, dhi;    /**< CLI_DOUBLE */
  const char *choices; /**< CLI_ENUM: comma-separated */
  const char *dflt;   /**< the command line's own default, as text; NULL: the field's */
  const char *help;
  const char *py;     /**< the Python keyword argument of the same setting, or NULL */
  cli_setter set;
  cli_shower show;
  unsigned flags;
} cli_opt;

/** .field, .offset and .size of a table entry: field f of params type T. */
#define CLI_AT(T, f) .field = #f, .offset = offsetof(T, f), .size = sizeof(((T *)0)->f)

#define CLI_MAX_OPTS 48
#define CLI_MAX_POS 8

struct cli_command;

typedef struct cli_args {
  const struct cli_command *cmd;
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
  const void *defaults;  /**< the params struct the table's fields are in, at its defaults */
  const char *params;    /**< its C type name ("pb_run_params"), or NULL */
  const char *python;    /**< the Python function taking the same settings ("infer"), or NULL */
  int max_pos;           /**< positional arguments accepted */
  int min_pos;
  int (*run)(const cli_args *args);
} cli_command;

/** Parses argv (after the command name). Returns CLI_OK, CLI_USAGE (message printed to stderr)
 * or -1 when --help was printed (the caller exits 0). */
int cli_parse(const cli_command *cmd, int argc, char **argv, cli_args *out);
void cli_args_free(cli_args *a);
/** The value given for option name, or NULL when it was not given. */
const char *cli_get(const cli_args *a, const char *name);
/** The value given, else the table's dflt (NULL when neither). */
const char *cli_value(const cli_args *a, const char *name);
int cli_has(const cli_args *a, const char *name);
/** Checks every option given (or with a dflt) against its table entry, in table order, and
 * stores those with a field into params (the command's struct, already at its defaults; NULL
 * when the command has none). Returns CLI_OK, or CLI_USAGE after printing the message. */
int cli_fill(const cli_args *a, void *params);
/** Option name as a number, checked against its table entry (the given value, else its dflt,
 * else 0). Returns CLI_OK or CLI_USAGE (message printed). */
int cli_long(const cli_args *a, const char *name, long *out);
int cli_double(const cli_args *a, const char *name, double *out);
void cli_print_help(const cli_command *cmd, FILE *f);
/** The option table of cmd as JSON (docs/options.md says what it holds). */
void cli_print_options_json(const cli_command *cmd, FILE *f);
/** The default of o as help shows it ("" when it has none). */
void cli_default_text(const cli_command *cmd, const cli_opt *o, char *buf, size_t size);
/** Prints "pipebench CMD: message" and the help hint to stderr; returns CLI_USAGE. */
int cli_usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/** Setter of an int64_t field given as a size the way the loader's bytes_in_flight is (bytes, or
 * N with a K, M or G suffix; 0: auto): run's and train's --bytes-in-flight. */
int cli_set_bytes_in_flight(void *params, void *field, const struct cli_opt *o, const char *cmd,
                            const char *value);
/** Shower of an int64_t field: its default as a decimal number. */
void cli_show_i64(const void *params, const struct cli_opt *o, char *buf, size_t size);
/** Prints "pipebench CMD: message" to stderr; returns CLI_FAIL. */
int cli_fail(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/** Is stderr a terminal (progress lines are drawn only then)? */
int cli_progress_enabled(void);
/** Draws "\r<what> [done/total] eta" on stderr when enabled; total 0 clears the line. */
void cli_progress(const char *what, long done, long total, double elapsed_s);

/** Creates the folders above a file path (pb_mkdirs on its dirname); 0 or -errno. */
int cli_mkdir_parent(const char *file_path);

/** The remote-storage options (docs/remote.md), the same in every command that reads datasets:
 * table entries without a field; main applies them (cli_remote_apply) before the command runs. */
#define CLI_REMOTE_OPTS                                                                          \
  {.name = "insecure", .type = CLI_FLAG,                                                         \
   .help = "https: accept a server certificate that does not verify"},                          \
  {.name = "timeout", .arg = "S", .type = CLI_DOUBLE, .dlo = 0.001, .dhi = 86400,                \
   .help = "remote: seconds a request may wait for its next byte (default 30)"},                \
  {.name = "retries", .arg = "N", .type = CLI_INT, .lo = 0, .hi = 1000,                          \
   .help = "remote: repeats of a request after a 5xx, a reset or a cut answer (default 3)"},     \
  {.name = "in-flight", .arg = "N", .type = CLI_INT, .lo = 1, .hi = 65536,                       \
   .help = "remote: range requests in flight inside one read of one object (default 16); "     \
           "run's --reads-in-flight sets sample reads in flight"},                         \
  {.name = "trace-requests", .type = CLI_FLAG,                                                   \
   .help = "one line per storage request on stderr (method, URL, range, status, time)"},        \
  {.name = "disk-cache", .arg = "DIR", .type = CLI_STRING,                                       \
   .help = "remote: keep the ranges read from URLs in DIR, filled on first read"}
/** When a's command has the remote options: sets the PIPEBENCH_* overrides of docs/io.md from
 * those given, so every dataset the command opens (loader workers and child processes too) reads
 * with them. Returns CLI_OK or CLI_USAGE (message printed). */
int cli_remote_apply(const cli_args *a);

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
