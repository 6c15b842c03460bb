/* Image descriptions of TIFF files: the OME-XML subset pipebench reads and writes, tifffile's
 * "shaped" JSON and ImageJ's key=value text. The XML reader is a small tag scanner: it needs
 * element names and attributes only, and must survive anything. */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "common/strbuf.h"
#include "formats/tiff/tiff_backend.h"

#define MAX_TIFFDATA ((size_t)1 << 22)

/* ---- XML scanning ------------------------------------------------------------------------- */

typedef struct xml_attr {
  const char *name, *value; /* not terminated; value still has entities */
  size_t name_len, value_len;
} xml_attr;

#define MAX_ATTRS 64

typedef struct xml_tag {
  const char *name; /* local name (namespace prefix dropped) */
  size_t name_len;
  int is_end, self_closing;
  int n_attrs;
  xml_attr attrs[MAX_ATTRS];
} xml_tag;

static int name_char(char c) {
  return isalnum((unsigned char)c) || c == '_' || c == '-' || c == '.' || c == ':' ||
         (unsigned char)c >= 0x80;
}

static const char *skip_ws(const char *p) {
  while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r') p++;
  return p;
}

static void drop_prefix(const char **name, size_t *len) {
  for (size_t i = *len; i > 0; i--) {
    if ((*name)[i - 1] == ':') {
      *name += i;
      *len -= i;
      return;
    }
  }
}

/* Finds the next element tag at or after *pp. 1 found, 0 end of text, -1 malformed. */
static int xml_next(const char **pp, xml_tag *t) {
  const char *p = *pp;
  for (;;) {
    p = strchr(p, '<');
    if (p == NULL) return 0;
    if (strncmp(p, "<!--", 4) == 0) {
      const char *e = strstr(p + 4, "-->");
      if (e == NULL) return -1;
      p = e + 3;
    } else if (strncmp(p, "<![CDATA[", 9) == 0) {
      const char *e = strstr(p + 9, "]]>");
      if (e == NULL) return -1;
      p = e + 3;
    } else if (p[1] == '?') {
      const char *e = strstr(p + 2, "?>");
      if (e == NULL) return -1;
      p = e + 2;
    } else if (p[1] == '!') {
      const char *e = strchr(p + 2, '>');
      if (e == NULL) return -1;
      p = e + 1;
    } else {
      break;
    }
  }
  memset(t, 0, offsetof(xml_tag, attrs));
  p++;
  if (*p == '/') {
    t->is_end = 1;
    p++;
  }
  t->name = p;
  while (name_char(*p)) p++;
  t->name_len = (size_t)(p - t->name);
  if (t->name_len == 0) return -1;
  drop_prefix(&t->name, &t->name_len);
  for (;;) {
    p = skip_ws(p);
    if (*p == '\0') return -1;
    if (*p == '>') {
      p++;
      break;
    }
    if (p[0] == '/' && p[1] == '>') {
      t->self_closing = 1;
      p += 2;
      break;
    }
    const char *an = p;
    while (name_char(*p)) p++;
    size_t alen = (size_t)(p - an);
    if (alen == 0) return -1;
    p = skip_ws(p);
    if (*p != '=') return -1;
    p = skip_ws(p + 1);
    char q = *p;
    if (q != '"' && q != '\'') return -1;
    const char *v = ++p;
    p = strchr(p, q);
    if (p == NULL) return -1;
    if (t->n_attrs < MAX_ATTRS) {
      xml_attr *a = &t->attrs[t->n_attrs++];
      a->name = an;
      a->name_len = alen;
      drop_prefix(&a->name, &a->name_len);
      a->value = v;
      a->value_len = (size_t)(p - v);
    }
    p++;
  }
  *pp = p;
  return 1;
}

static int tag_is(const xml_tag *t, const char *name) {
  return t->name_len == strlen(name) && memcmp(t->name, name, t->name_len) == 0;
}

static void put_utf8(char *out, size_t size, size_t *n, unsigned long cp) {
  unsigned char b[4];
  size_t k;
  if (cp < 0x80) { b[0] = (unsigned char)cp; k = 1; }
  else if (cp < 0x800) { b[0] = (unsigned char)(0xC0 | cp >> 6); b[1] = (unsigned char)(0x80 | (cp & 0x3F)); k = 2; }
  else if (cp < 0x10000) { b[0] = (unsigned char)(0xE0 | cp >> 12); b[1] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F)); b[2] = (unsigned char)(0x80 | (cp & 0x3F)); k = 3; }
  else if (cp < 0x110000) { b[0] = (unsigned char)(0xF0 | cp >> 18); b[1] = (unsigned char)(0x80 | ((cp >> 12) & 0x3F)); b[2] = (unsigned char)(0x80 | ((cp >> 6) & 0x3F)); b[3] = (unsigned char)(0x80 | (cp & 0x3F)); k = 4; }
  else return;
  if (*n + k >= size) return;
  memcpy(out + *n, b, k);
  *n += k;
}

/* Copies attribute name's value with entities decoded; 1 when present. Truncates to size. */
static int attr_get(const xml_tag *t, const char *name, char *out, size_t size) {
  for (int i = 0; i < t->n_attrs; i++) {
    const xml_attr *a = &t->attrs[i];
    if (a->name_len != strlen(name) || memcmp(a->name, name, a->name_len) != 0) continue;
    size_t n = 0;
    for (size_t j = 0; j < a->value_len && n + 1 < size;) {
      const char *s = a->value + j;
      if (*s == '&') {
        const char *semi = memchr(s, ';', a->value_len - j);
        if (semi != NULL && semi - s <= 10) {
          size_t el = (size_t)(semi - s) + 1;
          unsigned long cp = 0;
          int ok = 1;
          if (strncmp(s, "&amp;", 5) == 0) cp = '&';
          else if (strncmp(s, "&lt;", 4) == 0) cp = '<';
          else if (strncmp(s, "&gt;", 4) == 0) cp = '>';
          else if (strncmp(s, "&quot;", 6) == 0) cp = '"';
          else if (strncmp(s, "&apos;", 6) == 0) cp = '\'';
          else if (s[1] == '#') {
            char num[12] = {0};
            memcpy(num, s + 2, el - 3 < sizeof num - 1 ? el - 3 : sizeof num - 1);
            cp = num[0] == 'x' || num[0] == 'X' ? strtoul(num + 1, NULL, 16) : strtoul(num, NULL, 10);
          } else ok = 0;
          if (ok) {
            put_utf8(out, size, &n, cp);
            j += el;
            continue;
          }
        }
      }
      out[n++] = *s;
      j++;
    }
    out[n] = '\0';
    return 1;
  }
  if (size > 0) out[0] = '\0';
  return 0;
}

/* Integer attribute: 1 present and valid, 0 absent, -1 present but not an integer. */
static int attr_int(const xml_tag *t, const char *name, int64_t *out) {
  char buf[40];
  if (!attr_get(t, name, buf, sizeof buf)) return 0;
  char *end;
  errno = 0;
  long long v = strtoll(buf, &end, 10);
  /* the schema's integers are xsd:int: 32-bit, surrounding white space allowed */
  if (end == buf || errno != 0 || v < INT32_MIN || v > INT32_MAX) return -1;
  while (isspace((unsigned char)*end)) end++;
  if (*end != '\0') return -1;
  *out = v;
  return 1;
}

static int attr_double(const xml_tag *t, const char *name, double *out) {
  char buf[64];
  if (!attr_get(t, name, buf, sizeof buf)) return 0;
  char *end;
  double v = strtod(buf, &end);
  if (end == buf || !isfinite(v)) return -1;
  while (isspace((unsigned char)*end)) end++;
  if (*end != '\0') return -1;
  *out = v;
  return 1;
}

/* Wavelength in µm from a value and an OME length unit (default nm). */
static float wavelength_um(double v, const char *unit) {
  if (unit[0] == '\0' || strcmp(unit, "nm") == 0) return (float)(v / 1000.0);
  if (strcmp(unit, "µm") == 0 || strcmp(unit, "um") == 0) return (float)v;
  if (strcmp(unit, "Å") == 0) return (float)(v / 10000.0);
  if (strcmp(unit, "mm") == 0) return (float)(v * 1000.0);
  return (float)(v / 1000.0);
}

void pb__ome_info_destroy(pb__ome_info *info) {
  free(info->tiffdata);
  info->tiffdata = NULL;
  info->n_tiffdata = 0;
}

static int fail(char *why, size_t size, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int fail(char *why, size_t size, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(why, size, fmt, ap);
  va_end(ap);
  return PB_EFORMAT;
}

/* The values the OME schema allows (ome.xsd 2016-06): DimensionOrder and Pixels Type. */
static const char *const dimension_orders[] = {"XYZCT", "XYZTC", "XYCTZ", "XYCZT", "XYTCZ", "XYTZC"};
static const char *const pixel_types[] = {"int8",  "int16", "int32",  "uint8",   "uint16",
                                          "uint32", "float", "double", "complex", "double-complex",
                                          "bit"};

static int one_of(const char *v, const char *const *list, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (strcmp(v, list[i]) == 0) return 1;
  return 0;
}

/* A PositiveFloat attribute (physical sizes, wavelengths): absent is fine (*out untouched). */
static int positive_float(const xml_tag *t, const char *elem, const char *name, double *out,
                          char *why, size_t ws) {
  double v = 0;
  int r = attr_double(t, name, &v);
  if (r < 0 || (r == 1 && !(v > 0))) {
    char raw[40];
    attr_get(t, name, raw, sizeof raw);
    return fail(why, ws, "OME-XML %s %s='%s' is not a positive number", elem, name, raw);
  }
  if (r == 1) *out = v;
  return PB_OK;
}

static int parse_pixels(const xml_tag *t, pb__ome_info *o, char *why, size_t ws) {
  static const char *const size_names[PB_NDIM] = {"SizeT", "SizeC", "SizeZ", "SizeY", "SizeX"};
  for (int k = 0; k < PB_NDIM; k++) {
    int64_t v = 0;
    int r = attr_int(t, size_names[k], &v);
    if (r == 0) return fail(why, ws, "OME-XML Pixels lacks %s", size_names[k]);
    if (r < 0 || v < 1) {
      char raw[40];
      attr_get(t, size_names[k], raw, sizeof raw);
      return fail(why, ws, "OME-XML Pixels %s='%s' is not a positive integer", size_names[k], raw);
    }
    o->size[k] = v;
  }
  if (!attr_get(t, "DimensionOrder", o->order, sizeof o->order))
    return fail(why, ws, "OME-XML Pixels lacks DimensionOrder");
  if (!one_of(o->order, dimension_orders, sizeof dimension_orders / sizeof dimension_orders[0]))
    return fail(why, ws,
                "OME-XML Pixels has an invalid DimensionOrder '%s' (XYZCT, XYZTC, XYCTZ, XYCZT, "
                "XYTCZ or XYTZC)",
                o->order);
  if (!attr_get(t, "Type", o->type, sizeof o->type))
    return fail(why, ws, "OME-XML Pixels lacks Type");
  if (!one_of(o->type, pixel_types, sizeof pixel_types / sizeof pixel_types[0]))
    return fail(why, ws, "OME-XML Pixels has an invalid Type '%s'", o->type);
  static const char *const ps[3] = {"PhysicalSizeX", "PhysicalSizeY", "PhysicalSizeZ"};
  static const char *const pu[3] = {"PhysicalSizeXUnit", "PhysicalSizeYUnit", "PhysicalSizeZUnit"};
  for (int k = 0; k < 3; k++) {
    double v = 0;
    PB_RETURN_NOT_OK(positive_float(t, "Pixels", ps[k], &v, why, ws));
    if (v > 0) {
      o->physical_size[k] = v;
      if (!attr_get(t, pu[k], o->physical_unit[k], sizeof o->physical_unit[k]))
        snprintf(o->physical_unit[k], sizeof o->physical_unit[k], "µm");
    }
  }
  return PB_OK;
}

static int parse_channel(const xml_tag *t, pb__ome_info *o, char *why, size_t ws) {
  int64_t v;
  double em = 0, ex = 0;
  int r = attr_int(t, "Color", &v); /* xsd:int, RGBA packed into a signed 32-bit value */
  if (r < 0) return fail(why, ws, "OME-XML Channel %d has an invalid Color", o->n_channels);
  int64_t spp = 0;
  int rs = attr_int(t, "SamplesPerPixel", &spp);
  if (rs < 0 || (rs == 1 && spp < 1))
    return fail(why, ws, "OME-XML Channel %d SamplesPerPixel is not a positive integer",
                o->n_channels);
  PB_RETURN_NOT_OK(positive_float(t, "Channel", "EmissionWavelength", &em, why, ws));
  PB_RETURN_NOT_OK(positive_float(t, "Channel", "ExcitationWavelength", &ex, why, ws));
  if (o->n_channels >= PB_MAX_CHANNELS) return PB_OK;
  pb_channel *c = &o->channels[o->n_channels];
  memset(c, 0, sizeof *c);
  attr_get(t, "ID", c->id, sizeof c->id);
  attr_get(t, "Name", c->name, sizeof c->name);
  attr_get(t, "IlluminationType", c->illumination, sizeof c->illumination);
  if (r == 1) c->color_rgba = (uint32_t)v;
  char unit[16];
  if (em > 0) {
    attr_get(t, "EmissionWavelengthUnit", unit, sizeof unit);
    c->emission_um = wavelength_um(em, unit);
  }
  if (ex > 0) {
    attr_get(t, "ExcitationWavelengthUnit", unit, sizeof unit);
    c->excitation_um = wavelength_um(ex, unit);
  }
  if (o->n_channels == 0 && rs == 1 && spp <= 64) o->channel_spp = (int)spp;
  o->n_channels++;
  return PB_OK;
}

static int parse_tiffdata(const xml_tag *t, pb__ome_info *o, char *why, size_t ws) {
  if (o->n_tiffdata >= MAX_TIFFDATA) return fail(why, ws, "OME-XML has too many TiffData elements");
  if ((o->n_tiffdata & (o->n_tiffdata - 1)) == 0) { /* grow at powers of two */
    size_t cap = o->n_tiffdata ? o->n_tiffdata * 2 : 4;
    pb__ome_tiffdata *nv = realloc(o->tiffdata, cap * sizeof *nv);
    if (nv == NULL) return fail(why, ws, "out of memory");
    o->tiffdata = nv;
  }
  pb__ome_tiffdata *d = &o->tiffdata[o->n_tiffdata++];
  memset(d, 0, sizeof *d);
  d->plane_count = -1;
  static const char *const firsts[3] = {"FirstT", "FirstC", "FirstZ"};
  size_t i = o->n_tiffdata - 1;
  int r = attr_int(t, "IFD", &d->ifd);
  if (r < 0 || d->ifd < 0)
    return fail(why, ws, "OME-XML TiffData %zu has an invalid IFD (a non-negative integer)", i);
  d->has_ifd = r == 1;
  for (int k = 0; k < 3; k++) {
    r = attr_int(t, firsts[k], &d->first[k]);
    if (r < 0 || d->first[k] < 0)
      return fail(why, ws, "OME-XML TiffData %zu has an invalid %s (a non-negative integer)", i,
                  firsts[k]);
  }
  r = attr_int(t, "PlaneCount", &d->plane_count);
  if (r < 0 || (r == 1 && d->plane_count < 0))
    return fail(why, ws, "OME-XML TiffData %zu has an invalid PlaneCount (a non-negative integer)",
                i);
  return PB_OK;
}

/* TiffData against the sizes: each starts inside the image and its planes fit in it (SizeC
 * counts samples, so Z*C*T bounds the planes whatever the samples per pixel); more Channel
 * elements than SizeC cannot be. The reader then holds IFDs against the file's pages. */
static int check_planes(const pb__ome_info *o, char *why, size_t ws) {
  if (o->n_channels > o->size[PB_C])
    return fail(why, ws, "OME-XML has %d Channel elements but SizeC=%lld", o->n_channels,
                (long long)o->size[PB_C]);
  /* sizes and firsts are at most INT32_MAX each; saturate rather than overflow */
  int64_t planes;
  if (__builtin_mul_overflow(o->size[PB_Z], o->size[PB_C], &planes) ||
      __builtin_mul_overflow(planes, o->size[PB_T], &planes))
    planes = INT64_MAX;
  static const char *const firsts[3] = {"FirstT", "FirstC", "FirstZ"};
  for (size_t i = 0; i < o->n_tiffdata; i++) {
    const pb__ome_tiffdata *d = &o->tiffdata[i];
    for (int k = 0; k < 3; k++)
      if (d->first[k] >= o->size[k])
        return fail(why, ws, "OME-XML TiffData %zu %s=%lld lies outside Size%c=%lld", i,
                    firsts[k], (long long)d->first[k], "TCZ"[k], (long long)o->size[k]);
    /* the first plane's number in DimensionOrder (fastest of Z, C, T first) */
    int64_t start = 0;
    for (int j = 4; j >= 2; j--) {
      int k = o->order[j] == 'T' ? 0 : o->order[j] == 'C' ? 1 : 2;
      if (__builtin_mul_overflow(start, o->size[k], &start) ||
          __builtin_add_overflow(start, d->first[k], &start))
        start = INT64_MAX;
    }
    if (d->plane_count > 0 && (start > planes || d->plane_count > planes - start))
      return fail(why, ws,
                  "OME-XML TiffData %zu: PlaneCount=%lld from plane %lld runs past the image's "
                  "%lld planes (SizeZ x SizeC x SizeT)",
                  i, (long long)d->plane_count, (long long)start, (long long)planes);
  }
  return PB_OK;
}

int pb__ome_parse(const char *xml, pb__ome_info *o, char *why, size_t ws) {
  memset(o, 0, sizeof *o);
  if (xml == NULL) return 0;
  const char *p = xml;
  xml_tag t;
  int seen_ome = 0, in_image = 0, in_pixels = 0, in_tiffdata = 0, have_pixels = 0, done = 0;
  int rc;
  while (!done && (rc = xml_next(&p, &t)) == 1) {
    if (!seen_ome) {
      if (t.is_end || !tag_is(&t, "OME")) return 0; /* the root must be OME */
      seen_ome = 1;
      continue;
    }
    if (t.is_end) {
      if (tag_is(&t, "Image") && in_image) { in_image = 0; done = 1; }
      else if (tag_is(&t, "Pixels")) in_pixels = 0;
      else if (tag_is(&t, "TiffData")) in_tiffdata = 0;
      continue;
    }
    if (tag_is(&t, "Image")) {
      o->n_images++;
      if (o->n_images == 1) {
        in_image = !t.self_closing;
        attr_get(&t, "ID", o->image_id, sizeof o->image_id);
        attr_get(&t, "Name", o->image_name, sizeof o->image_name);
      }
    } else if (tag_is(&t, "BinaryOnly")) {
      o->binary_only = 1;
    } else if (in_image && tag_is(&t, "Pixels") && !have_pixels) {
      rc = parse_pixels(&t, o, why, ws);
      if (rc != PB_OK) goto bad;
      have_pixels = 1;
      in_pixels = !t.self_closing;
    } else if (in_pixels && tag_is(&t, "Channel")) {
      rc = parse_channel(&t, o, why, ws);
      if (rc != PB_OK) goto bad;
    } else if (in_pixels && tag_is(&t, "TiffData")) {
      rc = parse_tiffdata(&t, o, why, ws);
      if (rc != PB_OK) goto bad;
      in_tiffdata = !t.self_closing;
    } else if (in_tiffdata && tag_is(&t, "UUID") && o->n_tiffdata > 0) {
      pb__ome_tiffdata *d = &o->tiffdata[o->n_tiffdata - 1];
      attr_get(&t, "FileName", d->file, sizeof d->file);
    }
  }
  if (!seen_ome) return 0;
  if (!done && rc < 0 && !have_pixels) {
    rc = fail(why, ws, "OME-XML is malformed");
    goto bad;
  }
  if (o->binary_only) return 1;
  if (!have_pixels) {
    rc = fail(why, ws, "OME-XML has no Image with Pixels");
    goto bad;
  }
  rc = check_planes(o, why, ws);
  if (rc != PB_OK) goto bad;
  return 1;
bad:
  pb__ome_info_destroy(o);
  return rc;
}

/* ---- OME-XML writing -------------------------------------------------------------------- */

/* Appends an attribute with its value escaped for XML. */
static void sb_attr(pb__strbuf *b, const char *name, const char *value) {
  pb__strbuf_printf(b, " %s=\"", name);
  for (const char *s = value; *s; s++) {
    switch (*s) {
      case '&': pb__strbuf_printf(b, "&amp;"); break;
      case '<': pb__strbuf_printf(b, "&lt;"); break;
      case '>': pb__strbuf_printf(b, "&gt;"); break;
      case '"': pb__strbuf_printf(b, "&quot;"); break;
      case '\'': pb__strbuf_printf(b, "&apos;"); break;
      default:
        if ((unsigned char)*s < 0x20) pb__strbuf_printf(b, "&#%d;", (int)(unsigned char)*s);
        else pb__strbuf_printf(b, "%c", *s);
    }
  }
  pb__strbuf_printf(b, "\"");
}

static const char *ome_type(pb_dtype d) {
  switch (d) {
    case PB_UINT8: return "uint8";
    case PB_UINT16: return "uint16";
    case PB_UINT32: return "uint32";
    case PB_INT16: return "int16";
    case PB_FLOAT32: return "float";
    case PB_FLOAT64: return "double";
    default: return "uint8";
  }
}

int pb__ome_type_is(const char *type, pb_dtype dtype) { return strcmp(type, ome_type(dtype)) == 0; }

char *pb__ome_write(const pb_image_meta *m, const char *file_name) {
  pb__strbuf b = {0};
  pb__strbuf_printf(&b, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
             "<OME xmlns=\"http://www.openmicroscopy.org/Schemas/OME/2016-06\" "
             "xmlns:xsi=\"http://www.w3.org/2001/XMLSchema-instance\" "
             "xsi:schemaLocation=\"http://www.openmicroscopy.org/Schemas/OME/2016-06 "
             "http://www.openmicroscopy.org/Schemas/OME/2016-06/ome.xsd\" "
             "Creator=\"pipebench %s\">",
         pb_version());
  pb__strbuf_printf(&b, "<Image ID=\"Image:0\"");
  sb_attr(&b, "Name", m->name[0] ? m->name : file_name);
  pb__strbuf_printf(&b, "><Pixels ID=\"Pixels:0\" DimensionOrder=\"XYZCT\" Type=\"%s\" SizeX=\"%lld\" "
             "SizeY=\"%lld\" SizeZ=\"%lld\" SizeC=\"%lld\" SizeT=\"%lld\"",
         ome_type(m->dtype), (long long)m->shape[PB_X], (long long)m->shape[PB_Y],
         (long long)m->shape[PB_Z], (long long)m->shape[PB_C], (long long)m->shape[PB_T]);
  static const char *const axis[3] = {"X", "Y", "Z"};
  for (int k = 0; k < 3; k++) {
    if (!(m->physical_size[k] > 0) || !isfinite(m->physical_size[k])) continue;
    char name[32];
    snprintf(name, sizeof name, "PhysicalSize%s", axis[k]);
    pb__strbuf_printf(&b, " %s=\"%.17g\"", name, m->physical_size[k]);
    snprintf(name, sizeof name, "PhysicalSize%sUnit", axis[k]);
    sb_attr(&b, name, m->physical_unit[k][0] ? m->physical_unit[k] : "µm");
  }
  pb__strbuf_printf(&b, " BigEndian=\"false\" Interleaved=\"false\">");
  for (int64_t c = 0; c < m->shape[PB_C]; c++) {
    const pb_channel *ch = c < m->n_channels ? &m->channels[c] : NULL;
    pb__strbuf_printf(&b, "<Channel ID=\"Channel:0:%lld\" SamplesPerPixel=\"1\"", (long long)c);
    if (ch != NULL) {
      if (ch->name[0]) sb_attr(&b, "Name", ch->name);
      if (ch->color_rgba != 0) pb__strbuf_printf(&b, " Color=\"%d\"", (int)(int32_t)ch->color_rgba);
      if (ch->illumination[0]) sb_attr(&b, "IlluminationType", ch->illumination);
      if (ch->excitation_um > 0)
        pb__strbuf_printf(&b, " ExcitationWavelength=\"%.9g\" ExcitationWavelengthUnit=\"nm\"",
               (double)ch->excitation_um * 1000.0);
      if (ch->emission_um > 0)
        pb__strbuf_printf(&b, " EmissionWavelength=\"%.9g\" EmissionWavelengthUnit=\"nm\"",
               (double)ch->emission_um * 1000.0);
    }
    pb__strbuf_printf(&b, "/>");
  }
  (void)file_name; /* one file per image: TiffData needs no UUID */
  pb__strbuf_printf(&b, "<TiffData IFD=\"0\" PlaneCount=\"%lld\"/>",
         (long long)(m->shape[PB_T] * m->shape[PB_C] * m->shape[PB_Z]));
  pb__strbuf_printf(&b, "</Pixels></Image></OME>");
  return pb__strbuf_take(&b); /* NULL when an append failed */
}

/* ---- tifffile and ImageJ descriptions --------------------------------------------------- */

/* Builds "XY" + page axes from fastest to slowest, then the missing ones. */
static int order_from_axes(const char *slow_to_fast, char order[8]) {
  size_t n = strlen(slow_to_fast);
  char o[8] = "XY";
  size_t k = 2;
  for (size_t i = n; i > 0; i--) {
    char a = slow_to_fast[i - 1];
    if (strchr(o, a)) return -1;
    o[k++] = a;
  }
  for (const char *a = "ZCT"; *a; a++)
    if (!strchr(o, *a)) o[k++] = *a;
  o[k] = '\0';
  memcpy(order, o, 8);
  return 0;
}

int pb__tiff_parse_shaped(const char *desc, int spp, int separate, int64_t n_pages, int64_t sizes[3],
                          char order[8], char *why, size_t ws) {
  if (desc == NULL || desc[0] != '{') return 0;
  cJSON *j = cJSON_Parse(desc);
  if (j == NULL) return 0;
  cJSON *shape = cJSON_GetObjectItemCaseSensitive(j, "shape");
  if (!cJSON_IsArray(shape)) {
    cJSON_Delete(j);
    return 0;
  }
  int nd = cJSON_GetArraySize(shape);
  cJSON *axes_item = cJSON_GetObjectItemCaseSensitive(j, "axes");
  const char *axes = cJSON_IsString(axes_item) ? axes_item->valuestring : NULL;
  int64_t dims[32];
  int rc = 1;
  if (nd < 2 || nd > 32 || (axes != NULL && (int)strlen(axes) != nd)) {
    rc = fail(why, ws, "tifffile shape description %s is not understood", desc);
    goto out;
  }
  for (int i = 0; i < nd; i++) {
    cJSON *d = cJSON_GetArrayItem(shape, i);
    if (!cJSON_IsNumber(d) || d->valuedouble < 1 || d->valuedouble > 1e12) {
      rc = fail(why, ws, "tifffile shape description has an invalid size");
      goto out;
    }
    dims[i] = (int64_t)d->valuedouble;
  }
  /* Drop the in-page axes: Y, X and (for several samples) S, after them when interleaved,
   * before them when stored as separate planes. */
  int lead = nd - 2;
  if (spp > 1) {
    if (nd < 3 || dims[separate ? nd - 3 : nd - 1] != spp) {
      rc = fail(why, ws, "tifffile shape description does not hold %d samples", spp);
      goto out;
    }
    lead = nd - 3;
  }
  char page_axes[8] = "";
  int np = 0;
  int64_t s[3] = {1, 1, 1}, prod = 1;
  for (int i = 0; i < lead; i++) {
    prod *= dims[i];
    if (prod > ((int64_t)1 << 40)) {
      rc = fail(why, ws, "tifffile shape description is too large");
      goto out;
    }
    if (dims[i] == 1) continue;
    char a;
    if (axes != NULL) {
      a = (char)toupper((unsigned char)axes[i]);
      if (a == 'S' && spp == 1) a = 'C';
      if (a == 'I' || a == 'Q') a = 'Z';
    } else {
      a = 0; /* assigned below, right-aligned onto T, C, Z */
    }
    if (np >= 3) {
      rc = fail(why, ws, "tifffile shape description has more than 3 page axes");
      goto out;
    }
    page_axes[np] = a;
    s[np] = dims[i];
    np++;
  }
  if (axes == NULL)
    for (int i = 0; i < np; i++) page_axes[i] = "TCZ"[3 - np + i];
  page_axes[np] = '\0';
  sizes[0] = sizes[1] = sizes[2] = 1;
  for (int i = 0; i < np; i++) {
    char a = page_axes[i];
    int k = a == 'T' ? 0 : a == 'C' ? 1 : a == 'Z' ? 2 : -1;
    if (k < 0) {
      rc = fail(why, ws, "tifffile axis '%c' cannot be mapped onto T, C or Z", a);
      goto out;
    }
    sizes[k] = s[i];
  }
  if (spp > 1 && sizes[1] > 1) {
    rc = fail(why, ws, "channels both as pages and as samples are not supported");
    goto out;
  }
  if (order_from_axes(page_axes, order) != 0) {
    rc = fail(why, ws, "tifffile axes '%s' repeat an axis", axes ? axes : "");
    goto out;
  }
  if (prod > n_pages) {
    rc = fail(why, ws, "tifffile shape needs %lld pages but the file has %lld", (long long)prod,
              (long long)n_pages);
    goto out;
  }
out:
  cJSON_Delete(j);
  return rc;
}

static int64_t imagej_value(const char *desc, const char *key) {
  size_t kl = strlen(key);
  for (const char *p = desc; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL) {
    if (strncmp(p, key, kl) == 0 && p[kl] == '=') {
      long long v = strtoll(p + kl + 1, NULL, 10);
      return v >= 1 && v <= ((int64_t)1 << 32) ? v : 1;
    }
  }
  return 1;
}

int pb__tiff_parse_imagej(const char *desc, int64_t sizes[3], char order[8]) {
  if (desc == NULL || strncmp(desc, "ImageJ=", 7) != 0) return 0;
  /* ImageJ hyperstacks store channels fastest, then slices, then frames. */
  sizes[0] = imagej_value(desc, "frames");
  sizes[1] = imagej_value(desc, "channels");
  sizes[2] = imagej_value(desc, "slices");
  memcpy(order, "XYCZT", 6);
  return 1;
}
