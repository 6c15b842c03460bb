/* Little-endian (and, for TIFF, big-endian) loads and stores on unaligned bytes, once for every
 * format. Internal.
 *
 * Byte by byte, so they are right on any machine and any alignment; compilers turn them into
 * one load or store (plus a byte swap for the big-endian ones). */
#ifndef PB_IO_LE_H
#define PB_IO_LE_H

#include <stdint.h>
#include <string.h>

static inline uint16_t pb__le16(const void *p) {
  const unsigned char *b = p;
  return (uint16_t)(b[0] | b[1] << 8);
}
static inline uint32_t pb__le32(const void *p) {
  const unsigned char *b = p;
  return (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
}
static inline uint64_t pb__le64(const void *p) {
  const unsigned char *b = p;
  return (uint64_t)pb__le32(b) | (uint64_t)pb__le32(b + 4) << 32;
}
static inline uint16_t pb__be16(const void *p) {
  const unsigned char *b = p;
  return (uint16_t)(b[0] << 8 | b[1]);
}
static inline uint32_t pb__be32(const void *p) {
  const unsigned char *b = p;
  return (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | (uint32_t)b[3];
}
static inline uint64_t pb__be64(const void *p) {
  const unsigned char *b = p;
  return (uint64_t)pb__be32(b) << 32 | (uint64_t)pb__be32(b + 4);
}
/* A field of a file whose byte order is known only when it is read (TIFF's "II" or "MM"). */
static inline uint16_t pb__get16(const void *p, int big) { return big ? pb__be16(p) : pb__le16(p); }
static inline uint32_t pb__get32(const void *p, int big) { return big ? pb__be32(p) : pb__le32(p); }
static inline uint64_t pb__get64(const void *p, int big) { return big ? pb__be64(p) : pb__le64(p); }

static inline void pb__st_le16(void *p, uint16_t v) {
  unsigned char *b = p;
  b[0] = (unsigned char)v;
  b[1] = (unsigned char)(v >> 8);
}
static inline void pb__st_le32(void *p, uint32_t v) {
  unsigned char *b = p;
  for (int i = 0; i < 4; i++) b[i] = (unsigned char)(v >> (8 * i));
}
static inline void pb__st_le64(void *p, uint64_t v) {
  unsigned char *b = p;
  for (int i = 0; i < 8; i++) b[i] = (unsigned char)(v >> (8 * i));
}

/* IEEE floats stored little-endian: their bit patterns through the integer helpers. */
static inline float pb__le_f32(const void *p) {
  uint32_t u = pb__le32(p);
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}
static inline double pb__le_f64(const void *p) {
  uint64_t u = pb__le64(p);
  double d;
  memcpy(&d, &u, sizeof d);
  return d;
}
static inline void pb__st_le_f32(void *p, float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  pb__st_le32(p, u);
}
static inline void pb__st_le_f64(void *p, double d) {
  uint64_t u;
  memcpy(&u, &d, sizeof u);
  pb__st_le64(p, u);
}

#endif
