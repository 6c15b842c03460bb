/* lib/io/le.h: loads and stores round-trip at every alignment, with the byte layout the formats
 * write (least significant byte first; big-endian for TIFF "MM" files). */
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "io/le.h"

int main(void) {
  unsigned char b[32];
  static const unsigned char want64[8] = {0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01};
  for (size_t at = 0; at < 8; at++) { /* unaligned places too */
    memset(b, 0, sizeof b);
    pb__st_le64(b + at, 0x0102030405060708ull);
    EXPECT(memcmp(b + at, want64, 8) == 0);
    EXPECT_EQ(pb__le64(b + at), 0x0102030405060708ull);
    EXPECT_EQ(pb__be64(b + at), 0x0807060504030201ull);
    EXPECT_EQ(pb__le32(b + at), 0x05060708u);
    EXPECT_EQ(pb__be32(b + at), 0x08070605u);
    EXPECT_EQ(pb__le16(b + at), 0x0708u);
    EXPECT_EQ(pb__be16(b + at), 0x0807u);
    EXPECT_EQ(pb__get32(b + at, 0), pb__le32(b + at));
    EXPECT_EQ(pb__get32(b + at, 1), pb__be32(b + at));
    EXPECT_EQ(pb__get64(b + at, 1), pb__be64(b + at));
    EXPECT_EQ(pb__get16(b + at, 1), pb__be16(b + at));
    pb__st_le32(b + at, 0xA1B2C3D4u);
    EXPECT(b[at] == 0xD4 && b[at + 3] == 0xA1);
    EXPECT_EQ(pb__le32(b + at), 0xA1B2C3D4u);
    pb__st_le16(b + at, 0xBEEF);
    EXPECT(b[at] == 0xEF && b[at + 1] == 0xBE);
    EXPECT_EQ(pb__le16(b + at), 0xBEEFu);
    pb__st_le_f32(b + at, -1.5f);
    EXPECT_EQ(pb__le32(b + at), 0xBFC00000u);
    EXPECT(pb__le_f32(b + at) == -1.5f);
    pb__st_le_f64(b + at, 3.25);
    EXPECT_EQ(pb__le64(b + at), 0x400A000000000000ull);
    EXPECT(pb__le_f64(b + at) == 3.25);
  }
  /* every 32-bit pattern class round-trips: a sweep of values */
  uint64_t x = 0x9E3779B97F4A7C15ull;
  for (int i = 0; i < 100000; i++) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    pb__st_le64(b + (i & 7), x);
    if (pb__le64(b + (i & 7)) != x) EXPECT_FAIL("le64 round trip of %llx", (unsigned long long)x);
    pb__st_le32(b + (i & 7), (uint32_t)x);
    if (pb__le32(b + (i & 7)) != (uint32_t)x) EXPECT_FAIL("le32 round trip");
    pb__st_le16(b + (i & 7), (uint16_t)x);
    if (pb__le16(b + (i & 7)) != (uint16_t)x) EXPECT_FAIL("le16 round trip");
  }
  if (check_failures() == 0) printf("le.h ok\n");
  return check_failures() != 0;
}
