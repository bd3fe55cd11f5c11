#!/usr/bin/env python3
"""Writes a small, zero-filled copy of a safetensors file with edits.

Keeps every tensor name, dtype and shape of SRC except for the edits, so a
test can make a checkpoint that is wrong in exactly one way:

  rewrite_safetensors.py SRC DST [--drop NAME] [--shape NAME=D0,D1]
                                 [--dtype NAME=I32]

Only the standard library: struct + json.
"""

import argparse
import json
import struct

DTYPE_SIZES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4,
               "I16": 2, "I8": 1, "U8": 1, "BOOL": 1}


def read_header(path):
    with open(path, "rb") as f:
        (size,) = struct.unpack("<Q", f.read(8))
        return json.loads(f.read(size))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("src")
    parser.add_argument("dst")
    parser.add_argument("--drop", action="append", default=[])
    parser.add_argument("--shape", action="append", default=[])
    parser.add_argument("--dtype", action="append", default=[])
    args = parser.parse_args()

    header = read_header(args.src)
    metadata = header.pop("__metadata__", None)
    for name in args.drop:
        del header[name]
    for edit in args.shape:
        name, dims = edit.split("=")
        header[name]["shape"] = [int(d) for d in dims.split(",")]
    for edit in args.dtype:
        name, dtype = edit.split("=")
        header[name]["dtype"] = dtype

    offset = 0
    for name in sorted(header):
        info = header[name]
        count = 1
        for d in info["shape"]:
            count *= d
        nbytes = count * DTYPE_SIZES[info["dtype"]]
        info["data_offsets"] = [offset, offset + nbytes]
        offset += nbytes
    if metadata is not None:
        header["__metadata__"] = metadata

    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(args.dst, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        f.write(bytes(offset))


if __name__ == "__main__":
    main()
