"""tifffile side of the tiff backend's interop test (run with Debian's python3).

  interop.py write DS EXP   tifffile writes TIFF files into DS and, for each, the expected
                            pixels (T,C,Z,Y,X, little-endian) into EXP/<name>.raw plus
                            EXP/<name>.shape ("T C Z Y X dtype").
  interop.py check DS EXP   reads every file pipebench wrote into DS with tifffile and compares
                            pixels (EXP/<name>.raw) and the OME-XML shape and channel names.
Prints one line per file; exit status 1 on any mismatch.
"""
import os
import sys

import numpy as np
import tifffile


def pattern(shape, dtype, seed):
    rng = np.random.default_rng(seed)
    n = int(np.prod(shape))
    if np.dtype(dtype).kind == "f":
        a = rng.standard_normal(n) * 100
    else:
        info = np.iinfo(dtype)
        # Smooth ramps plus noise: compressible, but every value matters.
        a = (np.arange(n) % 97) * 3 + rng.integers(0, 5, n)
        a = np.clip(a, info.min, info.max)
    return a.astype(dtype).reshape(shape)


def save_expect(exp, name, tczyx):
    t, c, z, y, x = tczyx.shape
    with open(os.path.join(exp, name + ".shape"), "w") as f:
        f.write(f"{t} {c} {z} {y} {x} {tczyx.dtype.name}\n")
    tczyx.astype(tczyx.dtype.newbyteorder("<")).tofile(os.path.join(exp, name + ".raw"))


def write(ds, exp):
    os.makedirs(ds, exist_ok=True)
    os.makedirs(exp, exist_ok=True)
    cases = []

    # OME, C and Z, striped, deflate (zlib) with the horizontal predictor.
    a = pattern((3, 4, 45, 61), np.uint16, 1)
    tifffile.imwrite(os.path.join(ds, "a_czyx_u16_zlib.ome.tif"), a, compression="zlib",
                     predictor=True, rowsperstrip=7, metadata={"axes": "CZYX"})
    cases.append(("a_czyx_u16_zlib.ome.tif", a[None, :, :, :, :]))

    # OME, tiled with edge tiles, no compression, Z stack.
    b = pattern((5, 70, 50), np.uint8, 2)
    tifffile.imwrite(os.path.join(ds, "b_zyx_u8_tiled.ome.tif"), b, tile=(32, 32),
                     metadata={"axes": "ZYX"})
    cases.append(("b_zyx_u8_tiled.ome.tif", b[None, None]))

    # OME, T and C, float32, tiled, adobe deflate.
    c = pattern((2, 2, 40, 33), np.float32, 3)
    tifffile.imwrite(os.path.join(ds, "c_tcyx_f32_deflate.ome.tif"), c, tile=(16, 16),
                     compression="adobe_deflate", metadata={"axes": "TCYX"})
    cases.append(("c_tcyx_f32_deflate.ome.tif", c[:, :, None]))

    # Plain TIFF with tifffile's shaped JSON description (no OME-XML).
    d = pattern((6, 20, 30), np.uint16, 4)
    tifffile.imwrite(os.path.join(ds, "d_shaped.tif"), d, ome=False)
    cases.append(("d_shaped.tif", d[None, None]))

    # RGB with interleaved samples: three channels in one page.
    e = pattern((24, 18, 3), np.uint8, 5)
    tifffile.imwrite(os.path.join(ds, "e_rgb.tif"), e, photometric="rgb", ome=False)
    cases.append(("e_rgb.tif", np.moveaxis(e, 2, 0)[None, :, None]))

    # RGB with separate sample planes.
    f = pattern((3, 22, 19), np.uint16, 6)
    tifffile.imwrite(os.path.join(ds, "f_planar.tif"), f, photometric="rgb",
                     planarconfig="separate", ome=False, compression="zlib")
    cases.append(("f_planar.tif", f[None, :, None]))

    # ImageJ hyperstack (T, Z, C order of pages: channels fastest).
    g = pattern((2, 3, 2, 16, 17), np.uint16, 7)
    tifffile.imwrite(os.path.join(ds, "g_imagej.tif"), g, imagej=True,
                     metadata={"axes": "TZCYX"})
    cases.append(("g_imagej.tif", np.transpose(g, (0, 2, 1, 3, 4))))

    # Big-endian OME, float64 would be unusual; uint16 big-endian striped.
    h = pattern((2, 25, 27), np.uint16, 8)
    tifffile.imwrite(os.path.join(ds, "h_bigendian.ome.tif"), h, byteorder=">",
                     metadata={"axes": "ZYX"})
    cases.append(("h_bigendian.ome.tif", h[None, None]))

    # LZMA (libtiff has it; tifffile writes it with the standard library).
    i = pattern((2, 31, 29), np.int16, 9)
    tifffile.imwrite(os.path.join(ds, "i_lzma.ome.tif"), i, compression="lzma",
                     metadata={"axes": "CYX"})
    cases.append(("i_lzma.ome.tif", i[None, :, None]))

    # BigTIFF, uint32, C and Z with OME order XYCZT chosen by tifffile for axes ZCYX.
    j = pattern((2, 3, 12, 14), np.uint32, 10)
    tifffile.imwrite(os.path.join(ds, "j_bigtiff.ome.tif"), j, bigtiff=True,
                     metadata={"axes": "ZCYX"})
    cases.append(("j_bigtiff.ome.tif", np.transpose(j, (1, 0, 2, 3))[None]))

    for name, arr in cases:
        save_expect(exp, name, np.ascontiguousarray(arr))
        print("wrote", name, arr.shape, arr.dtype)
    return 0


def check(ds, exp):
    bad = 0
    for name in sorted(os.listdir(ds)):
        if not name.endswith((".tif", ".tiff")):
            continue
        with open(os.path.join(exp, name + ".shape")) as f:
            parts = f.read().split()
        shape = tuple(int(v) for v in parts[:5])
        dtype = np.dtype(parts[5]).newbyteorder("<")
        want = np.fromfile(os.path.join(exp, name + ".raw"), dtype=dtype).reshape(shape)
        with tifffile.TiffFile(os.path.join(ds, name)) as tf:
            if not tf.is_ome:
                print("FAIL", name, "tifffile does not see OME-XML")
                bad += 1
                continue
            s = tf.series[0]
            axes = s.get_axes(False)
            full = tuple(s.get_shape(False))
            if axes.endswith("S") and full[-1] == 1:  # tifffile keeps a 1-sample axis
                axes, full = axes[:-1], full[:-1]
            got = s.asarray(squeeze=False)
            ome = tf.ome_metadata
        if axes != "TCZYX" or tuple(full) != shape:
            print("FAIL", name, "axes", axes, "shape", full, "expected TCZYX", shape)
            bad += 1
            continue
        got = got.reshape(shape)
        if got.dtype.newbyteorder("<") != dtype or not np.array_equal(got, want):
            print("FAIL", name, "pixels differ", got.dtype, dtype)
            bad += 1
            continue
        if 'Name="ch0"' not in ome or "PhysicalSizeX=" not in ome:
            print("FAIL", name, "channel names or physical sizes missing in OME-XML")
            bad += 1
            continue
        print("ok", name, axes, tuple(full), got.dtype)
    return 1 if bad else 0


if __name__ == "__main__":
    if len(sys.argv) != 4 or sys.argv[1] not in ("write", "check"):
        print(__doc__)
        sys.exit(2)
    sys.exit(write(sys.argv[2], sys.argv[3]) if sys.argv[1] == "write" else check(sys.argv[2], sys.argv[3]))
