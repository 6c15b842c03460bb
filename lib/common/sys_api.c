/* The public face of the system helpers (pipebench/sys.h): the library's own internal
 * functions, offered to the programs built on it; and the lookups of the temporary folder and
 * of an installed tree, which exist once, here. */
#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/commit.h"
#include "common/env.h"
#include "common/fs.h"
#include "common/json.h"
#include "common/paths.h"
#include "common/proc.h"
#include "common/safe_open.h"
#include "common/strbuf.h"
#include "pipebench/sys.h"

const char *pb_file_kind(unsigned mode) { return pb__file_kind(mode); }
int pb_check_file_kind(const char *path, int dir_ok, const char *what, struct pb_error *err) {
  return pb__check_file_kind(path, dir_ok, what, err);
}
int pb_output_check(const char *path, struct pb_error *err) { return pb__output_check(path, err); }
int pb_remove_tree(const char *path) { return pb__remove_tree(path); }
int pb_read_file(const char *path, void **data, size_t *size, struct pb_error *err) {
  return pb__read_file(path, data, size, err);
}
int pb_write_file(const char *path, const void *data, size_t size, struct pb_error *err) {
  return pb__write_file(path, data, size, err);
}
int pb_write_all(int fd, const void *data, size_t size, const char *name, struct pb_error *err) {
  return pb__write_all(fd, data, size, name, err);
}
int pb_file_ends_with(const char *path, const void *tail, size_t n) {
  return pb__file_ends_with(path, tail, n);
}
int pb_temp_sibling(const char *path, char *buf, size_t size) {
  return pb__temp_sibling(path, buf, size);
}
int pb_temp_sweep(const char *path) { return pb__temp_sweep(path); }
void pb_path_split(const char *path, char *dir, size_t dir_size, const char **base) {
  pb__path_split(path, dir, dir_size, base);
}
int pb_entry_inside(const char *root, const char *rel, const char *what, struct pb_error *err) {
  return pb__entry_inside(root, rel, what, err);
}
int pb_commit(const char *dir, const char *name, const char *stage, const char *const *from,
              const char *const *to, int n, struct pb_error *err) {
  return pb__commit(dir, name, stage, from, to, n, err);
}
int pb_commit_recover(const char *dir, const char *name, int *recovered, struct pb_error *err) {
  return pb__commit_recover(dir, name, recovered, err);
}

int pb_commit_settle(const char *path, struct pb_error *err) { return pb__commit_settle(path, err); }
int pb_list_dir(const char *dir, char ***names, size_t *count, struct pb_error *err) {
  return pb__list_dir(dir, names, count, err);
}
void pb_free_names(char **names, size_t count) { pb__free_names(names, count); }

int pb_json_parse(const char *text, size_t n, const char *label, struct cJSON **out,
                  struct pb_error *err) {
  return pb__json_parse(text, n, label, out, err);
}
struct cJSON *pb_load_json(const char *path, struct pb_error *err) {
  return pb__load_json(path, err);
}

void pb_strbuf_putn(pb_strbuf *b, const char *s, size_t n) { pb__strbuf_putn(b, s, n); }
void pb_strbuf_puts(pb_strbuf *b, const char *s) { pb__strbuf_puts(b, s); }
/* pb_strbuf_printf is in strbuf.c, beside the va_list version it shares. */
int pb_proc_run(const pb_proc *p, pb_proc_result *res, struct pb_error *err) {
  return pb__proc_run(p, res, err);
}
int pb_proc_fork(int (*fn)(void *ctx), void *ctx, const pb_proc *p, pb_proc_result *res,
                 struct pb_error *err) {
  return pb__proc_fork(fn, ctx, p, res, err);
}
void pb_proc_tail(const char *path, int lines, char *buf, size_t size) {
  pb__proc_tail(path, lines, buf, size);
}
void pb_stop_flag_set(volatile sig_atomic_t *flag) { pb__stop_flag_set(flag); }
int pb_stop_requested(void) { return pb__stop_requested(); }

void pb_env_register_version(const char *key, void (*fn)(char *buf, size_t size)) {
  pb__env_register_version(key, fn);
}

/* ---- where things are ---------------------------------------------------------------------- */

const char *pb_tmp_dir(void) {
  const char *t = getenv("TMPDIR");
  return t != NULL && t[0] == '/' && strlen(t) < 1024 ? t : "/tmp";
}

int pb__library_dir(char *buf, size_t size) {
  static const int anchor = 0;
  Dl_info info;
  buf[0] = '\0';
  if (dladdr(&anchor, &info) == 0 || info.dli_fname == NULL) return -1;
  char *real = realpath(info.dli_fname, NULL);
  if (real == NULL) return -1;
  char *slash = strrchr(real, '/');
  if (slash != NULL) *slash = '\0';
  int ok = slash != NULL && strlen(real) < size;
  if (ok) snprintf(buf, size, "%s", real);
  free(real);
  return ok ? 0 : -1;
}

int pb_install_path(const char *part, const char *probe, char *buf, size_t size) {
  char lib[PATH_MAX], dir[PATH_MAX + 64], file[2 * PATH_MAX];
  struct stat st;
  if (size > 0) buf[0] = '\0';
  if (pb__library_dir(lib, sizeof lib) != 0) return 0;
  snprintf(dir, sizeof dir, "%s/../share/pipebench/%s", lib, part);
  snprintf(file, sizeof file, "%s/%s", dir, probe);
  if (stat(file, &st) != 0 || !S_ISREG(st.st_mode) || strlen(dir) >= size) return 0;
  snprintf(buf, size, "%s", dir);
  return 1;
}
