/* The table of tracks: pb_run measures them in this order and the report shows them in it. */
#include <string.h>

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
