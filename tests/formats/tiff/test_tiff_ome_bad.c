/* OME-XML held to the OME schema in the fields pipebench reads: DimensionOrder and Type from
 * their enumerations, SizeX/Y/Z/C/T positive 32-bit integers, physical sizes and wavelengths
 * positive numbers, TiffData attributes non-negative integers whose planes fit in the image,
 * no more Channel elements than SizeC, a Type the pages hold. Each refusal names the field;
 * through the backend, the file too. Documents the schema allows (every order, white space
 * around numbers) still parse. */
#include <stdio.h>
#include <string.h>
#include <tiffio.h>

#include "formats/tiff/tiff_backend.h"
#include "tiff_test.h"

static const char *head = "<OME><Image ID=\"Image:0\"><Pixels ";

/* Pixels attributes, then what goes inside Pixels. */
static int parse(const char *attrs, const char *inner, char *why, size_t ws, pb__ome_info *o) {
  char xml[2048];
  snprintf(xml, sizeof xml, "%s%s>%s</Pixels></Image></OME>", head, attrs, inner);
  why[0] = '\0';
  int rc = pb__ome_parse(xml, o, why, ws);
  pb__ome_info_destroy(o);
  return rc;
}

#define GOOD "DimensionOrder=\"XYZCT\" Type=\"uint16\" SizeX=\"16\" SizeY=\"8\" SizeZ=\"2\" SizeC=\"3\" SizeT=\"1\""

typedef struct bad_case {
  const char *attrs, *inner, *field;
} bad_case;

static const bad_case bad[] = {
    {"DimensionOrder=\"XYZZT\" Type=\"uint8\" SizeX=\"1\" SizeY=\"1\" SizeZ=\"1\" SizeC=\"1\" SizeT=\"1\"", "", "DimensionOrder"},
    {"DimensionOrder=\"xyzct\" Type=\"uint8\" SizeX=\"1\" SizeY=\"1\" SizeZ=\"1\" SizeC=\"1\" SizeT=\"1\"", "", "DimensionOrder"},
    {"DimensionOrder=\"XYZCTX\" Type=\"uint8\" SizeX=\"1\" SizeY=\"1\" SizeZ=\"1\" SizeC=\"1\" SizeT=\"1\"", "", "DimensionOrder"},
    {"DimensionOrder=\"XYZCT\" Type=\"uint12\" SizeX=\"1\" SizeY=\"1\" SizeZ=\"1\" SizeC=\"1\" SizeT=\"1\"", "", "Type"},
    {"DimensionOrder=\"XYZCT\" SizeX=\"1\" SizeY=\"1\" SizeZ=\"1\" SizeC=\"1\" SizeT=\"1\"", "", "Type"},
    {"DimensionOrder=\"XYZCT\" Type=\"\" SizeX=\"1\" SizeY=\"1\" SizeZ=\"1\" SizeC=\"1\" SizeT=\"1\"", "", "Type"},
    {"DimensionOrder=\"XYZCT\" Type=\"uint8\" SizeX=\"0\" SizeY=\"1\" SizeZ=\"1\" SizeC=\"1\" SizeT=\"1\"", "", "SizeX"},
    {"DimensionOrder=\"XYZCT\" Type=\"uint8\" SizeX=\"1\" SizeY=\"-4\" SizeZ=\"1\" SizeC=\"1\" SizeT=\"1\"", "", "SizeY"},
    {"DimensionOrder=\"XYZCT\" Type=\"uint8\" SizeX=\"1\" SizeY=\"1\" SizeZ=\"2.5\" SizeC=\"1\" SizeT=\"1\"", "", "SizeZ"},
    {"DimensionOrder=\"XYZCT\" Type=\"uint8\" SizeX=\"1\" SizeY=\"1\" SizeZ=\"1\" SizeC=\"2147483648\" SizeT=\"1\"", "", "SizeC"},
    {"DimensionOrder=\"XYZCT\" Type=\"uint8\" SizeX=\"1\" SizeY=\"1\" SizeZ=\"1\" SizeC=\"1\" SizeT=\"1e3\"", "", "SizeT"},
    {"DimensionOrder=\"XYZCT\" Type=\"uint8\" SizeX=\"1\" SizeY=\"1\" SizeZ=\"1\" SizeC=\"1\"", "", "SizeT"},
    {GOOD " PhysicalSizeX=\"-0.5\"", "", "PhysicalSizeX"},
    {GOOD " PhysicalSizeZ=\"0\"", "", "PhysicalSizeZ"},
    {GOOD " PhysicalSizeY=\"0.3um\"", "", "PhysicalSizeY"},
    {GOOD, "<Channel ID=\"Channel:0:0\" Color=\"4294967295\"/>", "Color"},
    {GOOD, "<Channel ID=\"Channel:0:0\" SamplesPerPixel=\"0\"/>", "SamplesPerPixel"},
    {GOOD, "<Channel ID=\"Channel:0:0\" EmissionWavelength=\"-520\"/>", "EmissionWavelength"},
    {GOOD, "<Channel ID=\"Channel:0:0\" ExcitationWavelength=\"nan\"/>", "ExcitationWavelength"},
    {GOOD, "<Channel/><Channel/><Channel/><Channel/>", "Channel"},
    {GOOD, "<TiffData IFD=\"-1\"/>", "IFD"},
    {GOOD, "<TiffData IFD=\"x\"/>", "IFD"},
    {GOOD, "<TiffData FirstZ=\"2\"/>", "FirstZ"},
    {GOOD, "<TiffData FirstC=\"3\"/>", "FirstC"},
    {GOOD, "<TiffData FirstT=\"1\"/>", "FirstT"},
    {GOOD, "<TiffData PlaneCount=\"7\"/>", "PlaneCount"},
    {GOOD, "<TiffData FirstC=\"2\" FirstZ=\"1\" PlaneCount=\"2\"/>", "PlaneCount"},
    {GOOD, "<TiffData PlaneCount=\"-2\"/>", "PlaneCount"},
};

static void units(void) {
  pb__ome_info o;
  char why[256];
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    int rc = parse(bad[i].attrs, bad[i].inner, why, sizeof why, &o);
    if (rc >= 0) {
      EXPECT_FAIL("case %zu (%s): accepted, wanted a refusal naming %s", i, bad[i].inner,
                  bad[i].field);
      continue;
    }
    EXPECT_EQ(rc, PB_EFORMAT);
    EXPECT_CONTAINS(why, bad[i].field);
  }
  /* what the schema allows */
  static const char *const orders[] = {"XYZCT", "XYZTC", "XYCTZ", "XYCZT", "XYTCZ", "XYTZC"};
  for (size_t i = 0; i < 6; i++) {
    char attrs[512];
    snprintf(attrs, sizeof attrs,
             "DimensionOrder=\"%s\" Type=\"float\" SizeX=\" 16 \" SizeY=\"8\" SizeZ=\"2\" "
             "SizeC=\"3\" SizeT=\"1\" PhysicalSizeX=\"0.65\" PhysicalSizeZ=\" 2.0\"",
             orders[i]);
    EXPECT_EQ(parse(attrs,
                    "<Channel ID=\"Channel:0:0\" Color=\"-16776961\" SamplesPerPixel=\"1\" "
                    "EmissionWavelength=\"520\"/><TiffData IFD=\"0\" PlaneCount=\"6\"/>",
                    why, sizeof why, &o),
              1);
    EXPECT_STREQ(why, "");
  }
  EXPECT_EQ(parse(GOOD, "<TiffData FirstC=\"2\" FirstZ=\"1\" PlaneCount=\"1\"/>", why, sizeof why, &o), 1);
  EXPECT_EQ(parse(GOOD, "<TiffData/>", why, sizeof why, &o), 1);
}

/* A one-page TIFF whose description is xml: the backend refuses it naming file and field. */
static void through_backend(const char *root) {
  char path[600];
  snprintf(path, sizeof path, "%s/bad_type.ome.tif", root);
  TIFF *tif = TIFFOpen(path, "w");
  CHECK(tif != NULL);
  TIFFSetField(tif, TIFFTAG_IMAGEWIDTH, 16);
  TIFFSetField(tif, TIFFTAG_IMAGELENGTH, 8);
  TIFFSetField(tif, TIFFTAG_BITSPERSAMPLE, 8);
  TIFFSetField(tif, TIFFTAG_SAMPLESPERPIXEL, 1);
  TIFFSetField(tif, TIFFTAG_PHOTOMETRIC, PHOTOMETRIC_MINISBLACK);
  TIFFSetField(tif, TIFFTAG_ROWSPERSTRIP, 8);
  TIFFSetField(tif, TIFFTAG_IMAGEDESCRIPTION,
               "<OME><Image ID=\"Image:0\"><Pixels DimensionOrder=\"XYZCT\" Type=\"byte\" "
               "SizeX=\"16\" SizeY=\"8\" SizeZ=\"1\" SizeC=\"1\" SizeT=\"1\"/></Image></OME>");
  unsigned char row[16] = {0};
  for (uint32_t y = 0; y < 8; y++) CHECK(TIFFWriteScanline(tif, row, y, 0) == 1);
  CHECK(TIFFWriteDirectory(tif));
  TIFFClose(tif);
  struct pb_error err = {{0}};
  pb_dataset *ds = NULL;
  int rc = pb_dataset_open(path, "tiff", &ds, &err);
  if (rc == PB_OK) {
    pb_image_meta m;
    rc = pb_dataset_meta(ds, 0, &m, &err);
    pb_dataset_free(ds);
  }
  EXPECT_EQ(rc, PB_EFORMAT);
  EXPECT_CONTAINS(err.message, "bad_type.ome.tif");
  EXPECT_CONTAINS(err.message, "Type 'byte'");
}

/* A Type the schema allows that is not what the pages hold: refused naming both. */
static void type_mismatch(const char *root) {
  char path[600];
  snprintf(path, sizeof path, "%s/type_mismatch.ome.tif", root);
  TIFF *tif = TIFFOpen(path, "w");
  CHECK(tif != NULL);
  TIFFSetField(tif, TIFFTAG_IMAGEWIDTH, 16);
  TIFFSetField(tif, TIFFTAG_IMAGELENGTH, 8);
  TIFFSetField(tif, TIFFTAG_BITSPERSAMPLE, 16);
  TIFFSetField(tif, TIFFTAG_SAMPLESPERPIXEL, 1);
  TIFFSetField(tif, TIFFTAG_PHOTOMETRIC, PHOTOMETRIC_MINISBLACK);
  TIFFSetField(tif, TIFFTAG_ROWSPERSTRIP, 8);
  TIFFSetField(tif, TIFFTAG_IMAGEDESCRIPTION,
               "<OME><Image ID=\"Image:0\"><Pixels DimensionOrder=\"XYZCT\" Type=\"float\" "
               "SizeX=\"16\" SizeY=\"8\" SizeZ=\"1\" SizeC=\"1\" SizeT=\"1\"/></Image></OME>");
  uint16_t row[16] = {0};
  for (uint32_t y = 0; y < 8; y++) CHECK(TIFFWriteScanline(tif, row, y, 0) == 1);
  CHECK(TIFFWriteDirectory(tif));
  TIFFClose(tif);
  struct pb_error err = {{0}};
  pb_dataset *ds = NULL;
  int rc = pb_dataset_open(path, "tiff", &ds, &err);
  if (rc == PB_OK) {
    pb_image_meta m;
    rc = pb_dataset_meta(ds, 0, &m, &err);
    pb_dataset_free(ds);
  }
  EXPECT_EQ(rc, PB_EFORMAT);
  EXPECT_CONTAINS(err.message, "type_mismatch.ome.tif");
  EXPECT_CONTAINS(err.message, "Type is 'float' but the pages hold uint16");
}

/* The corpus's reproducers: each refused with PB_EFORMAT naming the file and the field. */
static void corpus(void) {
  static const char *const cases[][2] = {
      {"bad_ome_type.tif", "Type 'byte'"},
      {"bad_ome_planecount.tif", "PlaneCount=2 from plane 1"},
      {"bad_ome_sizez_zero.tif", "SizeZ='0'"},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    char path[1024];
    snprintf(path, sizeof path, "%s/tests/formats/tiff/corpus/%s", PIPEBENCH_SOURCE_DIR, cases[i][0]);
    struct pb_error err = {{0}};
    pb_dataset *ds = NULL;
    int rc = pb_dataset_open(path, "tiff", &ds, &err);
    if (rc == PB_OK) {
      pb_image_meta m;
      rc = pb_dataset_meta(ds, 0, &m, &err);
      pb_dataset_free(ds);
    }
    EXPECT_EQ(rc, PB_EFORMAT);
    EXPECT_CONTAINS(err.message, cases[i][0]);
    EXPECT_CONTAINS(err.message, cases[i][1]);
  }
}

int main(void) {
  char root[256];
  tt_tempdir(root, sizeof root, "ome_bad");
  units();
  through_backend(root);
  type_mismatch(root);
  corpus();
  tt_rmtree(root);
  return check_failures() != 0;
}
