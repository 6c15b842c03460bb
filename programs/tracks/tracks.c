/* The table of tracks: pb_run measures them in this order and the report shows them in it.
 * The report's public calls start here too, handing the report the tracks' views. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "tracks/dirlock.h"
#include "pipebench/report.h"

#include "tracks/tracks.h"

static const pb__track *const tracks[] = {
    &pb__track1,
    &pb__track2,
    &pb__track3,
    &pb__track4,
};

size_t pb__track_count(void) { return sizeof tracks / sizeof tracks[0]; }

const pb__track *pb__track_at(size_t i) { return i < pb__track_count() ? tracks[i] : NULL; }

const pb__track *pb__track_find(const char *id) {
  for (size_t i = 0; id != NULL && i < pb__track_count(); i++)
    if (strcmp(tracks[i]->view.id, id) == 0) return tracks[i];
  return NULL;
}

const char *pb_run_track(size_t i, const char **name) {
  const pb__track *t = pb__track_at(i);
  if (name != NULL) *name = t != NULL ? t->name : NULL;
  return t != NULL ? t->view.id : NULL;
}

/* The views of every track, in the table's order. */
static const pb__report_view *const *views(size_t *n) {
  static const pb__report_view *v[PB__RP_TRACKS];
  *n = pb__track_count() < PB__RP_TRACKS ? pb__track_count() : PB__RP_TRACKS;
  for (size_t i = 0; i < *n; i++) v[i] = &tracks[i]->view;
  return v;
}

/* The folder's lock while the report writes into it (dirlock.h), so that a run cannot swap its
 * files in under the report; *l stays NULL for a path that is no folder (the call says so). */
static int lock_folder(const char *out_dir, pb__dirlock **l, struct pb_error *err) {
  struct stat st;
  *l = NULL;
  if (out_dir == NULL || stat(out_dir, &st) != 0 || !S_ISDIR(st.st_mode)) return PB_OK;
  return pb__dirlock_take(out_dir, "report", l, err);
}

int pb_report_plots_ex(const char *out_dir, pb_report_note_fn note, void *note_ctx, int *n_written,
                       struct pb_error *err) {
  size_t n;
  const pb__report_view *const *v = views(&n);
  if (n_written != NULL) *n_written = 0;
  pb__dirlock *l;
  PB_RETURN_NOT_OK(lock_folder(out_dir, &l, err));
  int rc = pb__report_plots(v, n, out_dir, note, note_ctx, n_written, err);
  pb__dirlock_release(l);
  return rc;
}

int pb_report_plots(const char *out_dir, int *n_written, struct pb_error *err) {
  return pb_report_plots_ex(out_dir, NULL, NULL, n_written, err);
}

int pb_report_write_ex(const char *out_dir, pb_report_note_fn note, void *note_ctx,
                       struct pb_error *err) {
  size_t n;
  const pb__report_view *const *v = views(&n);
  pb__dirlock *l;
  PB_RETURN_NOT_OK(lock_folder(out_dir, &l, err));
  int rc = pb__report_write(v, n, out_dir, note, note_ctx, err);
  pb__dirlock_release(l);
  return rc;
}

int pb_report_write(const char *out_dir, struct pb_error *err) {
  return pb_report_write_ex(out_dir, NULL, NULL, err);
}

int pb_report_check(const char *out_dir, struct pb_error *err) {
  struct stat st;
  if (out_dir == NULL || stat(out_dir, &st) != 0 || !S_ISDIR(st.st_mode))
    return pb_error_set(err, PB_ENOTFOUND, "%s: no such results folder", out_dir ? out_dir : "(null)");
  size_t n;
  const pb__report_view *const *v = views(&n);
  pb__dirlock *l;
  PB_RETURN_NOT_OK(lock_folder(out_dir, &l, err));
  pb__report_data *d = malloc(sizeof *d);
  int rc = d == NULL ? pb_error_set(err, PB_ENOMEM, "out of memory") : PB_OK;
  if (rc == PB_OK) {
    pb__report_load(out_dir, NULL, v, n, d, NULL, NULL);
    rc = pb__report_check_run(d, err);
    pb__report_free(d);
  }
  for (int i = 0; i < 2 && rc == PB_OK; i++) {
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", out_dir, i == 0 ? "report.md" : "report.html");
    rc = pb__report_ours(path, err);
  }
  free(d);
  pb__dirlock_release(l);
  return rc;
}

int pb__tracks_report(const char *out_dir, const char *infer_root,
                      void (*line)(void *ctx, const char *text), void *ctx) {
  size_t n;
  const pb__report_view *const *v = views(&n);
  return pb__report_after_run(v, n, out_dir, infer_root, line, ctx);
}
