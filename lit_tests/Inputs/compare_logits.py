#!/usr/bin/env python3
# ===- compare_logits.py - Max relative difference of two logits files --=== #
#
# Reads the fp32 tensor "logits" of two safetensors files (as `infer logits`
# writes them) and prints `max_rel_err=<value>`: max |a - b| / max |b|. Exits
# 1 when the shapes differ or the error exceeds --tolerance.
#
# ===-------------------------------------------------------------------=== #

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
    parser.add_argument("reference")
    parser.add_argument("--tolerance", type=float, default=1e-4)
    args = parser.parse_args()
    shape, actual = read_logits(args.actual)
    ref_shape, reference = read_logits(args.reference)
    if shape != ref_shape:
        sys.exit(f"shape {shape} differs from the reference's {ref_shape}")
    scale = max(abs(x) for x in reference)
    err = max(abs(a - b) for a, b in zip(actual, reference)) / scale
    print(f"max_rel_err={err:.3e}")
    if not err <= args.tolerance:
        sys.exit(f"max relative error {err:.3e} exceeds {args.tolerance:.0e}")


if __name__ == "__main__":
    main()
