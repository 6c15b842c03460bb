/* The tiff backend leaves libtiff's process-wide error and warning handlers alone: a program
 * that set its own keeps them after the backend wrote, read and refused files, and none of the
 * backend's own libtiff messages reach them (each handle has its handlers). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <tiffio.h>
#include <unistd.h>

#include "check.h"
#include "common/fs.h"
#include "pipebench/format.h"

static int calls;

static void my_error(const char *module, const char *fmt, va_list ap) {
  (void)module;
  (void)fmt;
  (void)ap;
  calls++;
}

static void my_warning(const char *module, const char *fmt, va_list ap) {
  (void)module;
  (void)fmt;
  (void)ap;
  calls++;
}

static void my_error_ext(thandle_t h, const char *module, const char *fmt, va_list ap) {
  (void)h;
  (void)module;
  (void)fmt;
  (void)ap;
  calls++;
}

static void my_warning_ext(thandle_t h, const char *module, const char *fmt, va_list ap) {
  (void)h;
  (void)module;
  (void)fmt;
  (void)ap;
  calls++;
}

/* Writes a tiff dataset of two images, reads it, and reads a truncated copy of one file. */
static void use_backend(const char *dir) {
  char path[1024], file[1024], bad[1024];
  snprintf(path, sizeof path, "%s/t", dir);
  struct pb_error err = {{0}};
  pb_write_params wp = PB_WRITE_PARAMS_DEFAULTS;
  wp.compression = "zstd";
  pb_writer *w = NULL;
  CHECK_OK(pb_writer_new(path, "tiff", &wp, &w, &err), &err);
  int64_t shape[PB_NDIM] = {1, 2, 1, 40, 30};
  pb_image_meta m;
  pb_image_meta_init(&m, "a", PB_UINT16, shape);
  size_t nb = pb_image_bytes(&m);
  unsigned char *px = calloc(1, nb);
  CHECK(px != NULL);
  for (int i = 0; i < 2; i++) {
    snprintf(m.name, sizeof m.name, "img_%d.ome.tif", i);
    CHECK_OK(pb_writer_add(w, &m, px, &err), &err);
  }
  CHECK_OK(pb_writer_finish(w, &err), &err);
  pb_writer_free(w);
  pb_dataset *ds = NULL;
  CHECK_OK(pb_dataset_open(path, "tiff", &ds, &err), &err);
  CHECK_OK(pb_dataset_read(ds, 1, px, nb, NULL, &err), &err);
  pb_dataset_free(ds);

  /* a copy cut inside its strips, and one with a garbage header */
  char **names;
  size_t count;
  CHECK_OK(pb__list_dir(path, &names, &count, &err), &err);
  CHECK(count == 2);
  snprintf(file, sizeof file, "%s/%s", path, names[0]);
  pb__free_names(names, count);
  void *data;
  size_t size;
  CHECK_OK(pb__read_file(file, &data, &size, &err), &err);
  snprintf(bad, sizeof bad, "%s/cut.tif", dir);
  CHECK_OK(pb__write_file(bad, data, size / 2, &err), &err);
  EXPECT(pb_dataset_open(bad, "tiff", &ds, &err) != PB_OK ||
         pb_dataset_read(ds, 0, px, nb, NULL, &err) != PB_OK);
  pb_dataset_free(ds);
  ds = NULL;
  memset(data, 0x49, 16 < size ? 16 : size);
  CHECK_OK(pb__write_file(bad, data, size, &err), &err);
  EXPECT(pb_dataset_open(bad, "tiff", &ds, &err) != PB_OK ||
         pb_dataset_read(ds, 0, px, nb, NULL, &err) != PB_OK);
  EXPECT_CONTAINS(err.message, "cut.tif");
  pb_dataset_free(ds);
  pb_free(data, size);
  free(px);
}

int main(void) {
  char dir[256];
  snprintf(dir, sizeof dir, "/tmp/pb_test_tiff_handlers_%d", (int)getpid());
  struct pb_error err;
  CHECK_OK(pb__mkdirs(dir, &err), &err);
  TIFFSetErrorHandler(my_error);
  TIFFSetWarningHandler(my_warning);
  TIFFSetErrorHandlerExt(my_error_ext);
  TIFFSetWarningHandlerExt(my_warning_ext);
  use_backend(dir);
  /* each setter hands back the handler it replaces: still ours */
  EXPECT(TIFFSetErrorHandler(my_error) == my_error);
  EXPECT(TIFFSetWarningHandler(my_warning) == my_warning);
  EXPECT(TIFFSetErrorHandlerExt(my_error_ext) == my_error_ext);
  EXPECT(TIFFSetWarningHandlerExt(my_warning_ext) == my_warning_ext);
  EXPECT_EQ(calls, 0);
  pb__remove_tree(dir);
  return check_failures() != 0;
}
