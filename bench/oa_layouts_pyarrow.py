#!/usr/bin/env python3
"""Every OME-Arrow layout, both ways between pipebench and pyarrow (run by oa_layouts_device.sh).

usage: oa_layouts_pyarrow.py WORKDIR [PIPEBENCH]

pipebench -> pyarrow: `pipebench gen` writes each ome-parquet layout (planes, numeric chunks,
byte chunks with none/zstd/lz4 leaves); pyarrow reads it, rebuilds every image from planes or
chunks, and its CRC-32 must equal what `pipebench inspect --json` reports; the Arrow schema is
compared with OME-Arrow's types (strictly; differences are listed, as docs/format-ome-arrow.md
says which are expected).

pyarrow -> pipebench: Python builds tables in the shapes the ome-arrow package writes (0.0.3
planes without chunk_grid/chunks; numeric chunks with planes empty; OME_ARROW_BYTE_STRUCT with
large_binary leaves compressed none, zstd, lz4 block with a size prefix, bare lz4 block, lz4
frame; planes and chunks both; the column under another name beside other columns), writes them
with pyarrow's defaults (snappy, dictionary pages) and with zstd, and `pipebench inspect --json`
must report their CRC-32s.

Prints one line per check ("ok ..." or "FAIL ..."); exit status 0 when all pass, 1 otherwise.
"""
import json
import os
import subprocess
import sys
import zlib

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

# OME-Arrow's Arrow types, as ome-arrow.md gives them: kept once, in the strict checker
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts"))
from check_ome_arrow_pyarrow import (BOX, CHANNEL, CHUNK_BYTES, CHUNK_GRID,  # noqa: E402,F401
                                     CHUNK_NUM, PIXELS_META, PLANE, STR)


def ome_struct(chunk, with_chunks=True):
    fields = [("type", STR), ("version", STR), ("id", STR), ("name", STR),
              ("image_type", STR), ("acquisition_datetime", pa.timestamp("us")),
              ("pixels_meta", PIXELS_META)]
    if with_chunks:
        fields += [("chunk_grid", CHUNK_GRID), ("chunks", pa.list_(chunk))]
    fields += [("planes", pa.list_(PLANE)), ("masks", pa.null())]
    return pa.struct(fields)


failures = 0


def report(ok, what):
    global failures
    print(("ok   " if ok else "FAIL ") + what, flush=True)
    if not ok:
        failures += 1


def type_diffs(path, want, got, out):
    """Strict differences between Arrow types (list item names are not counted)."""
    if want == got:
        return
    if pa.types.is_struct(want) and pa.types.is_struct(got):
        wn = [want.field(i).name for i in range(want.num_fields)]
        gn = [got.field(i).name for i in range(got.num_fields)]
        if wn != gn:
            out.append(f"{path}: fields {gn} != {wn}")
        for i in range(min(want.num_fields, got.num_fields)):
            if want.field(i).name == got.field(i).name:
                type_diffs(f"{path}.{want.field(i).name}", want.field(i).type,
                           got.field(i).type, out)
        return
    if pa.types.is_list(want) and pa.types.is_list(got):
        type_diffs(path + "[]", want.value_type, got.value_type, out)
        return
    out.append(f"{path}: {got} != {want}")


def leaf_decode(buf, codec, n):
    if codec in (None, "", "none"):
        return buf
    if codec == "zstd":
        return pa.Codec("zstd").decompress(buf, decompressed_size=n).to_pybytes()
    if codec == "lz4":  # pipebench: 4-byte little-endian size, then an LZ4 block
        return pa.Codec("lz4_raw").decompress(buf[4:], decompressed_size=n).to_pybytes()
    raise ValueError(f"leaf compression {codec}")


def rebuild(row):
    pm = row["pixels_meta"]
    shape = (pm["size_t"], pm["size_c"], pm["size_z"], pm["size_y"], pm["size_x"])
    dtype = np.dtype({"float": "float32", "double": "float64"}.get(pm["type"], pm["type"]))
    img = np.zeros(shape, dtype)
    if row.get("planes"):
        for p in row["planes"]:
            img[p["t"], p["c"], p["z"]] = np.asarray(p["pixels"], dtype).reshape(shape[3:])
        return img
    for ch in row.get("chunks") or []:
        sz, sy, sx = ch["shape_z"], ch["shape_y"], ch["shape_x"]
        if "pixel_bytes" in ch:
            raw = leaf_decode(ch["pixel_bytes"], ch.get("compression"),
                              sz * sy * sx * dtype.itemsize)
            box = np.frombuffer(raw, dtype).reshape(sz, sy, sx)
        else:
            box = np.asarray(ch["pixels"], dtype).reshape(sz, sy, sx)
        img[ch["t"], ch["c"], ch["z"]:ch["z"] + sz, ch["y"]:ch["y"] + sy,
            ch["x"]:ch["x"] + sx] = box
    return img


def crc(img):
    return "%08x" % (zlib.crc32(np.ascontiguousarray(img).astype(img.dtype.newbyteorder("<"),
                                                                  copy=False).tobytes()) & 0xFFFFFFFF)


def inspect(pb, path):
    r = subprocess.run([pb, "inspect", path, "--json"], capture_output=True, text=True)
    if r.returncode != 0:
        return None, r.stderr.strip()
    return [im["crc32"] for im in json.loads(r.stdout)["images"]], ""


# ---- pipebench writes, pyarrow reads ------------------------------------------------------

def pipebench_to_pyarrow(pb, work):
    cases = [("planes", "layout=planes", "none"), ("chunks", "layout=chunks", "none"),
             ("chunk-bytes none", "layout=chunk-bytes", "none"),
             ("chunk-bytes zstd", "layout=chunk-bytes", "zstd"),
             ("chunk-bytes lz4", "layout=chunk-bytes", "lz4")]
    for name, opt, comp in cases:
        d = os.path.join(work, "pb_" + name.replace(" ", "_"))
        cmd = [pb, "gen", "--out", d, "--rows", "5", "--size", "40x30", "--channels", "2",
               "--z", "3", "--dtype", "uint16", "--seed", "11", "--formats", "ome-parquet",
               "--chunk", "1x16x16", "--options", opt]
        if comp != "none":
            cmd += ["--compression", comp]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            report(False, f"pipebench->pyarrow {name}: gen failed: {r.stderr.strip()}")
            continue
        path = os.path.join(d, "images.parquet")
        want, msg = inspect(pb, path)
        if want is None:
            report(False, f"pipebench->pyarrow {name}: inspect failed: {msg}")
            continue
        pf = pq.ParquetFile(path)
        got_t = pf.schema_arrow.field("ome_arrow").type
        diffs = []
        type_diffs("ome_arrow", ome_struct(CHUNK_BYTES if "bytes" in name else CHUNK_NUM),
                   got_t, diffs)
        rows = pf.read().column("ome_arrow").to_pylist()
        crcs = [crc(rebuild(row)) for row in rows]
        layout_ok = all((len(r["planes"]) > 0) == (name == "planes") for r in rows)
        report(crcs == want and layout_ok,
               f"pipebench->pyarrow {name}: {len(rows)} images, CRC-32 "
               f"{'equal' if crcs == want else 'DIFFER'}, planes/chunks as the layout says: "
               f"{layout_ok}; schema differences: {'; '.join(diffs) or 'none'}")


# ---- pyarrow writes (as the ome-arrow package does), pipebench reads -------------------------

def meta(shape, dtype):
    t, c, z, y, x = shape
    return {"dimension_order": "XYZCT" if z > 1 else "XYCT", "type": dtype, "size_x": x,
            "size_y": y, "size_z": z, "size_c": c, "size_t": t, "physical_size_x": 0.5,
            "physical_size_y": 0.5, "physical_size_z": 1.0, "physical_size_x_unit": "µm",
            "physical_size_y_unit": "µm", "physical_size_z_unit": "µm",
            "channels": [{"id": f"ch{k}", "name": f"c{k}", "emission_um": 0.5,
                          "excitation_um": 0.4, "illumination": "epi",
                          "color_rgba": 0xFF0000FF} for k in range(c)]}


def boxes(shape, grid):
    t_, c_, z_, y_, x_ = shape
    gz, gy, gx = grid
    for t in range(t_):
        for c in range(c_):
            for z in range(0, z_, gz):
                for y in range(0, y_, gy):
                    for x in range(0, x_, gx):
                        yield t, c, z, y, x, min(gz, z_ - z), min(gy, y_ - y), min(gx, x_ - x)


def leaf_encode(raw, how):
    if how == "none":
        return "none", raw
    if how == "zstd":
        return "zstd", pa.Codec("zstd").compress(raw).to_pybytes()
    block = pa.Codec("lz4_raw").compress(raw).to_pybytes()
    if how == "lz4-sized":
        return "lz4", len(raw).to_bytes(4, "little") + block
    if how == "lz4-block":
        return "lz4", block
    return "lz4", pa.Codec("lz4").compress(raw).to_pybytes()  # lz4 frame


def make_row(i, img, kind, grid=(1, 16, 16), leaf="none"):
    shape = img.shape
    row = {"type": "ome.arrow", "version": "0.0.9", "id": f"img{i}", "name": f"image {i}",
           "image_type": "image", "acquisition_datetime": None,
           "pixels_meta": meta(shape, "uint16"), "masks": None, "planes": [],
           "chunk_grid": None, "chunks": []}
    if kind in ("planes", "planes-0.0.3", "both"):
        row["planes"] = [{"z": z, "t": t, "c": c, "pixels": img[t, c, z].ravel().tolist()}
                         for t in range(shape[0]) for c in range(shape[1])
                         for z in range(shape[2])]
    if kind in ("chunks", "bytes", "both"):
        row["chunk_grid"] = {"order": "TCZYX", "chunk_t": 1, "chunk_c": 1, "chunk_z": grid[0],
                             "chunk_y": grid[1], "chunk_x": grid[2], "chunk_order": "ZYX"}
        for t, c, z, y, x, sz, sy, sx in boxes(shape, grid):
            part = np.ascontiguousarray(img[t, c, z:z + sz, y:y + sy, x:x + sx])
            ch = {"t": t, "c": c, "z": z, "y": y, "x": x, "shape_z": sz, "shape_y": sy,
                  "shape_x": sx}
            if kind == "bytes":
                codec, data = leaf_encode(part.astype("<u2").tobytes(), leaf)
                ch.update({"dtype": "uint16", "compression": codec, "pixel_bytes": data})
            else:
                ch["pixels"] = part.ravel().tolist()
            row["chunks"].append(ch)
    if kind == "planes-0.0.3":
        del row["chunk_grid"], row["chunks"], row["image_type"]
    return row


def pyarrow_to_pipebench(pb, work):
    rng = np.random.default_rng(7)
    shape = (1, 2, 3, 40, 30)
    imgs = [rng.integers(0, 65535, size=shape, dtype=np.uint16) for _ in range(5)]
    want = [crc(im) for im in imgs]
    cases = [("planes (0.0.3)", "planes-0.0.3", "none"), ("numeric chunks", "chunks", "none"),
             ("byte chunks none", "bytes", "none"), ("byte chunks zstd", "bytes", "zstd"),
             ("byte chunks lz4 (size prefix)", "bytes", "lz4-sized"),
             ("byte chunks lz4 (bare block)", "bytes", "lz4-block"),
             ("byte chunks lz4 (frame)", "bytes", "lz4-frame"),
             ("planes and chunks both", "both", "none")]
    for name, kind, leaf in cases:
        if kind == "planes-0.0.3":
            t = ome_struct(None, with_chunks=False)
            t = pa.struct([t.field(k) for k in range(t.num_fields)
                           if t.field(k).name != "image_type"])
        else:
            t = ome_struct(CHUNK_BYTES if kind == "bytes" else CHUNK_NUM)
        rows = [make_row(i, im, kind, leaf=leaf) for i, im in enumerate(imgs)]
        for extra, codec in ((False, "snappy"), (True, "zstd")):
            col = "image" if extra else "ome_arrow"
            arrays = {col: pa.array(rows, type=t)}
            if extra:  # a profiling-style table: other columns around the image
                arrays = {"well": pa.array([f"A{i}" for i in range(5)]), col: arrays[col],
                          "score": pa.array([0.5 * i for i in range(5)], pa.float64())}
            path = os.path.join(work, f"pa_{kind}_{leaf}_{col}.parquet")
            pq.write_table(pa.table(arrays), path, compression=codec, row_group_size=2)
            got, msg = inspect(pb, path)
            report(got == want,
                   f"pyarrow->pipebench {name}, column '{col}'{' among others' if extra else ''}"
                   f", {codec} pages: {'CRC-32 equal' if got == want else 'got ' + str(got or msg)}")


def main():
    if len(sys.argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    work = sys.argv[1]
    pb = sys.argv[2] if len(sys.argv) > 2 else "pipebench"
    os.makedirs(work, exist_ok=True)
    print(f"pyarrow {pa.__version__}, numpy {np.__version__}")
    pipebench_to_pyarrow(pb, work)
    pyarrow_to_pipebench(pb, work)
    print(f"{'all checks passed' if failures == 0 else str(failures) + ' checks FAILED'}")
    return 0 if failures == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
