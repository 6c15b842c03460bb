/* Task files of pipebench revs: CSV with a header row, quoted as RFC 4180 says. */
#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "revs/revs_internal.h"
#include "pipebench/sys.h"

/* The columns a task file may have; which ones a row needs depends on its kind. */
enum { C_BRANCH, C_EXPERIMENT, C_TRAINER, C_MAX_EPOCHS, C_BATCH_SIZE, C_OVERRIDES, C_CHECKPOINT,
       C_DATA, C_COMMAND, C_METRICS, C_COUNT };
static const char *const col_names[C_COUNT] = {
    "branch", "experiment", "trainer", "max_epochs", "batch_size", "overrides",
    "checkpoint_path", "data_path", "command", "metrics"};

#define MAX_FIELDS 32

typedef struct csv_reader {
  const char *p, *end;
  int line;
  const char *name;
} csv_reader;

typedef struct csv_row {
  char *field[MAX_FIELDS];
  int n;
  int line;
} csv_row;

static void row_clear(csv_row *r) {
  for (int i = 0; i < r->n; i++) free(r->field[i]);
  r->n = 0;
}

/* Reads one record into r. Returns 1 when a record was read, 0 at the end, or an error.
 * Lines that are entirely empty are skipped. */
static int read_record(csv_reader *c, csv_row *r, struct pb_error *err) {
  r->n = 0;
  while (c->p < c->end && (*c->p == '\n' || *c->p == '\r')) {
    if (*c->p == '\n') c->line++;
    c->p++;
  }
  if (c->p >= c->end) return 0;
  r->line = c->line;
  for (;;) {
    size_t cap = 64, len = 0;
    char *buf = malloc(cap);
    if (buf == NULL) return pb_error_set(err, PB_ENOMEM, "out of memory");
    int quoted = 0;
    if (c->p < c->end && *c->p == '"') {
      quoted = 1;
      c->p++;
    }
    int field_line = c->line;
    for (;;) {
      if (c->p >= c->end) {
        if (quoted) {
          free(buf);
          return pb_error_set(err, PB_EFORMAT,
                              "%s: line %d: a quoted field is never closed (a missing '\"')",
                              c->name, field_line);
        }
        break;
      }
      char ch = *c->p;
      if (quoted) {
        if (ch == '"') {
          if (c->p + 1 < c->end && c->p[1] == '"') {
            c->p += 2;
          } else {
            c->p++;
            if (c->p < c->end && *c->p != ',' && *c->p != '\n' && *c->p != '\r') {
              free(buf);
              return pb_error_set(err, PB_EFORMAT,
                                  "%s: line %d: text after a closing quote (write a quote inside "
                                  "a quoted field as \"\")",
                                  c->name, c->line);
            }
            quoted = 0;
            break;
          }
        } else {
          if (ch == '\n') c->line++;
          c->p++;
        }
      } else {
        if (ch == ',' || ch == '\n' || ch == '\r') break;
        if (ch == '"') {
          free(buf);
          return pb_error_set(err, PB_EFORMAT,
                              "%s: line %d: a stray quote inside an unquoted field (quote the "
                              "whole field and write the quote as \"\")",
                              c->name, c->line);
        }
        c->p++;
      }
      if (len + 2 > cap) {
        cap *= 2;
        char *nb = realloc(buf, cap);
        if (nb == NULL) {
          free(buf);
          return pb_error_set(err, PB_ENOMEM, "out of memory");
        }
        buf = nb;
      }
      buf[len++] = ch;
    }
    buf[len] = '\0';
    if (r->n >= MAX_FIELDS) {
      free(buf);
      return pb_error_set(err, PB_EFORMAT, "%s: line %d: more than %d fields", c->name, r->line,
                          MAX_FIELDS);
    }
    r->field[r->n++] = buf;
    if (c->p >= c->end) return 1;
    if (*c->p == ',') {
      c->p++;
      continue;
    }
    /* end of record: \n, \r\n or a lone \r */
    if (*c->p == '\r') c->p++;
    if (c->p < c->end && *c->p == '\n') c->p++;
    c->line++;
    return 1;
  }
}

static char *trim_dup(const char *s) {
  while (*s && isspace((unsigned char)*s)) s++;
  size_t n = strlen(s);
  while (n > 0 && isspace((unsigned char)s[n - 1])) n--;
  char *d = malloc(n + 1);
  if (d != NULL) {
    memcpy(d, s, n);
    d[n] = '\0';
  }
  return d;
}

static int parse_count(const char *s, const char *what, const char *name, int line, long *out,
                       struct pb_error *err) {
  char *end;
  errno = 0;
  long v = strtol(s, &end, 10);
  while (*end && isspace((unsigned char)*end)) end++;
  if (errno != 0 || end == s || *end != '\0' || v < 1 || v > 100000000)
    return pb_error_set(err, PB_EFORMAT, "%s: line %d: %s must be a positive integer, not '%s'",
                        name, line, what, s);
  *out = v;
  return PB_OK;
}

/* Items end at a comma, semicolon or blank outside brackets and quotes, so a Hydra list value
 * (data.sizes=[1,2]) or a quoted value stays one item. */
static int is_sep(char ch) {
  return ch == ',' || ch == ';' || ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r';
}

static int key_char(char ch) {
  return isalnum((unsigned char)ch) || ch == '_' || ch == '-' || ch == '.' || ch == '/' ||
         ch == '@' || ch == '+' || ch == '~';
}

int pb__revs_split_overrides(const char *text, char ***items, size_t *n, struct pb_error *err) {
  *items = NULL;
  *n = 0;
  size_t cap = 0;
  const char *p = text ? text : "";
  for (;;) {
    while (*p && is_sep(*p)) p++;
    if (*p == '\0') break;
    const char *s = p;
    int depth = 0;
    char quote = 0;
    while (*p && (quote || depth > 0 || !is_sep(*p))) {
      if (quote) {
        if (*p == quote) quote = 0;
      } else if (*p == '\'' || *p == '"') {
        quote = *p;
      } else if (*p == '[' || *p == '{' || *p == '(') {
        depth++;
      } else if ((*p == ']' || *p == '}' || *p == ')') && depth > 0) {
        depth--;
      }
      p++;
    }
    size_t len = (size_t)(p - s);
    const char *eq = memchr(s, '=', len);
    /* key=value, or ~key (Hydra's removal of a key) */
    int ok = (eq != NULL && eq > s) || (s[0] == '~' && len > 1);
    const char *kend = eq != NULL ? eq : s + len;
    for (const char *q = s; ok && q < kend; q++) ok = key_char(*q);
    if (!ok || quote || depth > 0) {
      pb__revs_free_strings(*items, *n);
      *items = NULL;
      *n = 0;
      return pb_error_set(err, PB_EFORMAT,
                          "override '%.*s' is not key=value (keys: letters, digits and _ - . / @ "
                          "+ ~; brackets and quotes closed)",
                          (int)len, s);
    }
    if (*n == cap) {
      cap = cap ? cap * 2 : 8;
      char **ni = realloc(*items, cap * sizeof *ni);
      if (ni == NULL) {
        pb__revs_free_strings(*items, *n);
        *items = NULL;
        *n = 0;
        return pb_error_set(err, PB_ENOMEM, "out of memory");
      }
      *items = ni;
    }
    char *d = malloc(len + 1);
    if (d == NULL) {
      pb__revs_free_strings(*items, *n);
      *items = NULL;
      *n = 0;
      return pb_error_set(err, PB_ENOMEM, "out of memory");
    }
    memcpy(d, s, len);
    d[len] = '\0';
    (*items)[(*n)++] = d;
  }
  return PB_OK;
}

void pb__revs_free_strings(char **items, size_t n) {
  for (size_t i = 0; i < n; i++) free(items[i]);
  free(items);
}

static void task_free_fields(pb_revs_task *t) {
  free(t->branch);
  free(t->experiment);
  free(t->trainer);
  free(t->checkpoint_path);
  free(t->data_path);
  free(t->overrides);
  free(t->command);
  free(t->metrics);
}

void pb_revs_tasks_free(pb_revs_task *tasks, size_t n) {
  if (tasks == NULL) return;
  for (size_t i = 0; i < n; i++) task_free_fields(&tasks[i]);
  free(tasks);
}

/* Fills t from one row, given where each column sits (-1: absent). */
static int make_task(const csv_row *r, const int *where, pb_revs_kind kind, const char *name,
                     pb_revs_task *t, struct pb_error *err) {
  memset(t, 0, sizeof *t);
  t->line = r->line;
  t->kind = kind;
  char **slots[C_COUNT] = {&t->branch, &t->experiment, &t->trainer, NULL, NULL, &t->overrides,
                           &t->checkpoint_path, &t->data_path, &t->command, &t->metrics};
  for (int c = 0; c < C_COUNT; c++) {
    if (where[c] < 0 || slots[c] == NULL) continue;
    /* commands keep their spacing; every other field is trimmed */
    *slots[c] = c == C_COMMAND ? strdup(r->field[where[c]]) : trim_dup(r->field[where[c]]);
    if (*slots[c] == NULL) return pb_error_set(err, PB_ENOMEM, "out of memory");
  }
  if (t->branch[0] == '\0')
    return pb_error_set(err, PB_EFORMAT, "%s: line %d: the branch is empty", name, r->line);
  if (t->experiment[0] == '\0')
    return pb_error_set(err, PB_EFORMAT, "%s: line %d: the experiment is empty", name, r->line);
  if (kind == PB_REVS_COMMAND) {
    if (t->command[0] == '\0')
      return pb_error_set(err, PB_EFORMAT, "%s: line %d: the command is empty", name, r->line);
    if (t->metrics[0] == '\0')
      return pb_error_set(err, PB_EFORMAT,
                          "%s: line %d: the metrics file is empty (name the JSON file the "
                          "command writes)", name, r->line);
  } else if (t->trainer[0] == '\0') {
    /* any other value goes to the task's command as it is; pipebench's own train and infer
     * judge it when they are the runner */
    return pb_error_set(err, PB_EFORMAT, "%s: line %d: the trainer is empty (cpu, gpu, ddp, ...)",
                        name, r->line);
  }
  if (where[C_MAX_EPOCHS] >= 0 && r->field[where[C_MAX_EPOCHS]][0] != '\0')
    PB_RETURN_NOT_OK(parse_count(r->field[where[C_MAX_EPOCHS]], "max_epochs", name, r->line,
                                 &t->max_epochs, err));
  else if (kind == PB_REVS_TRAIN)
    return pb_error_set(err, PB_EFORMAT, "%s: line %d: max_epochs is empty", name, r->line);
  if (where[C_BATCH_SIZE] >= 0 && r->field[where[C_BATCH_SIZE]][0] != '\0')
    PB_RETURN_NOT_OK(parse_count(r->field[where[C_BATCH_SIZE]], "batch_size", name, r->line,
                                 &t->batch_size, err));
  else if (kind != PB_REVS_COMMAND)
    return pb_error_set(err, PB_EFORMAT, "%s: line %d: batch_size is empty", name, r->line);
  if (t->overrides != NULL) {
    char **items;
    size_t n;
    int rc = pb__revs_split_overrides(t->overrides, &items, &n, err);
    if (rc != PB_OK) {
      pb_error_prefix(err, "%s: line %d: ", name, r->line);
      return rc;
    }
    pb__revs_free_strings(items, n);
  }
  return PB_OK;
}

int pb_revs_tasks_parse(const char *text, size_t size, const char *name, pb_revs_task **tasks,
                        size_t *n, struct pb_error *err) {
  if (tasks == NULL || n == NULL || (text == NULL && size > 0))
    return pb_error_set(err, PB_EINVAL, "pb_revs_tasks_parse: NULL argument");
  *tasks = NULL;
  *n = 0;
  if (name == NULL) name = "task file";
  csv_reader c = {text, text + size, 1, name};
  /* a UTF-8 byte order mark, as spreadsheet programs write it */
  if (size >= 3 && memcmp(text, "\xEF\xBB\xBF", 3) == 0) c.p += 3;
  csv_row hdr = {{0}, 0, 0}, row = {{0}, 0, 0};
  int rc = read_record(&c, &hdr, err);
  if (rc == 0)
    return pb_error_set(err, PB_EFORMAT,
                        "%s: the file is empty (it needs a header such as "
                        "'branch,experiment,trainer,max_epochs,batch_size,overrides')", name);
  if (rc < 0) return rc;
  int where[C_COUNT];
  for (int k = 0; k < C_COUNT; k++) where[k] = -1;
  for (int i = 0; i < hdr.n && rc >= 0; i++) {
    char *h = trim_dup(hdr.field[i]);
    if (h == NULL) {
      rc = pb_error_set(err, PB_ENOMEM, "out of memory");
      break;
    }
    int k = 0;
    while (k < C_COUNT && strcmp(h, col_names[k]) != 0) k++;
    if (k == C_COUNT)
      rc = pb_error_set(err, PB_EFORMAT,
                        "%s: line %d: unknown column '%s' (columns: branch, experiment, trainer, "
                        "max_epochs, batch_size, overrides, checkpoint_path, data_path, command, "
                        "metrics)", name, hdr.line, h);
    else if (where[k] >= 0)
      rc = pb_error_set(err, PB_EFORMAT, "%s: line %d: column '%s' appears twice", name,
                        hdr.line, h);
    else
      where[k] = i;
    free(h);
  }
  int width = hdr.n, hdr_line = hdr.line;
  row_clear(&hdr);
  if (rc < 0) return rc;

  pb_revs_kind kind;
  const char *need;
  if (where[C_COMMAND] >= 0 || where[C_METRICS] >= 0) {
    kind = PB_REVS_COMMAND;
    need = "branch,experiment,command,metrics";
  } else if (where[C_CHECKPOINT] >= 0 || where[C_DATA] >= 0) {
    kind = PB_REVS_INFER;
    need = "branch,experiment,checkpoint_path,data_path,trainer,batch_size[,overrides]";
  } else {
    kind = PB_REVS_TRAIN;
    need = "branch,experiment,trainer,max_epochs,batch_size[,overrides]";
  }
  static const int req_train[] = {C_BRANCH, C_EXPERIMENT, C_TRAINER, C_MAX_EPOCHS, C_BATCH_SIZE, -1};
  static const int req_infer[] = {C_BRANCH, C_EXPERIMENT, C_CHECKPOINT, C_DATA, C_TRAINER,
                                  C_BATCH_SIZE, -1};
  static const int req_cmd[] = {C_BRANCH, C_EXPERIMENT, C_COMMAND, C_METRICS, -1};
  const int *req = kind == PB_REVS_TRAIN ? req_train : kind == PB_REVS_INFER ? req_infer : req_cmd;
  for (int i = 0; req[i] >= 0; i++)
    if (where[req[i]] < 0)
      return pb_error_set(err, PB_EFORMAT, "%s: line %d: the header lacks column '%s' (a %s task "
                          "file has columns %s)", name, hdr_line, col_names[req[i]],
                          kind == PB_REVS_TRAIN ? "training" : kind == PB_REVS_INFER ? "inference"
                                                                                      : "command",
                          need);
  if (kind == PB_REVS_COMMAND && where[C_CHECKPOINT] >= 0)
    return pb_error_set(err, PB_EFORMAT, "%s: line %d: a task file has either command,metrics or "
                        "checkpoint_path,data_path columns, not both", name, hdr_line);

  size_t cap = 0;
  pb_revs_task *list = NULL;
  for (;;) {
    rc = read_record(&c, &row, err);
    if (rc <= 0) break;
    if (row.n > width && where[C_OVERRIDES] >= 0) {
      rc = pb_error_set(err, PB_EFORMAT, "%s: line %d: %d fields, but the header has %d: a "
                        "comma-separated overrides list must be quoted as one field, e.g. "
                        "\"a=1,b=2\"", name, row.line, row.n, width);
      break;
    }
    if (row.n != width) {
      rc = pb_error_set(err, PB_EFORMAT, "%s: line %d: %d fields, but the header has %d (quote a "
                        "field that holds a comma)", name, row.line, row.n, width);
      break;
    }
    if (*n == cap) {
      cap = cap ? cap * 2 : 8;
      pb_revs_task *nl = realloc(list, cap * sizeof *nl);
      if (nl == NULL) {
        rc = pb_error_set(err, PB_ENOMEM, "out of memory");
        break;
      }
      list = nl;
    }
    rc = make_task(&row, where, kind, name, &list[*n], err);
    (*n)++;
    row_clear(&row);
    if (rc < 0) break;
  }
  row_clear(&row);
  if (rc == 0 && *n == 0)
    rc = pb_error_set(err, PB_EFORMAT, "%s: the header is there but no task rows follow", name);
  if (rc < 0) {
    pb_revs_tasks_free(list, *n);
    *n = 0;
    return rc;
  }
  *tasks = list;
  return PB_OK;
}

int pb_revs_tasks_read(const char *path, pb_revs_task **tasks, size_t *n, struct pb_error *err) {
  void *data = NULL;
  size_t size = 0;
  /* stat first: reading a FIFO or a device named as the task file would block */
  int rc = pb_check_file_kind(path, 0, "a task file (CSV)", err);
  if (rc == PB_OK) rc = pb_read_file(path, &data, &size, err);
  if (rc != PB_OK) return rc;
  rc = pb_revs_tasks_parse(data, size, path, tasks, n, err);
  pb_free(data, size);
  return rc;
}
