#!/usr/bin/env python3
"""Checks pipebench's OME-Arrow files with pyarrow (run where pyarrow is installed).

Usage: check_ome_arrow_pyarrow.py PATH [PATH ...]
  PATH: an ome-parquet file (any layout: planes, chunks, chunk-bytes) or an oa-dataset directory.
  Pixels are compared with PATH.npy when it exists (or PATH without its suffix + .npy): a numpy
  array of shape (N, T, C, Z, Y, X) holding the images pipebench wrote, in row order.

Prints each schema, then every type that differs from ome-arrow.md, checked strictly
(large_binary vs binary, list vs large_list, int16 fields, list item names reported apart).
Exit status: 0 all equal, 1 a type or pixel mismatch, 2 usage or read errors.
"""
import json
import os
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

STR = pa.string()
CHANNEL = pa.struct([("id", STR), ("name", STR), ("emission_um", pa.float32()),
                     ("excitation_um", pa.float32()), ("illumination", STR),
                     ("color_rgba", pa.uint32())])
PIXELS_META = pa.struct([
    ("dimension_order", STR), ("type", STR), ("size_x", pa.int32()), ("size_y", pa.int32()),
    ("size_z", pa.int32()), ("size_c", pa.int16()), ("size_t", pa.int32()),
    ("physical_size_x", pa.float32()), ("physical_size_y", pa.float32()),
    ("physical_size_z", pa.float32()), ("physical_size_x_unit", STR),
    ("physical_size_y_unit", STR), ("physical_size_z_unit", STR),
    ("channels", pa.list_(CHANNEL))])
CHUNK_GRID = pa.struct([("order", STR), ("chunk_t", pa.int32()), ("chunk_c", pa.int16()),
                        ("chunk_z", pa.int32()), ("chunk_y", pa.int32()), ("chunk_x", pa.int32()),
                        ("chunk_order", STR)])
BOX = [("t", pa.int32()), ("c", pa.int16()), ("z", pa.int32()), ("y", pa.int32()),
       ("x", pa.int32()), ("shape_z", pa.int32()), ("shape_y", pa.int32()),
       ("shape_x", pa.int32())]
PLANE = pa.struct([("z", pa.int32()), ("t", pa.int32()), ("c", pa.int16()),
                   ("pixels", pa.list_(pa.uint16()))])
CHUNK_NUM = pa.struct(BOX + [("pixels", pa.list_(pa.uint16()))])
CHUNK_BYTES = pa.struct(BOX + [("dtype", STR), ("compression", STR),
                               ("pixel_bytes", pa.large_binary())])


def ome_struct(chunk):
    return pa.struct([("type", STR), ("version", STR), ("id", STR), ("name", STR),
                      ("image_type", STR), ("acquisition_datetime", pa.timestamp("us")),
                      ("pixels_meta", PIXELS_META), ("chunk_grid", CHUNK_GRID),
                      ("chunks", pa.list_(chunk)), ("planes", pa.list_(PLANE)),
                      ("masks", pa.null())])


I32 = pa.int32()
IMAGES = [("image_id", STR), ("name", STR), ("image_type", STR), ("dtype", STR),
          ("size_t", I32), ("size_c", I32), ("size_z", I32), ("size_y", I32), ("size_x", I32),
          ("layout", STR), ("chunk_t", I32), ("chunk_c", I32), ("chunk_z", I32),
          ("chunk_y", I32), ("chunk_x", I32), ("compression", STR), ("channels_json", STR)]
CHUNKS = [("image_id", STR), ("chunk_id", pa.int64()), ("t", I32), ("c", I32), ("z", I32),
          ("y", I32), ("x", I32), ("shape_t", I32), ("shape_c", I32), ("shape_z", I32),
          ("shape_y", I32), ("shape_x", I32), ("dtype", STR), ("pixel_bytes", pa.large_binary())]
INDEX = [("image_id", STR), ("chunk_id", pa.int64()), ("row_group_id", I32),
         ("row_index_in_group", I32), ("fragment_path", STR), ("t", I32), ("c", I32),
         ("z", I32), ("y", I32), ("x", I32), ("shape_t", I32), ("shape_c", I32),
         ("shape_z", I32), ("shape_y", I32), ("shape_x", I32)]

problems = []


def compare(path, want, got):
    """Records strict type differences, walking nested types; list item names noted apart."""
    if want == got:
        return
    if pa.types.is_struct(want) and pa.types.is_struct(got):
        wn = [want.field(i).name for i in range(want.num_fields)]
        gn = [got.field(i).name for i in range(got.num_fields)]
        if wn != gn:
            problems.append(f"{path}: struct fields {gn} != {wn}")
        for i in range(min(want.num_fields, got.num_fields)):
            if want.field(i).name == got.field(i).name:
                compare(f"{path}.{want.field(i).name}", want.field(i).type, got.field(i).type)
        return
    if pa.types.is_list(want) and (pa.types.is_list(got) or pa.types.is_large_list(got)):
        if pa.types.is_large_list(got):
            problems.append(f"{path}: large_list, want list")
        if got.value_field.name != want.value_field.name:
            print(f"  note {path}: list item named '{got.value_field.name}' "
                  f"(Arrow default '{want.value_field.name}')")
        compare(path + "[]", want.value_type, got.value_type)
        return
    problems.append(f"{path}: {got} != {want}")


def npy_for(path):
    for cand in (path + ".npy", os.path.splitext(path.rstrip("/"))[0] + ".npy"):
        if os.path.exists(cand):
            return np.load(cand)
    return None


def decode(buf, codec, n_bytes):
    if codec in ("none", "", None):
        return buf
    # pyarrow's own codecs, so the check needs nothing beyond pyarrow and numpy.
    if codec == "zstd":
        return pa.Codec("zstd").decompress(buf, decompressed_size=n_bytes).to_pybytes()
    if codec == "lz4":
        # pipebench writes an LZ4 block after a 4-byte little-endian size prefix.
        return pa.Codec("lz4_raw").decompress(buf[4:], decompressed_size=n_bytes).to_pybytes()
    raise ValueError(f"unknown leaf compression {codec}")


def check_parquet(path):
    pf = pq.ParquetFile(path)
    schema = pf.schema_arrow
    print(f"== {path}\n{schema}")
    kv = pf.metadata.metadata or {}
    print("  key/value metadata:", sorted(k.decode() for k in kv))
    if b"ARROW:schema" not in kv:
        print("  note: no ARROW:schema key; types come from the Parquet schema")
    col = "ome_arrow" if "ome_arrow" in schema.names else schema.names[0]
    got = schema.field(col).type
    variant = "bytes" if "pixel_bytes" in str(got) else "numeric"
    compare(f"{path}:{col}", ome_struct(CHUNK_BYTES if variant == "bytes" else CHUNK_NUM), got)
    want = npy_for(path)
    if want is None:
        print("  (no .npy beside it: pixels not compared)")
        return
    rows = pf.read(columns=[col]).column(col).to_pylist()
    for i, row in enumerate(rows):
        pm = row["pixels_meta"]
        shape = (pm["size_t"], pm["size_c"], pm["size_z"], pm["size_y"], pm["size_x"])
        dtype = np.dtype({"float": "float32", "double": "float64"}.get(pm["type"], pm["type"]))
        img = np.zeros(shape, dtype)
        if row["planes"]:
            for p in row["planes"]:
                img[p["t"], p["c"], p["z"]] = np.asarray(p["pixels"], dtype).reshape(shape[3:])
        for ch in row["chunks"] or []:
            sz, sy, sx = ch["shape_z"], ch["shape_y"], ch["shape_x"]
            if "pixel_bytes" in ch:
                raw = decode(ch["pixel_bytes"], ch.get("compression"),
                             sz * sy * sx * dtype.itemsize)
                box = np.frombuffer(raw, dtype).reshape(sz, sy, sx)
            else:  # numeric chunks (the default layout)
                box = np.asarray(ch["pixels"], dtype).reshape(sz, sy, sx)
            img[ch["t"], ch["c"], ch["z"]:ch["z"] + sz, ch["y"]:ch["y"] + sy,
                ch["x"]:ch["x"] + sx] = box
        if not np.array_equal(img, want[i]):
            problems.append(f"{path}: image {i} pixels differ from the .npy")
    print(f"  pixels of {len(rows)} images compared")


def check_dataset(path):
    man = json.load(open(os.path.join(path, "_ome_arrow_dataset.json")))
    print(f"== {path}\nmanifest: {json.dumps(man)}")
    for name, fields in (("images", IMAGES), ("chunks", CHUNKS), ("index", INDEX)):
        pf = pq.ParquetFile(os.path.join(path, name + ".parquet"))
        schema = pf.schema_arrow
        print(f"-- {name}.parquet\n{schema}")
        kv = {k.decode(): v.decode(errors="replace") for k, v in (pf.metadata.metadata or {}).items()}
        if kv.get("ome.arrow.layout") != "typed-chunk-dataset":
            problems.append(f"{name}.parquet: ome.arrow.layout metadata missing")
        for fname, ftype in fields:
            if fname not in schema.names:
                problems.append(f"{name}.parquet: no column {fname}")
            else:
                compare(f"{name}.parquet:{fname}", ftype, schema.field(fname).type)
        if name == "chunks":
            groups = pf.metadata.num_row_groups
            print(f"  {groups} row groups for {pf.metadata.num_rows} chunks")
    want = npy_for(path)
    if want is None:
        print("  (no .npy beside it: pixels not compared)")
        return
    images = pq.read_table(os.path.join(path, "images.parquet")).to_pylist()
    chunks = pq.read_table(os.path.join(path, "chunks.parquet")).to_pylist()
    by_id = {}
    for c in chunks:
        by_id.setdefault(c["image_id"], []).append(c)
    for i, im in enumerate(images):
        shape = tuple(im[k] for k in ("size_t", "size_c", "size_z", "size_y", "size_x"))
        dtype = np.dtype(im["dtype"])
        img = np.zeros(shape, dtype)
        for c in by_id.get(im["image_id"], []):
            o = [c[k] for k in "tczyx"]
            s = [c["shape_" + k] for k in "tczyx"]
            img[tuple(slice(a, a + b) for a, b in zip(o, s))] = \
                np.frombuffer(c["pixel_bytes"], dtype).reshape(s)
        if not np.array_equal(img, want[i]):
            problems.append(f"{path}: image {i} pixels differ from the .npy")
    print(f"  pixels of {len(images)} images compared")


def main(argv):
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    print("pyarrow", pa.__version__)
    for path in argv[1:]:
        try:
            if os.path.isdir(path):
                check_dataset(path)
            else:
                check_parquet(path)
        except Exception as e:  # report and go on with the next path
            print(f"ERROR {path}: {type(e).__name__}: {e}", file=sys.stderr)
            return 2
    for p in problems:
        print("MISMATCH", p)
    print("all types and pixels match" if not problems else f"{len(problems)} mismatches")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
