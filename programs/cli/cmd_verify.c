/* pipebench verify: every image's pixels against the CRC-32 its manifest recorded. */
#include <stddef.h>
#include <stdio.h>

#include "cli.h"
#include "pipebench/verify.h"

typedef struct verify_ctx {
  int64_t start;
} verify_ctx;

/* Each image that differs is one line on stdout, so a script can list them. */
static void on_mismatch(void *ctx, const pb_verify_image *img) {
  (void)ctx;
  if (img->error != NULL)
    printf("image %lld '%s': expected %08x, unreadable: %s\n", (long long)img->index, img->name,
           img->expected, img->error);
  else
    printf("image %lld '%s': expected %08x, got %08x\n", (long long)img->index, img->name,
           img->expected, img->got);
}

static void on_progress(void *ctx, int64_t done, int64_t total) {
  verify_ctx *v = ctx;
  if (done % 64 == 0 || done == total)
    cli_progress("verify: reading", (long)done, (long)total, (double)(pb_now_ns() - v->start) / 1e9);
}

#define P pb_verify_params
static const P verify_defaults = PB_VERIFY_PARAMS_DEFAULTS;

/* One line per option (docs/options.md). */
static const cli_opt verify_opts[] = {
    {.name = "manifest", .arg = "FILE", .type = CLI_STRING, CLI_AT(P, manifest), .help = "manifest to check against (default: the dataset's own)"},
    {.name = "format", .arg = "NAME", .type = CLI_STRING, CLI_AT(P, format), .help = "format of DATASET (default: detected)"},
    CLI_REMOTE_OPTS,
    {.name = NULL},
};

static int verify_run(const cli_args *a) {
  const char *path = a->pos[0];
  verify_ctx v = {pb_now_ns()};
  pb_verify_params p = verify_defaults;
  PB_RETURN_NOT_OK(cli_fill(a, &p));
  p.on_mismatch = on_mismatch;
  p.progress = on_progress;
  p.ctx = &v;
  pb_verify_result r;
  struct pb_error err = {{0}};
  int rc = pb_verify(path, &p, &r, &err);
  cli_progress(NULL, 0, 0, 0);
  fflush(stdout);
  if (rc == PB_EINVAL) return cli_usage_error("verify", "%s", err.message);
  if (rc != PB_OK) return cli_fail("verify", "%s", err.message);
  if (r.mismatched > 0)
    return cli_fail("verify", "%lld of %lld images of %s differ from %s", (long long)r.mismatched,
                    (long long)r.images, path, r.manifest);
  fprintf(stderr, "verify: %lld images of %s match %s\n", (long long)r.images, path, r.manifest);
  return CLI_OK;
}

const cli_command cli_cmd_verify = {
    .name = "verify",
    .summary = "check every image's pixels against the CRC-32s of the dataset's manifest",
    .usage = "DATASET [--manifest FILE] [--format F]",
    .details = "Reads every image and compares the CRC-32 of its pixels (as inspect shows it) with\n"
               "the manifest: DATASET.manifest.json (written by convert), else manifest.json\n"
               "next to DATASET when it lists it (written by gen), or FILE (also inspect --json's\n"
               "output). Each image that differs or cannot be read is printed on stdout as\n"
               "\"image INDEX 'NAME': expected CRC, got CRC\"; exit 2 when any is, or when the\n"
               "manifest is missing or malformed. A manifest rewritten with the data cannot be\n"
               "caught (see docs/bad-input.md).",
    .opts = verify_opts,
    .defaults = &verify_defaults,
    .params = "pb_verify_params",
    .max_pos = 1,
    .min_pos = 1,
    .run = verify_run,
};
