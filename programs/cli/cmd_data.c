/* pipebench gen, convert, inspect: making datasets and looking into them. */
#include <errno.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "pipebench/format.h"
#include "pipebench/gen.h"
#include "pipebench/verify.h"

/* Parses "A" "AxB" ... up to n numbers separated by 'x' into v (right-aligned: the last number
 * is X). Returns how many were given, or -1 when malformed. */
static int parse_dims(const char *s, int64_t *v, int n) {
  int64_t tmp[PB_NDIM];
  int k = 0;
  const char *p = s;
  while (*p != '\0') {
    if (k == n || k == PB_NDIM) return -1;
    char *end;
    errno = 0;
    long long x = strtoll(p, &end, 10);
    if (end == p || errno != 0 || x < 1 || x > (1LL << 30)) return -1;
    tmp[k++] = x;
    if (*end == 'x' || *end == 'X') {
      p = end + 1;
      if (*p == '\0') return -1;
    } else if (*end == '\0') {
      p = end;
    } else {
      return -1;
    }
  }
  if (k == 0) return -1;
  for (int i = 0; i < k; i++) v[n - k + i] = tmp[i];
  return k;
}

/* SIGINT/SIGTERM stop gen and convert cleanly: what was in place stays, nothing half-written is
 * left, exit 128 + the signal as a shell reports it. SA_RESETHAND: a second one ends at once. */
static volatile sig_atomic_t stop_signal;
static struct sigaction old_int, old_term;

static void on_signal(int sig) { stop_signal = sig; }

static void catch_stops(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = (int)(SA_RESETHAND | SA_RESTART);
  stop_signal = 0;
  sigaction(SIGINT, &sa, &old_int);
  sigaction(SIGTERM, &sa, &old_term);
}

static void release_stops(void) {
  sigaction(SIGINT, &old_int, NULL);
  sigaction(SIGTERM, &old_term, NULL);
}

/* The exit of a command that ended with rc: 128 + the signal when a stop ended it. */
static int stopped_exit(const char *cmd, int rc, const char *message, const char *what) {
  if (rc != PB_ECANCELED || stop_signal == 0) return -1;
  fprintf(stderr, "pipebench %s: %s; %s\n", cmd, message, what);
  return 128 + (int)stop_signal;
}

static void gen_progress(void *ctx, int64_t done, int64_t total) {
  int64_t *start = ctx;
  if (done == total || done % 16 == 0)
    cli_progress("gen: writing images", (long)done, (long)total, (double)(pb_now_ns() - *start) / 1e9);
}

/* --chunk YxX ... TxCxZxYxX into the int64_t[PB_NDIM] chunk of pb_write_params. */
static int set_chunk(void *params, void *field, const cli_opt *o, const char *cmd,
                     const char *value) {
  (void)params, (void)o;
  if (parse_dims(value, field, PB_NDIM) < 0)
    return cli_usage_error(cmd, "--chunk must look like YxX, ZxYxX or TxCxZxYxX, not '%s'", value);
  return CLI_OK;
}

/* Reads image i of ds into *pixels, growing the buffer (pb_alloc'd, *cap bytes) when the image
 * needs more room. Shared by inspect and convert. */
static int read_image(pb_dataset *ds, int64_t i, const pb_image_meta *m, void **pixels, size_t *cap,
                      struct pb_error *err) {
  size_t need = pb_image_bytes(m);
  if (need > *cap) {
    pb_free(*pixels, *cap);
    *pixels = pb_alloc(need);
    *cap = *pixels ? need : 0;
    if (*pixels == NULL)
      return pb_error_set(err, PB_ENOMEM, "out of memory for image %lld (%zu bytes)", (long long)i, need);
  }
  return pb_dataset_read(ds, i, *pixels, *cap, NULL, err);
}

/* --size YxX into shape[PB_Y], shape[PB_X] of pb_gen_params. */
static int set_size(void *params, void *field, const cli_opt *o, const char *cmd,
                    const char *value) {
  pb_gen_params *p = params;
  int64_t yx[2] = {0, 0};
  (void)field, (void)o;
  if (parse_dims(value, yx, 2) != 2)
    return cli_usage_error(cmd, "--size must look like 100x100 (height x width), not '%s'", value);
  p->shape[PB_Y] = yx[0];
  p->shape[PB_X] = yx[1];
  return CLI_OK;
}

static void show_size(const void *params, const cli_opt *o, char *buf, size_t size) {
  const pb_gen_params *p = params;
  (void)o;
  snprintf(buf, size, "%lldx%lld", (long long)p->shape[PB_Y], (long long)p->shape[PB_X]);
}

/* --dtype: pb_dtype_parse, which also takes "float" and "double". */
static int set_dtype(void *params, void *field, const cli_opt *o, const char *cmd,
                     const char *value) {
  (void)params;
  if (pb_dtype_parse(value, field) != PB_OK) {
    char list[256] = "";
    for (const char *c = o->choices; *c; c++) {
      size_t n = strlen(list);
      if (n + 3 >= sizeof list) break;
      if (*c == ',') strcat(list, ", ");
      else list[n] = *c, list[n + 1] = '\0';
    }
    return cli_usage_error(cmd, "unknown dtype '%s' (%s)", value, list);
  }
  return CLI_OK;
}

static void show_dtype(const void *params, const cli_opt *o, char *buf, size_t size) {
  (void)o;
  snprintf(buf, size, "%s", pb_dtype_name(((const pb_gen_params *)params)->dtype));
}

#define G pb_gen_params
static const G gen_defaults = PB_GEN_PARAMS_DEFAULTS;

/* One line per option (docs/options.md). */
static const cli_opt gen_opts[] = {
    {.name = "out", .arg = "DIR", .type = CLI_STRING, .help = "output folder (required)"},
    {.name = "rows", .arg = "N", .type = CLI_INT, CLI_AT(G, rows), .lo = 1, .hi = 100000000, .help = "number of images (default {})"},
    {.name = "size", .arg = "YxX", .type = CLI_STRING, CLI_AT(G, shape), .set = set_size, .show = show_size, .help = "image height x width (default {})"},
    {.name = "channels", .arg = "C", .type = CLI_INT, CLI_AT(G, shape[PB_C]), .lo = 1, .hi = 4096, .help = "channels (default {})"},
    {.name = "z", .arg = "Z", .type = CLI_INT, CLI_AT(G, shape[PB_Z]), .lo = 1, .hi = 100000, .help = "z-planes (default {})"},
    {.name = "t", .arg = "T", .type = CLI_INT, CLI_AT(G, shape[PB_T]), .lo = 1, .hi = 100000, .help = "time points (default {})"},
    {.name = "dtype", .arg = "TYPE", .type = CLI_ENUM, CLI_AT(G, dtype), .choices = "uint8,uint16,uint32,int16,float32,float64", .set = set_dtype, .show = show_dtype, .help = "uint8, uint16, uint32, int16, float32, float64 (default {})"},
    {.name = "formats", .arg = "LIST", .type = CLI_LIST, CLI_AT(G, formats), .help = "comma-separated formats (default: every writable one)"},
    {.name = "seed", .arg = "S", .type = CLI_INT, CLI_AT(G, seed), .lo = 0, .hi = 0x7fffffffffffffffL, .help = "seed (default {})"},
    {.name = "chunk", .arg = "DIMS", .type = CLI_STRING, CLI_AT(G, write.chunk), .set = set_chunk, .help = "chunk or tile shape, YxX or TxCxZxYxX (default: the format's)"},
    {.name = "compression", .arg = "NAME", .type = CLI_STRING, CLI_AT(G, write.compression), .help = "compression, as the formats allow (see docs/formats.md)"},
    {.name = "level", .arg = "N", .type = CLI_INT, CLI_AT(G, write.level), .lo = -100, .hi = 100, .help = "compression level (default: the codec's)"},
    {.name = "options", .arg = "K=V,...", .type = CLI_STRING, CLI_AT(G, write.options), .help = "format-specific options (see docs/formats.md)"},
    {.name = "preset", .arg = "NAME", .type = CLI_ENUM, .choices = "imagenet", .flags = CLI_UNKNOWN, .help = "imagenet: 10000 photo-like RGB JPEG images of about 500x375 in 100 classes"},
    {.name = "force", .type = CLI_FLAG, CLI_AT(G, write.force), .help = "replace a file at an output name that no manifest proves gen wrote (never a folder)"},
    {.name = NULL},
};

static int gen_run(const cli_args *a) {
  pb_gen_params p = gen_defaults;
  const char *out = cli_get(a, "out");
  if (out == NULL) return cli_usage_error("gen", "--out DIR is required");
  /* The imagenet preset only changes defaults; options given beside it come first and win. */
  const char *preset = cli_get(a, "preset");
  int imagenet = preset != NULL && strcmp(preset, "imagenet") == 0;
  if (imagenet) {
    p.rows = 10000;
    p.shape[PB_C] = 3;
    p.shape[PB_Y] = 375;
    p.shape[PB_X] = 500;
    p.dtype = PB_UINT8;
  }
  PB_RETURN_NOT_OK(cli_fill(a, &p));
  long rows = (long)p.rows;
  char preset_options[1024];
  if (imagenet) {
    if (p.formats == NULL) p.formats = "imagefolder";
    snprintf(preset_options, sizeof preset_options, "%s%simagefolder:classes=100,imagefolder:quality=95,"
             "gen:content=photo,gen:sizes=vary", p.write.options ? p.write.options : "",
             p.write.options ? "," : "");
    p.write.options = preset_options;
  }
  int64_t start = pb_now_ns();
  p.progress = gen_progress;
  p.progress_ctx = &start;
  p.cancel = &stop_signal;
  struct pb_error err = {{0}};
  catch_stops();
  int rc = pb_gen(out, &p, &err);
  release_stops();
  cli_progress(NULL, 0, 0, 0);
  int stopped = stopped_exit("gen", rc, err.message, "what was in the output folder is as it was");
  if (stopped >= 0) return stopped;
  if (rc == PB_EINVAL) return cli_usage_error("gen", "%s", err.message);
  if (rc != PB_OK) return cli_fail("gen", "%s", err.message);
  fprintf(stderr, "gen: %ld images of %lldx%lldx%lldx%lldx%lld %s in %.1f s -> %s\n", rows,
          (long long)p.shape[0], (long long)p.shape[1], (long long)p.shape[2], (long long)p.shape[3],
          (long long)p.shape[4], pb_dtype_name(p.dtype), (double)(pb_now_ns() - start) / 1e9, out);
  return CLI_OK;
}

const cli_command cli_cmd_gen = {
    .name = "gen",
    .summary = "write the same seeded synthetic images in several formats",
    .usage = "--out DIR [--rows N] [--size YxX] [--channels C] [--z Z] [--t T] [--dtype T] [--formats LIST] [--seed S] [--preset imagenet]",
    .details = "Writes DIR/<format> for each format (DIR/images.parquet, DIR/images.duckdb and\n"
               "DIR/images.pbraw for single-file formats) and DIR/manifest.json with the\n"
               "parameters, each image's CRC-32 and the list of files gen wrote. An earlier\n"
               "dataset in DIR is replaced only once the new one is complete, and only when\n"
               "DIR/manifest.json lists exactly its files: anything else at an output name is\n"
               "refused (exit 2) and nothing else in DIR is touched. Running gen again with the\n"
               "same rows, size, dtype and seed but other formats or settings adds those formats\n"
               "to the manifest (format_write says how each was written).",
    .opts = gen_opts,
    .defaults = &gen_defaults,
    .params = "pb_gen_params",
    .run = gen_run,
};

/* ---- inspect -------------------------------------------------------------------------------- */

static const cli_opt inspect_opts[] = {
    {.name = "format", .arg = "NAME", .type = CLI_STRING, .help = "format of PATH (default: detected)"},
    {.name = "json", .type = CLI_FLAG, .help = "print JSON"},
    {.name = "no-crc", .type = CLI_FLAG, .help = "skip reading pixels (no crc32)"},
    CLI_REMOTE_OPTS,
    {.name = NULL},
};

static void json_string(FILE *f, const char *s) {
  fputc('"', f);
  for (; *s; s++) {
    unsigned char ch = (unsigned char)*s;
    if (ch == '"' || ch == '\\') fprintf(f, "\\%c", ch);
    else if (ch < 0x20) fprintf(f, "\\u%04x", ch);
    else fputc(ch, f);
  }
  fputc('"', f);
}

static int inspect_run(const cli_args *a) {
  const char *path = a->pos[0];
  struct pb_error err = {{0}};
  pb_dataset *ds = NULL;
  int rc = pb_dataset_open(path, cli_get(a, "format"), &ds, &err);
  if (rc == PB_EINVAL) return cli_usage_error("inspect", "%s", err.message);
  if (rc != PB_OK) return cli_fail("inspect", "%s", err.message);
  int json = cli_has(a, "json"), crc = !cli_has(a, "no-crc");
  int64_t n = pb_dataset_count(ds), ignored = pb_dataset_ignored(ds);
  /* Output is built in memory and printed once every image has been tried, so the table or the
   * JSON document is whole. An image that cannot be read gets a row saying so (an "error" in
   * JSON) and its message on stderr, and the others are still read: one pass names every bad
   * file. Exit 2 when any failed; after INSPECT_MAX_FAILED failures the rest is not tried. */
  enum { INSPECT_MAX_FAILED = 100 };
  char *buf = NULL, *ebuf = NULL;
  size_t len = 0, elen = 0;
  FILE *f = open_memstream(&buf, &len), *ef = open_memstream(&ebuf, &elen);
  if (f == NULL || ef == NULL) {
    if (f != NULL) fclose(f);
    if (ef != NULL) fclose(ef);
    free(buf), free(ebuf);
    pb_dataset_free(ds);
    return cli_fail("inspect", "out of memory");
  }
  if (json) {
    fprintf(f, "{\"format\":");
    json_string(f, pb_dataset_format(ds));
    fprintf(f, ",\"path\":");
    json_string(f, path);
    fprintf(f, ",\"count\":%lld", (long long)n);
    if (ignored > 0) fprintf(f, ",\"ignored\":%lld", (long long)ignored);
    fprintf(f, ",\"images\":[");
  } else {
    char skipped[64] = "";
    if (ignored > 0) snprintf(skipped, sizeof skipped, " (%lld other files ignored)", (long long)ignored);
    fprintf(f, "%s: format %s, %lld images%s\n%6s  %-28s %-8s %-28s %s\n", path, pb_dataset_format(ds),
            (long long)n, skipped, "index", "name", "dtype", "shape [t,c,z,y,x]", crc ? "crc32" : "");
  }
  void *pixels = NULL;
  size_t cap = 0;
  int64_t start = pb_now_ns(), failed = 0, tried = 0;
  for (int64_t i = 0; i < n && failed < INSPECT_MAX_FAILED; i++) {
    pb_image_meta m;
    memset(&m, 0, sizeof m);
    struct pb_error ie = {{0}};
    int irc = pb_dataset_meta(ds, i, &m, &ie), have_meta = irc == PB_OK;
    char hex[16] = "";
    if (irc == PB_OK && crc && (irc = read_image(ds, i, &m, &pixels, &cap, &ie)) == PB_OK)
      snprintf(hex, sizeof hex, "%08x", pb_image_crc32(&m, pixels));
    tried = i + 1;
    if (irc != PB_OK) {
      failed++;
      fprintf(ef, "pipebench inspect: %s\n", ie.message);
      if (irc == PB_ENOMEM) break; /* the next image would find no more memory */
    }
    const char *name = have_meta ? m.name : "?";
    if (json) {
      fprintf(f, "%s{\"index\":%lld,\"name\":", i ? "," : "", (long long)i);
      json_string(f, name);
      if (have_meta)
        fprintf(f, ",\"dtype\":\"%s\",\"shape\":[%lld,%lld,%lld,%lld,%lld]", pb_dtype_name(m.dtype),
                (long long)m.shape[0], (long long)m.shape[1], (long long)m.shape[2],
                (long long)m.shape[3], (long long)m.shape[4]);
      if (crc && irc == PB_OK) fprintf(f, ",\"crc32\":\"%s\"", hex);
      if (irc != PB_OK) {
        fprintf(f, ",\"error\":");
        json_string(f, ie.message);
      }
      fprintf(f, "}");
    } else {
      char shape[64] = "";
      if (have_meta)
        snprintf(shape, sizeof shape, "[%lld,%lld,%lld,%lld,%lld]", (long long)m.shape[0],
                 (long long)m.shape[1], (long long)m.shape[2], (long long)m.shape[3], (long long)m.shape[4]);
      fprintf(f, "%6lld  %-28s %-8s %-28s %s\n", (long long)i, name,
              have_meta ? pb_dtype_name(m.dtype) : "", shape, irc == PB_OK ? hex : "UNREADABLE");
    }
    if ((i + 1) % 64 == 0 || i + 1 == n)
      cli_progress("inspect: reading", (long)(i + 1), (long)n, (double)(pb_now_ns() - start) / 1e9);
  }
  cli_progress(NULL, 0, 0, 0);
  if (json) fprintf(f, "]}\n");
  fclose(f);
  fclose(ef);
  pb_free(pixels, cap);
  pb_dataset_free(ds);
  fwrite(buf, 1, len, stdout);
  fflush(stdout);
  free(buf);
  fwrite(ebuf, 1, elen, stderr);
  free(ebuf);
  if (failed == 0) return CLI_OK;
  if (tried < n)
    return cli_fail("inspect", "%lld images could not be read; stopped there, %lld of %lld not tried",
                    (long long)failed, (long long)(n - tried), (long long)n);
  return cli_fail("inspect", "%lld of %lld images could not be read", (long long)failed, (long long)n);
}

const cli_command cli_cmd_inspect = {
    .name = "inspect",
    .summary = "show a dataset's format, images, shapes, dtypes and pixel checksums",
    .usage = "PATH [--format F] [--json]",
    .details = "crc32 is zlib's CRC-32 of an image's pixel bytes (little-endian, T,C,Z,Y,X C\n"
               "order), so the same image gives the same value in every format. An image that\n"
               "cannot be read gets a row marked UNREADABLE (in JSON, an \"error\" with the\n"
               "message) and its message on stderr; the others are still read, so one pass names\n"
               "every bad file, and the exit status is 2 (after 100 failures the rest is not\n"
               "tried).",
    .opts = inspect_opts,
    .max_pos = 1,
    .min_pos = 1,
    .run = inspect_run,
};

/* ---- convert -------------------------------------------------------------------------------- */

#define W pb_write_params
static const W convert_defaults = PB_WRITE_PARAMS_DEFAULTS;

/* One line per option (docs/options.md). */
static const cli_opt convert_opts[] = {
    {.name = "to", .arg = "FORMAT", .type = CLI_STRING, .help = "format to write (required)"},
    {.name = "out", .arg = "PATH", .type = CLI_STRING, .help = "where to write (required)"},
    {.name = "format", .arg = "NAME", .type = CLI_STRING, .help = "format of SRC (default: detected)"},
    {.name = "chunk", .arg = "DIMS", .type = CLI_STRING, CLI_AT(W, chunk), .set = set_chunk, .help = "chunk or tile shape, YxX or TxCxZxYxX"},
    {.name = "compression", .arg = "NAME", .type = CLI_STRING, CLI_AT(W, compression), .help = "compression, as the target format allows"},
    {.name = "level", .arg = "N", .type = CLI_INT, CLI_AT(W, level), .lo = -100, .hi = 100, .help = "compression level"},
    {.name = "options", .arg = "K=V,...", .type = CLI_STRING, CLI_AT(W, options), .help = "target format options"},
    {.name = "force", .type = CLI_FLAG, CLI_AT(W, force), .help = "replace a file at DST that no manifest proves convert wrote (never a folder)"},
    CLI_REMOTE_OPTS,
    {.name = NULL},
};

typedef struct convert_job {
  pb_dataset *ds;
  void *pixels;
  size_t cap;
  int64_t start;
} convert_job;

static int convert_fill(void *ctx, pb_writer *wr, struct pb_error *err) {
  convert_job *job = ctx;
  int rc = PB_OK;
  int64_t n = pb_dataset_count(job->ds);
  for (int64_t i = 0; i < n && rc == PB_OK; i++) {
    if (stop_signal != 0)
      return pb_error_set(err, PB_ECANCELED, "interrupted by %s", stop_signal == SIGINT ? "SIGINT" : "SIGTERM");
    pb_image_meta m;
    rc = pb_dataset_meta(job->ds, i, &m, err);
    if (rc != PB_OK) break;
    rc = read_image(job->ds, i, &m, &job->pixels, &job->cap, err);
    if (rc == PB_OK) rc = pb_writer_add(wr, &m, job->pixels, err);
    cli_progress("convert", (long)(i + 1), (long)n, (double)(pb_now_ns() - job->start) / 1e9);
  }
  return rc;
}

static int convert_run(const cli_args *a) {
  const char *src = a->pos[0], *to = cli_get(a, "to"), *out = cli_get(a, "out");
  if (to == NULL) return cli_usage_error("convert", "--to FORMAT is required");
  if (out == NULL) return cli_usage_error("convert", "--out PATH is required");
  const pb_format_info *fi = pb_format_find(to);
  if (fi == NULL) {
    char list[512] = "";
    for (int i = 0; i < pb_format_count(); i++)
      if (pb_format_at(i)->can_write) {
        if (list[0]) strncat(list, ", ", sizeof list - strlen(list) - 1);
        strncat(list, pb_format_at(i)->name, sizeof list - strlen(list) - 1);
      }
    return cli_usage_error("convert", "unknown format '%s' (writable: %s)", to, list);
  }
  pb_write_params w = convert_defaults;
  PB_RETURN_NOT_OK(cli_fill(a, &w));
  struct pb_error err = {{0}};
  convert_job job = {0};
  int rc = pb_dataset_open(src, cli_get(a, "format"), &job.ds, &err);
  if (rc == PB_EINVAL) return cli_usage_error("convert", "%s", err.message);
  if (rc != PB_OK) return cli_fail("convert", "%s", err.message);
  /* DST and DST.manifest.json (the CRC-32s of what DST reads back as, for verify) come into
   * place together, or neither does. */
  int started = 0;
  int64_t n = pb_dataset_count(job.ds), start = pb_now_ns();
  job.start = start;
  catch_stops();
  rc = pb_verify_write_dataset(out, to, &w, src, convert_fill, &job, &started, &err);
  release_stops();
  cli_progress(NULL, 0, 0, 0);
  pb_free(job.pixels, job.cap);
  pb_dataset_free(job.ds);
  /* Only what is judged before the writer is open, and the writer's set-up, is about what the
   * user asked for (options, codec, target); what fails after it is about the data, whatever
   * its code: exit 2, no usage hint. */
  int stopped = stopped_exit("convert", rc, err.message, "what was at the output is as it was");
  if (stopped >= 0) return stopped;
  if (rc == PB_EINVAL && !started) return cli_usage_error("convert", "%s", err.message);
  if (rc != PB_OK) return cli_fail("convert", "%s", err.message);
  fprintf(stderr, "convert: %lld images %s -> %s (%s) in %.1f s\n", (long long)n, src, out, to,
          (double)(pb_now_ns() - start) / 1e9);
  return CLI_OK;
}

const cli_command cli_cmd_convert = {
    .name = "convert",
    .summary = "convert a dataset from any readable format to any writable one",
    .usage = "SRC --to FORMAT --out DST [options]",
    .details = "Pixels and metadata (dtype, shape, physical sizes, channels) are kept. DST appears\n"
               "only when the whole conversion succeeded, together with DST.manifest.json, which\n"
               "holds each image's CRC-32 as DST reads back (pipebench verify DST checks them)\n"
               "and the list of files convert wrote: both are written beside DST first and put\n"
               "into place together, or neither is. Something already at DST is replaced only\n"
               "when DST.manifest.json lists exactly its files; otherwise exit 2, naming it.",
    .opts = convert_opts,
    .defaults = &convert_defaults,
    .params = "pb_write_params",
    .max_pos = 1,
    .min_pos = 1,
    .run = convert_run,
};
