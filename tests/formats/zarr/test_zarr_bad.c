/* ome-zarr bad input: malformed metadata, corrupt or mis-sized chunks, broken shards, unrelated
 * folders. Each gives a clear error code and a message naming the file; none crashes. */
#include <sys/stat.h>

#include "formats/zarr/zarr_internal.h"
#include "zarr_test.h"

static char g_dir[256];
static int g_checks;

/* A one-image dataset: uint16 1x1x2x16x16, chunks 1x1x1x8x8. */
static void make_ds(const char *path, const char *compression, const char *options) {
  struct pb_error err = {""};
  pb_write_params wp = PB_WRITE_PARAMS_DEFAULTS;
  wp.compression = compression;
  wp.options = options;
  int64_t chunk[PB_NDIM] = {1, 1, 1, 8, 8};
  memcpy(wp.chunk, chunk, sizeof chunk);
  int64_t shape[PB_NDIM] = {1, 1, 2, 16, 16};
  pb_image_meta m;
  pb_image_meta_init(&m, "img.zarr", PB_UINT16, shape);
  uint16_t pix[512];
  for (int i = 0; i < 512; i++) pix[i] = (uint16_t)(i * 7);
  pb_writer *w;
  pb__remove_tree(path);
  CHECK_OK(pb_writer_new(path, "ome-zarr", &wp, &w, &err), &err);
  CHECK_OK(pb_writer_add(w, &m, pix, &err), &err);
  CHECK_OK(pb_writer_finish(w, &err), &err);
  pb_writer_free(w);
}

static void put(const char *ds, const char *rel, const char *text) {
  char p[1024];
  struct pb_error err = {""};
  snprintf(p, sizeof p, "%s/%s", ds, rel);
  CHECK_OK(pb__write_file(p, text, strlen(text), &err), &err);
}

static void put_bytes(const char *ds, const char *rel, const void *data, size_t n) {
  char p[1024];
  struct pb_error err = {""};
  snprintf(p, sizeof p, "%s/%s", ds, rel);
  CHECK_OK(pb__write_file(p, data, n, &err), &err);
}

/* Opens ds and reads image 0 (or, with crop set, the 8x8 crop at y = x = 4 of its first plane,
 * which needs part of each of four chunks); expects code and a message holding `needle`. */
static void expect_read(const char *what, const char *ds, int crop, int code, const char *needle) {
  struct pb_error err = {""};
  pb_dataset *d = NULL;
  int rc = pb_dataset_open(ds, "ome-zarr", &d, &err);
  if (rc == PB_OK) {
    pb_image_meta m;
    rc = pb_dataset_meta(d, 0, &m, &err);
    if (rc == PB_OK && crop) {
      pb_region r = {{0, 0, 0, 4, 4}, {1, 1, 1, 8, 8}};
      uint16_t buf[64];
      rc = pb_dataset_read_region(d, 0, &r, buf, sizeof buf, NULL, &err);
    } else if (rc == PB_OK) {
      size_t n = pb_image_bytes(&m);
      void *buf = malloc(n);
      rc = pb_dataset_read(d, 0, buf, n, NULL, &err);
      free(buf);
    }
    pb_dataset_free(d);
  }
  if (rc != code)
    FAIL("%s: got %s (%d), expected %s: %s", what, pb_strerror(rc), rc, pb_strerror(code),
            err.message);
  if (needle != NULL && strstr(err.message, needle) == NULL)
    FAIL("%s: message lacks '%s': %s", what, needle, err.message);
  printf("ok %-34s %s\n", what, err.message);
  g_checks++;
}

static void expect(const char *what, const char *ds, int code, const char *needle) {
  expect_read(what, ds, 0, code, needle);
}

/* An uncompressed image of 8 MiB or more is placed through a chunk buffer with streaming stores
 * rather than read straight into place: a mis-sized chunk is refused there too. */
static void large_none_case(void) {
  struct pb_error err = {""};
  char ds[512];
  snprintf(ds, sizeof ds, "%s/large", g_dir);
  pb_write_params wp = PB_WRITE_PARAMS_DEFAULTS;
  wp.compression = "none";
  int64_t chunk[PB_NDIM] = {1, 1, 1, 512, 512}, shape[PB_NDIM] = {1, 1, 1, 2048, 2048};
  memcpy(wp.chunk, chunk, sizeof chunk);
  pb_image_meta m;
  pb_image_meta_init(&m, "img.zarr", PB_UINT16, shape);
  size_t n = pb_image_bytes(&m);
  uint16_t *pix = malloc(n), *got = malloc(n);
  for (size_t i = 0; i < n / 2; i++) pix[i] = (uint16_t)(i * 2654435761u >> 7);
  pb_writer *w;
  pb__remove_tree(ds);
  CHECK_OK(pb_writer_new(ds, "ome-zarr", &wp, &w, &err), &err);
  CHECK_OK(pb_writer_add(w, &m, pix, &err), &err);
  CHECK_OK(pb_writer_finish(w, &err), &err);
  pb_writer_free(w);
  pb_dataset *d;
  CHECK_OK(pb_dataset_open(ds, "ome-zarr", &d, &err), &err);
  CHECK_OK(pb_dataset_read(d, 0, got, n, NULL, &err), &err);
  CHECK(memcmp(got, pix, n) == 0);
  pb_dataset_free(d);
  put_bytes(ds, "img.zarr/0/0/0/0/2/3", pix, 512 * 512 * 2 - 2);
  expect("large image, chunk short", ds, PB_EFORMAT, "expected 524288");
  put_bytes(ds, "img.zarr/0/0/0/0/2/3", pix, 512 * 512 * 2 + 2);
  expect("large image, chunk long", ds, PB_EFORMAT, "expected 524288");
  free(pix);
  free(got);
}

#define ZARRAY_FMT                                                                             \
  "{\"zarr_format\":2,\"shape\":%s,\"chunks\":[1,1,1,8,8],\"dtype\":\"%s\","  \
  "\"compressor\":%s,\"fill_value\":0,\"order\":\"%s\",\"filters\":%s,"                  \
  "\"dimension_separator\":\"/\"}"

static void v2_cases(void) {
  char ds[512], z[1024];
  snprintf(ds, sizeof ds, "%s/v2", g_dir);
  const char *za = "img.zarr/0/.zarray";
  const char *blosc = "{\"id\":\"blosc\",\"cname\":\"lz4\",\"clevel\":5,\"shuffle\":1}";
  const char *shape = "[1,1,2,16,16]";

  make_ds(ds, NULL, NULL);
  expect("valid dataset", ds, PB_OK, NULL);
  put(ds, za, "{\"zarr_format\":2,\"shape\":[1,1,2");
  expect("zarray invalid JSON", ds, PB_EFORMAT, ".zarray");
  put(ds, za, "[1,2,3]");
  expect("zarray not an object", ds, PB_EFORMAT, ".zarray");
  snprintf(z, sizeof z, ZARRAY_FMT, "\"big\"", "<u2", blosc, "C", "null");
  put(ds, za, z);
  expect("zarray shape wrong type", ds, PB_EFORMAT, ".zarray");
  snprintf(z, sizeof z, ZARRAY_FMT, "[1,1,-2,16,16]", "<u2", blosc, "C", "null");
  put(ds, za, z);
  expect("zarray negative shape", ds, PB_EFORMAT, "shape");
  snprintf(z, sizeof z, ZARRAY_FMT, "[1,1,2,16]", "<u2", blosc, "C", "null");
  put(ds, za, z);
  expect("zarray chunks/shape rank", ds, PB_EFORMAT, "chunks");
  put(ds, za, "{\"zarr_format\":2,\"shape\":[1,1,2,16,16],\"dtype\":\"<u2\",\"compressor\":null}");
  expect("zarray missing chunks", ds, PB_EFORMAT, "chunks");
  snprintf(z, sizeof z, ZARRAY_FMT, shape, "<c16", blosc, "C", "null");
  put(ds, za, z);
  expect("zarray unsupported dtype", ds, PB_EUNSUPPORTED, "<c16");
  snprintf(z, sizeof z, ZARRAY_FMT, shape, "banana", blosc, "C", "null");
  put(ds, za, z);
  expect("zarray unknown dtype", ds, PB_EFORMAT, "banana");
  snprintf(z, sizeof z, ZARRAY_FMT, shape, "<u2", blosc, "F", "null");
  put(ds, za, z);
  expect("zarray F order", ds, PB_EUNSUPPORTED, "order 'F'");
  snprintf(z, sizeof z, ZARRAY_FMT, shape, "<u2", blosc, "C", "[{\"id\":\"delta\",\"dtype\":\"<u2\"}]");
  put(ds, za, z);
  expect("zarray filter", ds, PB_EUNSUPPORTED, "delta");
  snprintf(z, sizeof z, ZARRAY_FMT, shape, "<u2", "{\"id\":\"lzma\"}", "C", "null");
  put(ds, za, z);
  expect("zarray unknown compressor", ds, PB_EUNSUPPORTED, "lzma");
  snprintf(z, sizeof z, ZARRAY_FMT, shape, "<u2", "{\"id\":\"blosc\",\"cname\":\"snappy\"}", "C",
           "null");
  put(ds, za, z);
  expect("zarray blosc snappy", ds, PB_EUNSUPPORTED, "snappy");
  snprintf(z, sizeof z,
           "{\"zarr_format\":2,\"shape\":[1,1,2,16,16],\"chunks\":[1,1,1,100000,100000],"
           "\"dtype\":\"<u2\",\"compressor\":null,\"fill_value\":0,\"order\":\"C\"}");
  put(ds, za, z);
  expect("zarray huge chunks", ds, PB_EUNSUPPORTED, "4 GiB");
  snprintf(z, sizeof z,
           "{\"zarr_format\":2,\"shape\":[1,1,2,1099511627776,1099511627776],"
           "\"chunks\":[1,1,1,8,8],\"dtype\":\"<u2\",\"compressor\":null,\"fill_value\":0}");
  put(ds, za, z);
  expect("zarray huge image", ds, PB_EUNSUPPORTED, "2^48");
  snprintf(z, sizeof z,
           "{\"zarr_format\":2,\"shape\":[1,1,2,16,16],\"chunks\":[1,1,1,8,8],"
           "\"dtype\":\"<u2\",\"compressor\":null,\"fill_value\":70000,\"order\":\"C\"}");
  put(ds, za, z);
  expect("zarray fill out of range", ds, PB_EFORMAT, "fill_value");
  put(ds, "img.zarr/0/.zarray", "");
  expect("zarray empty file", ds, PB_EFORMAT, ".zarray");

  /* attributes */
  make_ds(ds, NULL, NULL);
  put(ds, "img.zarr/.zattrs", "{\"something\": 1}");
  expect("zattrs without multiscales", ds, PB_EFORMAT, ".zattrs");
  put(ds, "img.zarr/.zattrs", "{\"multiscales\":[{\"axes\":[\"t\",\"c\",\"z\",\"y\",\"x\"],"
                              "\"datasets\":[{\"path\":\"../../etc\"}]}]}");
  expect("zattrs escaping path", ds, PB_EFORMAT, "path");
  put(ds, "img.zarr/.zattrs", "{\"multiscales\":[{\"axes\":[\"t\",\"c\",\"z\",\"x\",\"y\"],"
                              "\"datasets\":[{\"path\":\"0\"}]}]}");
  expect("zattrs axes out of order", ds, PB_EUNSUPPORTED, "order");
  put(ds, "img.zarr/.zattrs", "{\"multiscales\":[{\"axes\":[\"y\",\"x\"],"
                              "\"datasets\":[{\"path\":\"0\"}]}]}");
  expect("zattrs axes count", ds, PB_EFORMAT, "axes");
  put(ds, "img.zarr/.zattrs", "{\"multiscales\":[{\"axes\":[\"q\",\"c\",\"z\",\"y\",\"x\"],"
                              "\"datasets\":[{\"path\":\"0\"}]}]}");
  expect("zattrs unknown axis", ds, PB_EUNSUPPORTED, "axis");
  put(ds, "img.zarr/.zattrs", "{\"multiscales\":[{\"datasets\":[{\"path\":\"1\"}]}]}");
  expect("zattrs missing array", ds, PB_EFORMAT, "missing");

  /* chunks: default blosc, then none */
  make_ds(ds, NULL, NULL);
  put(ds, "img.zarr/0/0/0/1/1/0", "this is not a blosc buffer at all, no");
  expect("chunk not blosc", ds, PB_ECODEC, "0/0/1/1/0");
  put_bytes(ds, "img.zarr/0/0/0/1/1/0", "", 0);
  expect("chunk empty", ds, PB_ECODEC, "0/0/1/1/0");
  make_ds(ds, "zstd", NULL);
  put_bytes(ds, "img.zarr/0/0/0/0/0/1", "\x28\xb5\x2f\xfd\x20\x80\x01\x02\x03", 9);
  expect("chunk zstd truncated", ds, PB_ECODEC, "zstd");
  make_ds(ds, "gzip", NULL);
  put_bytes(ds, "img.zarr/0/0/0/0/0/1", "\x1f\x8b\x08\x00garbage", 11);
  expect("chunk gzip corrupt", ds, PB_ECODEC, "gzip");
  make_ds(ds, "none", NULL);
  put_bytes(ds, "img.zarr/0/0/0/0/1/1", "short", 5);
  expect("chunk wrong size", ds, PB_EFORMAT, "expected 128");
  expect_read("chunk wrong size, crop", ds, 1, PB_EFORMAT, "expected 128");
  {
    char longer[130] = {0};
    put_bytes(ds, "img.zarr/0/0/0/0/1/1", longer, sizeof longer);
    expect("chunk too long", ds, PB_EFORMAT, "128");
    expect_read("chunk too long, crop", ds, 1, PB_EFORMAT, "expected 128");
  }
  make_ds(ds, "none", NULL);
  char p[1024];
  snprintf(p, sizeof p, "%s/img.zarr/0/0/0/0/1/1", ds);
  remove(p);
  CHECK_EQ(mkdir(p, 0777), 0);
  expect("chunk is a folder", ds, PB_EIO, "0/0/0/1/1");
  /* a big blosc chunk in place of a small one */
  make_ds(ds, NULL, NULL);
  {
    struct pb_error err = {""};
    char src[1024], dst[1024];
    snprintf(dst, sizeof dst, "%s/big", g_dir);
    int64_t big_shape[PB_NDIM] = {1, 1, 1, 64, 64};
    pb_image_meta m;
    pb_image_meta_init(&m, "img.zarr", PB_UINT16, big_shape);
    uint16_t pix[4096] = {0};
    pb_writer *w;
    pb__remove_tree(dst);
    CHECK_OK(pb_writer_new(dst, "ome-zarr", NULL, &w, &err), &err);
    CHECK_OK(pb_writer_add(w, &m, pix, &err), &err);
    CHECK_OK(pb_writer_finish(w, &err), &err);
    pb_writer_free(w);
    snprintf(src, sizeof src, "%s/img.zarr/0/0/0/0/0/0", dst);
    void *data;
    size_t n;
    CHECK_OK(pb__read_file(src, &data, &n, &err), &err);
    put_bytes(ds, "img.zarr/0/0/0/0/0/0", data, n);
    pb_free(data, n);
    expect("chunk decodes too large", ds, PB_EFORMAT, "expected");
  }
}

static void v3_cases(void) {
  char ds[512];
  snprintf(ds, sizeof ds, "%s/v3", g_dir);
  const char *za = "img.zarr/0/zarr.json";
  make_ds(ds, "zstd", "zarr=3");
  expect("v3 valid dataset", ds, PB_OK, NULL);
  put(ds, za, "{\"zarr_format\":3,");
  expect("v3 invalid JSON", ds, PB_EFORMAT, "zarr.json");
  put(ds, za, "{\"zarr_format\":3,\"node_type\":\"array\",\"shape\":[1,1,2,16,16]}");
  expect("v3 missing data_type", ds, PB_EFORMAT, "data_type");
  put(ds, za, "{\"zarr_format\":3,\"node_type\":\"array\",\"shape\":[1,1,2,16,16],"
              "\"data_type\":\"uint16\"}");
  expect("v3 missing chunk_grid", ds, PB_EFORMAT, "chunk_grid");
#define head                                                                                   \
  "{\"zarr_format\":3,\"node_type\":\"array\",\"shape\":[1,1,2,16,16],"                          \
  "\"data_type\":\"%s\",\"chunk_grid\":{\"name\":\"regular\",\"configuration\":"                 \
  "{\"chunk_shape\":[1,1,1,8,8]}},\"fill_value\":%s,\"codecs\":%s}"
  char z[2048];
  snprintf(z, sizeof z, head, "uint16", "0", "[{\"name\":\"zstd\"}]");
  put(ds, za, z);
  expect("v3 codec before bytes", ds, PB_EFORMAT, "before");
  snprintf(z, sizeof z, head, "uint16", "0", "[5, {\"name\":\"bytes\"}]");
  put(ds, za, z);
  expect("v3 codec wrong type", ds, PB_EFORMAT, "name");
  snprintf(z, sizeof z, head, "uint16", "0", "[{\"name\":\"bytes\"},{\"name\":\"lzma\"}]");
  put(ds, za, z);
  expect("v3 unknown codec", ds, PB_EUNSUPPORTED, "lzma");
  snprintf(z, sizeof z, head, "uint16", "0", "{\"name\":\"bytes\"}");
  put(ds, za, z);
  expect("v3 codecs not a list", ds, PB_EFORMAT, "codecs");
  snprintf(z, sizeof z, head, "uint16", "0",
           "[{\"name\":\"transpose\",\"configuration\":{\"order\":[4,3,2,1,0]}},{\"name\":\"bytes\"}]");
  put(ds, za, z);
  expect("v3 transpose", ds, PB_EUNSUPPORTED, "transpose");
  snprintf(z, sizeof z, head, "complex64", "0", "[{\"name\":\"bytes\"}]");
  put(ds, za, z);
  expect("v3 unsupported dtype", ds, PB_EUNSUPPORTED, "complex64");
  snprintf(z, sizeof z, head, "uint17", "0", "[{\"name\":\"bytes\"}]");
  put(ds, za, z);
  expect("v3 unknown dtype", ds, PB_EFORMAT, "uint17");
  snprintf(z, sizeof z, head, "uint16", "\"NaN\"", "[{\"name\":\"bytes\"}]");
  put(ds, za, z);
  expect("v3 NaN fill for uint16", ds, PB_EFORMAT, "fill_value");
  snprintf(z, sizeof z, head, "uint16", "0", "[{\"name\":\"bytes\"},{\"name\":\"zstd\"}]");
  put(ds, za, z);
  expect("v3 valid hand metadata", ds, PB_OK, NULL);
  put(ds, "img.zarr/zarr.json", "{\"zarr_format\":3,\"node_type\":\"group\",\"attributes\":{}}");
  expect("v3 group without ome", ds, PB_EFORMAT, "multiscales");

  /* shards: 1x1x2x2x2 chunks of 1x1x1x8x8 → one shard file */
  make_ds(ds, "zstd", "zarr=3,shard=1x1x2x2x2");
  expect("v3 sharded valid", ds, PB_OK, NULL);
  char p[1024];
  snprintf(p, sizeof p, "%s/img.zarr/0/c/0/0/0/0/0", ds);
  struct pb_error err = {""};
  void *data;
  size_t n;
  CHECK_OK(pb__read_file(p, &data, &n, &err), &err);
  unsigned char *b = data;
  b[n - 1] ^= 0x55; /* index checksum */
  CHECK_OK(pb__write_file(p, b, n, &err), &err);
  expect("shard index crc", ds, PB_EFORMAT, "checksum");
  b[n - 1] ^= 0x55;
  b[n - 4 - 16 * 8] = 0xFF; /* first entry's offset low byte → points past the end */
  b[n - 4 - 16 * 8 + 5] = 0x7F;
  uint32_t crc = pb__crc32c(0, b + n - 4 - 128, 128);
  memcpy(b + n - 4, &crc, 4);
  CHECK_OK(pb__write_file(p, b, n, &err), &err);
  expect("shard entry out of bounds", ds, PB_EFORMAT, "outside");
  CHECK_OK(pb__write_file(p, b, 20, &err), &err);
  expect("shard truncated", ds, PB_EFORMAT, "index");
  pb_free(data, n);
}

static void folder_cases(void) {
  char ds[512], p[1024];
  struct pb_error err = {""};
  snprintf(ds, sizeof ds, "%s/unrelated", g_dir);
  CHECK_OK(pb__mkdirs(ds, &err), &err);
  put(ds, "notes.txt", "hello");
  snprintf(p, sizeof p, "%s/sub", ds);
  CHECK_OK(pb__mkdirs(p, &err), &err);
  put(ds, "sub/data.bin", "xyz");
  expect("unrelated folder", ds, PB_EFORMAT, "no OME-Zarr images");
  snprintf(p, sizeof p, "%s/notes.txt", ds);
  expect("a plain file", p, PB_EFORMAT, "not a folder");
  pb_dataset *d;
  CHECK(pb_dataset_open(ds, NULL, &d, &err) != PB_OK);
}

int main(void) {
  zt_tmpdir(g_dir, sizeof g_dir, "bad");
  v2_cases();
  large_none_case();
  v3_cases();
  folder_cases();
  pb__remove_tree(g_dir);
  printf("ome-zarr bad input: %d checks ok\n", g_checks);
  return 0;
}
