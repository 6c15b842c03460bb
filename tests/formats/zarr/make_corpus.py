"""Regenerates the seed corpus of the ome-zarr fuzz targets (tests/formats/zarr/corpus/).

Run with /usr/bin/python3 (numcodecs for the blosc and zstd seeds). Chunk seeds start with a
selector byte (which codec setup fuzz_zarr_chunk.c uses) and a flag byte; see that file.
"""
import gzip
import json
import os
import sys
import zlib

import numpy as np
from numcodecs import Blosc, Zstd

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from zarr_interop import crc32c  # noqa: E402

HERE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")


def put(sub, name, data):
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(HERE, sub, name), "wb") as f:
        f.write(data)


def meta():
    zarray = {"zarr_format": 2, "shape": [1, 2, 3, 40, 50], "chunks": [1, 1, 2, 16, 16],
              "dtype": "<u2", "compressor": {"id": "blosc", "cname": "lz4", "clevel": 5,
                                             "shuffle": 1, "blocksize": 0},
              "fill_value": 0, "order": "C", "filters": None, "dimension_separator": "/"}
    put("meta", "zarray_v2.json", json.dumps(zarray))
    z2 = dict(zarray, dtype=">f4", fill_value="NaN", compressor={"id": "zstd", "level": 3})
    put("meta", "zarray_v2_f4_nan.json", json.dumps(z2))
    little = {"name": "bytes", "configuration": {"endian": "little"}}
    v3 = {"zarr_format": 3, "node_type": "array", "shape": [2, 30, 35], "data_type": "uint16",
          "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [2, 16, 16]}},
          "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
          "fill_value": 0, "dimension_names": ["z", "y", "x"],
          "codecs": [{"name": "sharding_indexed", "configuration": {
              "chunk_shape": [1, 8, 8],
              "codecs": [little, {"name": "blosc", "configuration": {
                  "cname": "zstd", "clevel": 3, "shuffle": "bitshuffle", "typesize": 2}}],
              "index_codecs": [little, {"name": "crc32c"}], "index_location": "start"}}],
          "attributes": {}}
    put("meta", "zarr_v3_sharded.json", json.dumps(v3))
    axes = [{"name": a, "type": t, **({"unit": "micrometer"} if t == "space" else {})}
            for a, t in zip("tczyx", ["time", "channel", "space", "space", "space"])]
    ms = {"version": "0.4", "axes": axes, "datasets": [
        {"path": "0", "coordinateTransformations": [{"type": "scale", "scale": [1, 1, 2, .5, .5]}]}]}
    put("meta", "zattrs_ngff04.json", json.dumps(
        {"multiscales": [ms], "omero": {"channels": [{"label": "DAPI", "color": "0000FF"}]}}))
    ms5 = dict(ms)
    del ms5["version"]
    put("meta", "group_ngff05.json", json.dumps(
        {"zarr_format": 3, "node_type": "group",
         "attributes": {"ome": {"version": "0.5", "multiscales": [ms5]}}}))
    # a grid of 4e8 missing 1x1 chunks: refused by its count (pb__zarr_check_grid)
    put("meta", "bad_grid_4e8.json", json.dumps(
        {"zarr_format": 2, "shape": [1, 1, 1, 20000, 20000], "chunks": [1, 1, 1, 1, 1],
         "dtype": "<u2", "compressor": None, "fill_value": 0, "order": "C", "filters": None,
         "dimension_separator": "/"}, separators=(",", ":")))
    put("meta", "bad_truncated.json", json.dumps(zarray)[:57])
    put("meta", "bad_types.json", '{"zarr_format":"2","shape":{"a":1},"chunks":[0],"dtype":7}')
    put("meta", "bad_nesting.json", "[" * 300 + "]" * 300)
    put("meta", "bad_numbers.json",
        '{"zarr_format":3,"node_type":"array","shape":[1e300,-1,0.5],"data_type":"uint8"}')


def chunk():
    data = (np.arange(256, dtype="<u2") * 37 % 1000).astype("<u2")
    raw = data.tobytes()
    put("chunk", "blosc_lz4.bin", b"\x00\x00" + Blosc("lz4", 5, Blosc.SHUFFLE).encode(data))
    put("chunk", "blosc_zstd_bit.bin", b"\x00\x00" + Blosc("zstd", 3, Blosc.BITSHUFFLE).encode(data))
    put("chunk", "zstd.bin", b"\x01\x00" + Zstd(level=3).encode(data))
    put("chunk", "gzip.bin", b"\x02\x00" + gzip.compress(raw, mtime=0))
    put("chunk", "zlib_bigendian.bin", b"\x03\x01" + zlib.compress(data.astype(">u2").tobytes()))
    put("chunk", "crc32c.bin", b"\x04\x00" + raw + crc32c(raw).to_bytes(4, "little"))
    # shard of 2x2 inner 8x8 chunks, raw inner codec, index at the end with crc32c
    img = data.reshape(16, 16)
    blobs = [np.ascontiguousarray(img[y:y + 8, x:x + 8]).tobytes() for y in (0, 8) for x in (0, 8)]
    index, off = b"", 0
    for b in blobs:
        index += off.to_bytes(8, "little") + len(b).to_bytes(8, "little")
        off += len(b)
    index += crc32c(index).to_bytes(4, "little")
    put("chunk", "shard_end.bin", b"\x05\x06" + b"".join(blobs) + index)
    zblobs = [Zstd(level=1).encode(np.frombuffer(b, "<u2")) for b in blobs]
    zblobs[2] = None
    index, off = b"", 0
    for b in zblobs:
        if b is None:
            index += b"\xff" * 16
            continue
        index += off.to_bytes(8, "little") + len(b).to_bytes(8, "little")
        off += len(b)
    put("chunk", "shard_start_zstd.bin", b"\x06\x00" + index + b"".join(b for b in zblobs if b))
    put("chunk", "bad_blosc_header.bin", b"\x00\x00\x02\x01\x21\x02\x00\x02\x00\x00\xff\xff\xff\x7f")
    put("chunk", "bad_shard_index.bin", b"\x05\x04" + b"\x00" * 40 + b"\xff" * 60)


if __name__ == "__main__":
    meta()
    chunk()
