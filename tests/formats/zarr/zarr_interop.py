"""Interop fixtures for pipebench's ome-zarr backend (run with Debian's /usr/bin/python3).

  zarr_interop.py v2write DIR   zarr-python 2.13 + numcodecs write Zarr v2 / NGFF 0.4 images
  zarr_interop.py v3write DIR   a hand-built Zarr v3 / NGFF 0.5 dataset from numpy, zlib, json
                                (no v3-capable zarr-python is installed here)
  zarr_interop.py check DIR...  zarr-python reads a pipebench-written v2 dataset; compares
                                against DIR.manifest written by the C test

Manifests have one line per image: name dtype t c z y x crc32 physical_x n_channels, where
crc32 is zlib's CRC of the expected pixels (little-endian, T,C,Z,Y,X C order).
"""
import gzip
import json
import os
import sys
import zlib

import numpy as np

AXES = "tczyx"


def as5d(arr, axes):
    """View arr (with the given axis letters) as T,C,Z,Y,X."""
    shape = [1] * 5
    for letter, n in zip(axes, arr.shape):
        shape[AXES.index(letter)] = n
    return arr.reshape(shape)


def crc_of(arr5):
    le = np.ascontiguousarray(arr5.astype(arr5.dtype.newbyteorder("<")))
    return zlib.crc32(le.tobytes()) & 0xFFFFFFFF


def manifest_line(name, arr5, phys_x, n_channels):
    dt = np.dtype(arr5.dtype).newbyteorder("=").name
    return "%s %s %s %d %g %d\n" % (name, dt, " ".join(str(s) for s in arr5.shape),
                                    crc_of(arr5), phys_x, n_channels)


def axes_meta(axes, unit=True):
    out = []
    for a in axes:
        d = {"name": a, "type": {"t": "time", "c": "channel"}.get(a, "space")}
        if unit and a in "zyx":
            d["unit"] = "micrometer"
        out.append(d)
    return out


def multiscale(axes, scale):
    return {"version": "0.4", "name": "x", "axes": axes_meta(axes),
            "datasets": [{"path": "0", "coordinateTransformations": [
                {"type": "scale", "scale": scale}]}]}


def pixels(shape, dtype, seed):
    rng = np.random.default_rng(seed)
    n = int(np.prod(shape))
    base = (np.arange(n) % 251).reshape(shape)
    noise = rng.integers(0, 5, size=shape)
    if np.dtype(dtype).kind == "f":
        return (base * 0.5 + noise - 7.25).astype(dtype)
    return (base * (257 if np.dtype(dtype).itemsize > 1 else 1) // 3 + noise).astype(dtype)


def v2write(root):
    import zarr
    from numcodecs import GZip, Blosc, Zlib, Zstd

    os.makedirs(root, exist_ok=True)
    B = Blosc
    cases = [
        # name, axes, shape, chunks, dtype, compressor, separator, fill, drop a chunk
        ("a_blosc_lz4_shuffle", "tczyx", (1, 2, 3, 40, 50), (1, 1, 2, 16, 16), "<u2",
         B("lz4", 5, B.SHUFFLE), ".", 0, False),
        ("b_blosc_lz4_bitshuffle", "cyx", (3, 33, 30), (2, 16, 16), "|u1",
         B("lz4", 5, B.BITSHUFFLE), "/", 0, False),
        ("c_blosc_zstd_shuffle", "zyx", (5, 31, 29), (2, 8, 8), "<f4",
         B("zstd", 3, B.SHUFFLE), "/", 0, False),
        ("d_blosc_zstd_noshuffle", "czyx", (2, 2, 20, 21), (1, 2, 20, 21), "<u2",
         B("zstd", 1, B.NOSHUFFLE), ".", 0, False),
        ("e_blosc_lz4hc", "yx", (45, 37), (16, 16), "<u2", B("lz4hc", 5, B.SHUFFLE), ".", 0, False),
        ("f_blosc_blosclz", "tczyx", (2, 1, 1, 17, 19), (1, 1, 1, 17, 19), "<f4",
         B("blosclz", 5, B.SHUFFLE), "/", 0, False),
        ("g_blosc_zlib", "zyx", (2, 18, 18), (1, 9, 9), "|u1", B("zlib", 5, B.SHUFFLE), ".", 0, False),
        ("h_zstd_missing", "zyx", (3, 40, 40), (1, 16, 16), "<u2", Zstd(level=3), "/", 9, True),
        ("i_gzip_nan_missing", "cyx", (2, 30, 30), (1, 15, 15), "<f4", GZip(level=5), ".",
         float("nan"), True),
        ("j_zlib", "tczyx", (1, 1, 2, 25, 25), (1, 1, 1, 10, 10), "|u1", Zlib(level=4), "/", 0, False),
        ("k_none_bigendian", "zyx", (2, 21, 22), (1, 10, 10), ">u2", None, ".", 0, False),
        ("l_blosc_bigendian_f4", "yx", (20, 20), (7, 7), ">f4", B("lz4", 5, B.SHUFFLE), "/", 0, False),
        ("m_nofill_missing", "yx", (20, 20), (10, 10), "<u2", Zstd(level=1), ".", None, True),
    ]
    lines = []
    for i, (name, axes, shape, chunks, dtype, comp, sep, fill, drop) in enumerate(cases):
        gpath = os.path.join(root, name + ".zarr")
        g = zarr.open_group(gpath, mode="w")
        data = pixels(shape, dtype, i)
        arr = zarr.open_array(os.path.join(gpath, "0"), mode="w", shape=shape, chunks=chunks,
                              dtype=dtype, compressor=comp, fill_value=fill,
                              dimension_separator=sep)
        arr[...] = data
        expected = data.copy()
        if drop:
            # remove the second chunk along the last axis
            key = sep.join(["0"] * (len(shape) - 1) + ["1"])
            os.remove(os.path.join(gpath, "0", *key.split("/")))
            sl = tuple([slice(0, c) for c in chunks[:-1]] +
                       [slice(chunks[-1], 2 * chunks[-1])])
            expected[sl] = 0 if fill is None else fill
        scale = [1.0] * len(axes)
        if "x" in axes:
            scale[axes.index("x")] = 0.25 + i
        g.attrs["multiscales"] = [multiscale(axes, scale)]
        nch = 0
        if "c" in axes:
            nch = shape[axes.index("c")]
            g.attrs["omero"] = {"channels": [{"label": "c%d" % k, "color": "FF0000"}
                                             for k in range(nch)]}
        lines.append(manifest_line(name + ".zarr", as5d(expected, axes), 0.25 + i, nch))
    with open(root + ".manifest", "w") as f:
        f.writelines(lines)


# ---- hand-built Zarr v3 ---------------------------------------------------------------------

def _crc32c_table():
    t = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        t.append(c)
    return t


CRC32C = _crc32c_table()


def crc32c(data):
    c = 0xFFFFFFFF
    for b in data:
        c = CRC32C[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def chunk_boxes(shape, chunks):
    grid = [-(-n // c) for n, c in zip(shape, chunks)]
    for idx in np.ndindex(*grid):
        yield idx, tuple(slice(i * c, (i + 1) * c) for i, c in zip(idx, chunks))


def padded(data, sl, chunks, fill):
    out = np.full(chunks, fill, dtype=data.dtype)
    part = data[sl]
    out[tuple(slice(0, n) for n in part.shape)] = part
    return out


def encode(block, codecs):
    raw = None
    for c in codecs:
        n, cfg = c["name"], c.get("configuration", {})
        if n == "bytes":
            dt = block.dtype.newbyteorder(">" if cfg.get("endian") == "big" else "<")
            raw = np.ascontiguousarray(block.astype(dt)).tobytes()
        elif n == "gzip":
            raw = gzip.compress(raw, compresslevel=cfg.get("level", 5), mtime=0)
        elif n == "crc32c":
            raw = raw + crc32c(raw).to_bytes(4, "little")
        else:
            raise ValueError(n)
    return raw


def v3array(path, data, chunks, codecs, fill, key, sep, dim_names, skip=()):
    """Writes data as a v3 array; skip: chunk indices left out (they read as fill)."""
    os.makedirs(path, exist_ok=True)
    # "_empty" (inner chunks to leave out of a shard) is ours, not part of the format
    empty = codecs[0].get("configuration", {}).pop("_empty", ())
    dtname = np.dtype(data.dtype).newbyteorder("=").name
    meta = {"zarr_format": 3, "node_type": "array", "shape": list(data.shape),
            "data_type": dtname,
            "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": list(chunks)}},
            "chunk_key_encoding": {"name": key, "configuration": {"separator": sep}},
            "fill_value": fill, "codecs": codecs, "attributes": {}}
    if dim_names:
        meta["dimension_names"] = list(dim_names)
    with open(os.path.join(path, "zarr.json"), "w") as f:
        json.dump(meta, f)
    fillv = np.nan if fill == "NaN" else fill
    expected = data.copy()
    shard = codecs[0]["name"] == "sharding_indexed"
    for idx, sl in chunk_boxes(data.shape, chunks):
        parts = [str(i) for i in idx]
        k = ("c" + sep + sep.join(parts)) if key == "default" else sep.join(parts)
        fpath = os.path.join(path, *k.split("/"))
        if idx in skip:
            expected[sl] = fillv
            continue
        block = padded(data, sl, chunks, fillv)
        if shard:
            cfg = codecs[0]["configuration"]
            inner = cfg["chunk_shape"]
            blobs, index = [], []
            at_end = cfg["index_location"] == "end"
            n_inner = int(np.prod([c // i for c, i in zip(chunks, inner)]))
            index_len = 16 * n_inner + 4
            off = 0 if at_end else index_len
            for iidx, isl in chunk_boxes(chunks, inner):
                if iidx in empty:
                    index.append((2**64 - 1, 2**64 - 1))
                    esl = tuple(slice(s.start + i.start, s.start + i.stop) for s, i in zip(sl, isl))
                    expected[esl] = fillv
                    continue
                blob = encode(block[isl], cfg["codecs"])
                index.append((off, len(blob)))
                blobs.append(blob)
                off += len(blob)
            ib = b"".join(o.to_bytes(8, "little") + n.to_bytes(8, "little") for o, n in index)
            ib += crc32c(ib).to_bytes(4, "little")
            payload = b"".join(blobs)
            raw = payload + ib if at_end else ib + payload
        else:
            raw = encode(block, codecs)
        os.makedirs(os.path.dirname(fpath), exist_ok=True)
        with open(fpath, "wb") as f:
            f.write(raw)
    return expected


def v3group(path, axes, scale):
    os.makedirs(path, exist_ok=True)
    ms = {"name": "x", "axes": axes_meta(axes),
          "datasets": [{"path": "0", "coordinateTransformations": [
              {"type": "scale", "scale": scale}]}]}
    meta = {"zarr_format": 3, "node_type": "group",
            "attributes": {"ome": {"version": "0.5", "multiscales": [ms]}}}
    with open(os.path.join(path, "zarr.json"), "w") as f:
        json.dump(meta, f)


def v3write(root):
    os.makedirs(root, exist_ok=True)
    with open(os.path.join(root, "zarr.json"), "w") as f:
        json.dump({"zarr_format": 3, "node_type": "group", "attributes": {}}, f)
    little = {"name": "bytes", "configuration": {"endian": "little"}}
    big = {"name": "bytes", "configuration": {"endian": "big"}}
    gz = {"name": "gzip", "configuration": {"level": 5}}
    lines = []

    def add(name, axes, data, chunks, codecs, fill, key, sep, skip=(), dim_names=None):
        g = os.path.join(root, name + ".zarr")
        scale = [1.0] * len(axes)
        scale[axes.index("x")] = 0.5
        v3group(g, axes, scale)
        exp = v3array(os.path.join(g, "0"), data, chunks, codecs, fill, key, sep, dim_names, skip)
        lines.append(manifest_line(name + ".zarr", as5d(exp, axes), 0.5, 0))

    add("a_gzip_default_key", "czyx", pixels((2, 3, 30, 35), "<u2", 1), (1, 2, 16, 16),
        [little, gz], 7, "default", "/", skip={(1, 0, 1, 0)})
    add("b_bigendian_v2key", "zyx", pixels((2, 20, 26), "<f4", 2), (1, 8, 8),
        [big], "NaN", "v2", ".", skip={(0, 1, 1)}, dim_names="zyx")
    shard = {"name": "sharding_indexed", "configuration": {
        "chunk_shape": [1, 8, 8], "codecs": [little, gz],
        "index_codecs": [little, {"name": "crc32c"}], "index_location": "end",
        "_empty": {(0, 1, 0)}}}
    add("c_sharded_end", "zyx", pixels((3, 40, 36), "|u1", 3), (2, 16, 16), [shard], 3,
        "default", "/", skip={(1, 2, 0)})
    shard2 = {"name": "sharding_indexed", "configuration": {
        "chunk_shape": [4, 4], "codecs": [little, {"name": "crc32c"}],
        "index_codecs": [little, {"name": "crc32c"}], "index_location": "start"}}
    add("d_sharded_start_crc", "yx", pixels((18, 22), "<i2", 4), (8, 8), [shard2], 0,
        "default", ".")
    with open(root + ".manifest", "w") as f:
        f.writelines(lines)


def check(root):
    import zarr

    bad = 0
    with open(root + ".manifest") as f:
        lines = [ln.split() for ln in f if ln.strip()]
    g = zarr.open_group(root, mode="r")
    for name, dtype, t, c, z, y, x, crc, _phys, _nch in lines:
        arr = zarr.open_array(os.path.join(root, name, "0"), mode="r")
        data = arr[...]
        if data.dtype != np.dtype(dtype) or data.shape != tuple(int(v) for v in (t, c, z, y, x)):
            print("%s: dtype/shape %s %s" % (name, data.dtype, data.shape))
            bad += 1
            continue
        if crc_of(data) != int(crc):
            print("%s: pixels differ (crc %d != %s)" % (name, crc_of(data), crc))
            bad += 1
        attrs = g[name].attrs.asdict()
        axes = [a["name"] for a in attrs["multiscales"][0]["axes"]]
        if axes != list(AXES) or attrs["multiscales"][0]["version"] != "0.4":
            print("%s: unexpected multiscales %r" % (name, attrs["multiscales"]))
            bad += 1
    print("zarr-python read %d images, %d bad" % (len(lines), bad))
    return 1 if bad else 0


if __name__ == "__main__":
    mode, root = sys.argv[1], sys.argv[2]
    if mode == "v2write":
        v2write(root)
    elif mode == "v3write":
        v3write(root)
    elif mode == "check":
        sys.exit(max(check(r) for r in sys.argv[2:]))
    else:
        sys.exit("unknown mode " + mode)
