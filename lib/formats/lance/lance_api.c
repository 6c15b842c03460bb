/* The public face of the Lance engine (pipebench/lance.h). pb_lance is the internal pb__lance. */
#include "formats/lance/lance.h"
#include "pipebench/lance.h"

struct pb_lance {
  pb__lance *l;
};

int pb_lance_engine(char *engine, size_t size, struct pb_error *err) {
  return pb__lance_engine(engine, size, err);
}

int pb_lance_open(const char *path, pb_lance **out, struct pb_error *err) {
  *out = NULL;
  pb_lance *h = pb_alloc(sizeof *h);
  if (h == NULL) return pb_error_set(err, PB_ENOMEM, "out of memory opening %s", path);
  int rc = pb__lance_open(path, NULL, &h->l, err);
  if (rc != PB_OK) {
    pb_free(h, sizeof *h);
    return rc;
  }
  *out = h;
  return PB_OK;
}

void pb_lance_free(pb_lance *l) {
  if (l == NULL) return;
  pb__lance_free(l->l);
  pb_free(l, sizeof *l);
}

int64_t pb_lance_count(const pb_lance *l) { return pb__lance_count(l->l); }

int pb_lance_take_times(pb_lance *l, const int64_t *order, size_t n, int batch, int64_t **times,
                        size_t *ncalls, int64_t *bytes, struct pb_error *err) {
  return pb__lance_take_times(l->l, order, n, batch, times, ncalls, bytes, err);
}
