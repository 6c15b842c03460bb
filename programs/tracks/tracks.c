/* The table of tracks: pb_run measures them in this order and the report shows them in it.
 * The report's public calls start here too, handing the report the tracks' views. */
#include <string.h>

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
static const pb__rp_view *const *views(size_t *n) {
  static const pb__rp_view *v[PB__RP_TRACKS];
  *n = pb__track_count() < PB__RP_TRACKS ? pb__track_count() : PB__RP_TRACKS;
  for (size_t i = 0; i < *n; i++) v[i] = &tracks[i]->view;
  return v;
}

int pb_report_plots_ex(const char *out_dir, pb_report_note_fn note, void *note_ctx, int *n_written,
                       struct pb_error *err) {
  size_t n;
  const pb__rp_view *const *v = views(&n);
  return pb__rp_plots(v, n, out_dir, note, note_ctx, n_written, err);
}

int pb_report_plots(const char *out_dir, int *n_written, struct pb_error *err) {
  return pb_report_plots_ex(out_dir, NULL, NULL, n_written, err);
}

int pb_report_write_ex(const char *out_dir, pb_report_note_fn note, void *note_ctx,
                       struct pb_error *err) {
  size_t n;
  const pb__rp_view *const *v = views(&n);
  return pb__rp_write(v, n, out_dir, note, note_ctx, err);
}

int pb_report_write(const char *out_dir, struct pb_error *err) {
  return pb_report_write_ex(out_dir, NULL, NULL, err);
}

int pb__tracks_report(const char *out_dir, const char *infer_root,
                      void (*line)(void *ctx, const char *text), void *ctx) {
  size_t n;
  const pb__rp_view *const *v = views(&n);
  return pb__report_after_run(v, n, out_dir, infer_root, line, ctx);
}
