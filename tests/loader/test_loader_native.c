/* Native batches (dtype native): the dataset's pixels byte for byte for uint8, uint16 and
 * float32 datasets made by pb_gen, with 0 and 2 workers and every cache mode; DLPack types;
 * transforms refused; option text. Runs under ThreadSanitizer in CI (2 workers). */
#include "formats/format_internal.h"
#include "loader_test.h"
#include "pipebench/gen.h"

static char dir[512];

/* Writes rows images of dt and shape into dir/<tag> as raw and tiff; path of the raw copy in
 * raw_out, of the tiff copy in tiff_out. */
static void make_set(const char *tag, pb_dtype dt, const int64_t shape[PB_NDIM], int64_t rows,
                     char *raw_out, char *tiff_out, size_t size) {
  char sub[700];
  snprintf(sub, sizeof sub, "%s/%s", dir, tag);
  pb_gen_params g = PB_GEN_PARAMS_DEFAULTS;
  g.rows = rows;
  memcpy(g.shape, shape, sizeof g.shape);
  g.dtype = dt;
  g.seed = 11;
  g.formats = "raw,tiff";
  struct pb_error err = {{0}};
  CHECK_OK(pb_gen(sub, &g, &err), &err);
  pb_gen_format_path(sub, "raw", raw_out, size);
  pb_gen_format_path(sub, "tiff", tiff_out, size);
}

/* Every image of path, read through the dataset API: the reference pixels. */
static unsigned char *read_all(const char *path, int64_t *count, size_t *img_bytes) {
  struct pb_error err = {{0}};
  pb_dataset *ds = NULL;
  CHECK_OK(pb_dataset_open(path, NULL, &ds, &err), &err);
  *count = pb_dataset_count(ds);
  pb_image_meta m;
  CHECK_OK(pb_dataset_meta(ds, 0, &m, &err), &err);
  *img_bytes = pb_image_bytes(&m);
  unsigned char *all = malloc((size_t)*count * *img_bytes);
  CHECK(all != NULL);
  for (int64_t i = 0; i < *count; i++)
    CHECK_OK(pb_dataset_read(ds, i, all + (size_t)i * *img_bytes, *img_bytes, NULL, &err), &err);
  pb_dataset_free(ds);
  return all;
}

static void check_dlpack(pb_batch *b, pb_dtype dt) {
  struct pb_error err = {{0}};
  DLManagedTensor *mt = NULL;
  CHECK_OK(pb_batch_to_dlpack(b, &mt, &err), &err);
  const DLTensor *t = &mt->dl_tensor;
  int code = dt == PB_INT16 ? kDLInt : dt == PB_FLOAT32 || dt == PB_FLOAT64 ? kDLFloat : kDLUInt;
  CHECK_EQ(t->dtype.code, code);
  CHECK_EQ(t->dtype.bits, 8 * pb_dtype_size(dt));
  CHECK_EQ(t->dtype.lanes, 1);
  CHECK(t->data == b->data);
  CHECK_EQ(t->ndim, b->ndim);
  int64_t elems = 1;
  for (int k = 0; k < t->ndim; k++) elems *= t->shape[k];
  CHECK_EQ((size_t)elems * pb_dtype_size(dt), b->nbytes);
  mt->deleter(mt);
}

/* One epoch (and the next, reshuffled) of path as native batches; every sample must equal the
 * reference bytes and every index must come once per epoch. */
static void check_epochs(const char *path, pb_dtype dt, int z, const unsigned char *ref,
                         int64_t count, size_t img_bytes, int workers, pb_cache_mode cache) {
  pb_loader_params p = PB_LOADER_PARAMS_DEFAULTS;
  struct pb_error err = {{0}};
  CHECK_OK(pb_loader_params_set(&p, "dtype", "native", &err), &err);
  p.batch_size = 4;
  p.workers = workers;
  p.shuffle = 1;
  p.seed = 3;
  p.cache = cache;
  pb_loader *l = NULL;
  CHECK_OK(pb_loader_new(path, &p, &l, &err), &err);
  for (int64_t epoch = 0; epoch < 2; epoch++) {
    if (epoch > 0) CHECK_OK(pb_loader_reset(l, epoch, &err), &err);
    int seen[256] = {0};
    int64_t samples = 0, batches = 0;
    for (;;) {
      pb_batch *b = NULL;
      CHECK_OK(pb_loader_next(l, &b, &err), &err);
      if (b == NULL) break;
      CHECK_EQ(b->dtype, PB_OUT_NATIVE);
      CHECK_EQ(b->native_dtype, dt);
      CHECK_EQ(pb_batch_element_size(b), pb_dtype_size(dt));
      CHECK_EQ(b->ndim, z > 1 ? 5 : 4);
      CHECK_EQ(b->nbytes, (size_t)b->shape[0] * img_bytes);
      CHECK_EQ((uintptr_t)b->data % 64, 0);
      for (int64_t j = 0; j < b->shape[0]; j++) {
        int64_t i = b->indices[j];
        CHECK(i >= 0 && i < count);
        seen[i]++;
        if (memcmp((const unsigned char *)b->data + (size_t)j * img_bytes,
                   ref + (size_t)i * img_bytes, img_bytes) != 0) {
          fprintf(stderr, "%s: sample %lld (batch %lld, dtype %s, workers %d, cache %d) differs\n",
                  path, (long long)i, (long long)b->number, pb_dtype_name(dt), workers,
                  (int)cache);
          exit(1);
        }
      }
      if (batches == 0) check_dlpack(b, dt);
      samples += b->shape[0];
      batches++;
      pb_batch_free(b);
    }
    CHECK_EQ(samples, count);
    CHECK_EQ(batches, pb_loader_batches_per_epoch(l));
    for (int64_t i = 0; i < count; i++) CHECK_EQ(seen[i], 1);
  }
  pb_loader_free(l);
}

static void test_pixels(void) {
  const struct {
    pb_dtype dt;
    int64_t shape[PB_NDIM];
    const char *tag;
  } sets[] = {
      {PB_UINT8, {1, 3, 1, 9, 7}, "u8"},
      {PB_UINT16, {1, 2, 1, 10, 10}, "u16"},
      {PB_FLOAT32, {1, 1, 1, 6, 11}, "f32"},
      {PB_UINT16, {1, 1, 3, 5, 6}, "u16z"}, /* N,C,Z,H,W batches */
  };
  const pb_cache_mode caches[] = {PB_CACHE_NONE, PB_CACHE_PRELOAD, PB_CACHE_SHARED};
  for (size_t s = 0; s < sizeof sets / sizeof sets[0]; s++) {
    char raw[800], tiff[800];
    make_set(sets[s].tag, sets[s].dt, sets[s].shape, 13, raw, tiff, sizeof raw);
    int64_t count;
    size_t img_bytes;
    unsigned char *ref = read_all(raw, &count, &img_bytes);
    CHECK_EQ(count, 13);
    /* The tiff copy decodes to the same pixels: the reference holds for both. */
    int64_t count2;
    size_t bytes2;
    unsigned char *ref2 = read_all(tiff, &count2, &bytes2);
    CHECK(count2 == count && bytes2 == img_bytes && memcmp(ref, ref2, img_bytes * 13) == 0);
    free(ref2);
    for (int w = 0; w <= 2; w += 2)
      for (size_t c = 0; c < 3; c++) {
        check_epochs(raw, sets[s].dt, (int)sets[s].shape[PB_Z], ref, count, img_bytes, w,
                     caches[c]);
        check_epochs(tiff, sets[s].dt, (int)sets[s].shape[PB_Z], ref, count, img_bytes, w,
                     caches[c]);
      }
    free(ref);
    printf("native %s: equal to the dataset's pixels (raw, tiff; workers 0, 2; 3 caches)\n",
           sets[s].tag);
  }
}

static void test_refusals_and_names(void) {
  char raw[800], tiff[800];
  const int64_t shape[PB_NDIM] = {1, 1, 1, 4, 4};
  make_set("refuse", PB_UINT16, shape, 3, raw, tiff, sizeof raw);
  struct pb_error err = {{0}};
  const pb_transform bad[] = {PB_TRANSFORM_NORMALIZE, PB_TRANSFORM_AUGMENT};
  for (size_t i = 0; i < 2; i++) {
    pb_loader_params p = PB_LOADER_PARAMS_DEFAULTS;
    p.out_dtype = PB_OUT_NATIVE;
    p.transform = bad[i];
    pb_loader *l = NULL;
    err.message[0] = '\0';
    CHECK_EQ(pb_loader_new(raw, &p, &l, &err), PB_EINVAL);
    CHECK(l == NULL);
    CHECK_CONTAINS(err.message, "transform must be none");
    CHECK_CONTAINS(err.message, bad[i] == PB_TRANSFORM_NORMALIZE ? "normalize" : "augment");
  }
  /* Out of range stays refused. */
  pb_loader_params p = PB_LOADER_PARAMS_DEFAULTS;
  p.out_dtype = (pb_out_dtype)(PB_OUT_NATIVE + 1);
  pb_loader *l = NULL;
  CHECK_EQ(pb_loader_new(raw, &p, &l, &err), PB_EINVAL);
  CHECK(l == NULL);
  /* Names and sizes. */
  CHECK(strcmp(pb_out_dtype_name(PB_OUT_NATIVE), "native") == 0);
  CHECK_EQ(pb_out_dtype_size(PB_OUT_NATIVE), 0);
  CHECK_EQ(pb_out_dtype_size(PB_OUT_FLOAT32), 4);
  CHECK_EQ(pb_out_dtype_size(PB_OUT_BFLOAT16), 2);
  pb_loader_params q = PB_LOADER_PARAMS_DEFAULTS;
  CHECK(q.allocator == NULL);
  CHECK_OK(pb_loader_params_set(&q, "dtype", "native", &err), &err);
  CHECK_EQ(q.out_dtype, PB_OUT_NATIVE);
  CHECK_EQ(pb_loader_params_set(&q, "dtype", "uint16", &err), PB_EINVAL);
  CHECK_CONTAINS(err.message, "native");
  /* A float32 batch of the same data reports the pixel type too, and its own element size. */
  pb_loader_params f = PB_LOADER_PARAMS_DEFAULTS;
  CHECK_OK(pb_loader_new(raw, &f, &l, &err), &err);
  pb_batch *b = NULL;
  CHECK_OK(pb_loader_next(l, &b, &err), &err);
  CHECK(b != NULL);
  CHECK_EQ(b->dtype, PB_OUT_FLOAT32);
  CHECK_EQ(b->native_dtype, PB_UINT16);
  CHECK_EQ(pb_batch_element_size(b), 4);
  pb_batch_free(b);
  pb_loader_free(l);
  printf("refusals and names: ok\n");
}

int main(void) {
  test_tmpdir(dir, sizeof dir);
  test_pixels();
  test_refusals_and_names();
  pb__remove_tree(dir);
  return 0;
}
