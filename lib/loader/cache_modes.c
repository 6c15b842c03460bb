/* Cache modes: preload into memory, and the shared raw cache file. */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "formats/format_internal.h"
#include "formats/raw/raw.h"
#include "loader/loader_impl.h"
#include "pipebench/sys.h"

/* Reads image i into dst for a cache; with skip_errors a failure marks it bad. */
static int cache_read(pb_loader *l, pb_dataset *ds, int64_t i, void *dst, struct pb_error *err) {
  int rc = pb_dataset_read(ds, i, dst, l->img_bytes, NULL, err);
  if (rc == PB_OK) return PB_OK;
  if (!l->p.skip_errors) {
    pb__loader_sample_error(l, ds, i, err);
    return rc;
  }
  if (l->bad == NULL && (l->bad = calloc((size_t)l->count, 1)) == NULL)
    return pb_error_set(err, PB_ENOMEM, "out of memory");
  l->bad[i] = 1;
  memset(dst, 0, l->img_bytes);
  return PB_OK;
}

int pb__loader_build_preload(pb_loader *l, pb_dataset *ds, struct pb_error *err) {
  int64_t t0 = pb_now_ns();
  l->preload_size = (size_t)l->count * l->img_bytes;
  l->preload = pb_alloc(l->preload_size);
  if (l->preload == NULL)
    return pb_error_set(err, PB_ENOMEM, "preload: out of memory for %zu bytes", l->preload_size);
  for (int64_t i = 0; i < l->count; i++)
    PB_RETURN_NOT_OK(cache_read(l, ds, i, l->preload + (size_t)i * l->img_bytes, err));
  l->stats.preload_ns = pb_now_ns() - t0;
  l->stats.preload_bytes = (int64_t)l->preload_size;
  return PB_OK;
}

static int open_raw_checked(pb_loader *l, const char *file, struct pb_error *err) {
  PB_RETURN_NOT_OK(pb__raw_open_mapped(file, &l->raw, err));
  pb_image_meta m;
  int same = pb__format_raw.count(l->raw) == l->count;
  if (same) {
    PB_RETURN_NOT_OK(pb__format_raw.meta(l->raw, 0, &m, err));
    same = m.dtype == l->meta.dtype;
    for (int k = 0; k < PB_NDIM; k++) same = same && m.shape[k] == l->meta.shape[k];
  }
  if (!same)
    return pb_error_set(err, PB_EFORMAT,
                        "cache file %s does not match dataset %s (image count or shape differs); "
                        "remove it or give another cache_path",
                        file, l->path);
  return PB_OK;
}

int pb__loader_build_shared(pb_loader *l, pb_dataset *ds, struct pb_error *err) {
  int64_t t0 = pb_now_ns();
  const char *given = l->p.cache_path;
  if (given == NULL && strcmp(pb_dataset_format(ds), "raw") == 0) {
    /* Already decoded pixels in one file: map the dataset itself. */
    PB_RETURN_NOT_OK(open_raw_checked(l, l->path, err));
  } else if (given != NULL && access(given, F_OK) == 0) {
    PB_RETURN_NOT_OK(open_raw_checked(l, given, err));
  } else {
    static atomic_int counter;
    char tmp[4096];
    if (given == NULL) {
      const char *dir = pb_tmp_dir();
      snprintf(tmp, sizeof tmp, "%s/pipebench-cache-%d-%d.raw", dir, (int)getpid(),
               atomic_fetch_add(&counter, 1));
    }
    const char *file = given != NULL ? given : tmp;
    pb_writer *wr = NULL;
    PB_RETURN_NOT_OK(pb_writer_new(file, "raw", NULL, &wr, err));
    void *buf = pb_alloc(l->img_bytes);
    int rc = buf == NULL ? pb_error_set(err, PB_ENOMEM, "out of memory") : PB_OK;
    pb_image_meta m;
    for (int64_t i = 0; rc == PB_OK && i < l->count; i++) {
      rc = pb_dataset_meta(ds, i, &m, err);
      if (rc == PB_OK) rc = cache_read(l, ds, i, buf, err);
      if (rc == PB_OK) rc = pb_writer_add(wr, &m, buf, err);
    }
    if (rc == PB_OK) rc = pb_writer_finish(wr, err);
    pb_writer_free(wr);
    pb_free(buf, l->img_bytes);
    if (rc != PB_OK) {
      pb_error_prefix(err, "building cache file %s: ", file);
      return rc;
    }
    rc = open_raw_checked(l, file, err);
    /* An anonymous cache lives only as long as its map: nothing is left behind, even on a
     * crash after this point. */
    if (given == NULL) unlink(file);
    PB_RETURN_NOT_OK(rc);
  }
  l->stats.preload_ns = pb_now_ns() - t0;
  l->stats.preload_bytes = (int64_t)pb__raw_file_size(l->raw);
  return PB_OK;
}
