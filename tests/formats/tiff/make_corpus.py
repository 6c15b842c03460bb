"""Regenerates the seed corpus of fuzz_tiff in tests/formats/tiff/corpus/
(run with /usr/bin/python3).

Small TIFFs of every layout the backend reads (tifffile-written: OME, shaped JSON, ImageJ,
RGB, planar, big-endian, BigTIFF, tiled), plus malformed ones (truncated, IFD loop, not TIFF).
The pw_*.tif seeds were written by pipebench itself (lzw tiled, zstd striped) and are kept
as they are.
"""
import os
import struct
import sys

import numpy as np
import tifffile

out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "corpus")
os.makedirs(out, exist_ok=True)
rng = np.random.default_rng(1)


def p(name):
    return os.path.join(out, name)


a = (np.arange(2 * 3 * 8 * 8) % 50).astype(np.uint16).reshape(2, 3, 8, 8)
tifffile.imwrite(p("ome_u16_zlib.tif"), a, compression="zlib", predictor=True,
                 metadata={"axes": "CZYX"}, ome=True)
tifffile.imwrite(p("ome_u8_tiled.tif"), rng.integers(0, 255, (2, 20, 18), np.uint8),
                 tile=(16, 16), metadata={"axes": "ZYX"}, ome=True)
tifffile.imwrite(p("shaped_f32.tif"), rng.standard_normal((3, 6, 5)).astype(np.float32), ome=False)
tifffile.imwrite(p("rgb_contig.tif"), rng.integers(0, 255, (6, 7, 3), np.uint8), photometric="rgb",
                 ome=False)
tifffile.imwrite(p("rgb_planar.tif"), rng.integers(0, 999, (3, 6, 7), np.uint16),
                 photometric="rgb", planarconfig="separate", ome=False)
tifffile.imwrite(p("imagej.tif"), rng.integers(0, 999, (2, 2, 2, 5, 6), np.uint16), imagej=True,
                 metadata={"axes": "TZCYX"})
tifffile.imwrite(p("bigendian.tif"), rng.integers(0, 999, (2, 5, 6), np.uint16), byteorder=">",
                 metadata={"axes": "ZYX"}, ome=True)
tifffile.imwrite(p("bigtiff.tif"), rng.integers(0, 2**31, (2, 4, 5), np.uint32), bigtiff=True,
                 metadata={"axes": "CYX"}, ome=True)
tifffile.imwrite(p("lzma_i16.tif"), rng.integers(-99, 99, (4, 5), np.int16), compression="lzma")
tifffile.imwrite(p("f64.tif"), rng.standard_normal((4, 5)), compression="zlib")

# Malformed seeds.
good = open(p("ome_u16_zlib.tif"), "rb").read()
open(p("bad_truncated.tif"), "wb").write(good[: len(good) // 2])
b = bytearray(open(p("shaped_f32.tif"), "rb").read())
ifd0 = struct.unpack_from("<I", b, 4)[0]
n = struct.unpack_from("<H", b, ifd0)[0]
struct.pack_into("<I", b, ifd0 + 2 + 12 * n, ifd0)  # IFD 0 points to itself
open(p("bad_loop.tif"), "wb").write(bytes(b))
open(p("bad_not_tiff.tif"), "wb").write(b"PK\x03\x04not a tiff at all")
open(p("bad_header_only.tif"), "wb").write(b"II*\x00\x08\x00\x00\x00\x02\x00")
