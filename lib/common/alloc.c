/* Allocator hooks: every large buffer goes through here. */
#include <stdlib.h>

#include "pipebench/core.h"

static void *default_alloc(void *ctx, size_t size, size_t alignment) {
  (void)ctx;
  void *p = NULL;
  if (size == 0) size = 1;
  if (posix_memalign(&p, alignment < sizeof(void *) ? sizeof(void *) : alignment, size) != 0)
    return NULL;
  return p;
}

static void default_free(void *ctx, void *ptr, size_t size) {
  (void)ctx;
  (void)size;
  free(ptr);
}

static const pb_allocator default_allocator = {default_alloc, default_free, NULL};
static pb_allocator current = {default_alloc, default_free, NULL};

void pb_set_allocator(const pb_allocator *alloc) {
  current = alloc != NULL ? *alloc : default_allocator;
}

const pb_allocator *pb_get_allocator(void) { return &current; }

void *pb_alloc(size_t size) { return current.alloc(current.ctx, size, 64); }

void pb_free(void *ptr, size_t size) {
  if (ptr != NULL) current.free(current.ctx, ptr, size);
}
