#!/usr/bin/env python3
# ===- compare_logits.py - max relative difference of two logits files ---=== #
#
# Reads the `logits` tensor (f32) of two safetensors files written by
# `infer logits` and fails unless max |a - b| / max |b| <= --tolerance.
# Prints the measured error for people reading the test log.
#
# ===---------------------------------------------------------------------=== #

import argparse
import json
import struct
import sys


def read_logits(path):
    with open(path, "rb") as f:
        (header_len,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(header_len))
        info = header["logits"]
        if info["dtype"] != "F32":
            sys.exit(f"{path}: logits are {info['dtype']}, expected F32")
        begin, end = info["data_offsets"]
        f.seek(8 + header_len + begin)
        data = f.read(end - begin)
    return info["shape"], struct.unpack(f"<{len(data) // 4}f", data)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("actual")
    parser.add_argument("expected")
    parser.add_argument("--tolerance", type=float, default=1e-5)
    args = parser.parse_args()
    shape_a, a = read_logits(args.actual)
    shape_b, b = read_logits(args.expected)
    if shape_a != shape_b:
        sys.exit(f"shapes differ: {shape_a} vs {shape_b}")
    scale = max(abs(x) for x in b)
    error = max(abs(x - y) for x, y in zip(a, b)) / scale
    print(f"max rel err {error:.3e} over {shape_a}")
    if not error <= args.tolerance:
        sys.exit(f"max rel err {error:.3e} > tolerance {args.tolerance:.1e}")


if __name__ == "__main__":
    main()
