#!/usr/bin/env python3
#===- make_corpus.py - Seed corpora of the fuzz harnesses -----------------===#
#
# Usage: make_corpus.py FIXTURES_DIR REPO_ROOT OUT_DIR
# Writes OUT_DIR/<harness>/<seed> for every harness of fuzz/CMakeLists.txt
# from the shared fixtures and the repository (lit inputs, fuzz/seeds, and
# the crashers of fuzz/regressions/<harness>/, kept as they were found). Each
# seed starts with the mode byte its harness reads first, where it has one.
# Large fixture files are cut down: libFuzzer's mutations work on inputs of
# a few KiB, and its -max_len defaults to the largest seed.
#
#===------------------------------------------------------------------------===#
import glob
import json
import os
import shutil
import struct
import sys

fixtures, repo, out = sys.argv[1:4]
# Seeds of an earlier configure that are no longer made must not linger.
shutil.rmtree(out, ignore_errors=True)


def put(harness, name, data):
    d = os.path.join(out, harness)
    os.makedirs(d, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def safetensors(tensors):
    header, blobs, offset = {}, b"", 0
    for name, dtype, shape, blob in tensors:
        header[name] = {"dtype": dtype, "shape": shape,
                        "data_offsets": [offset, offset + len(blob)]}
        blobs += blob
        offset += len(blob)
    text = json.dumps(header).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    return struct.pack("<Q", len(text)) + text + blobs


# safetensors: small files of each dtype, and each fixture's header.
put("infer-fuzz-safetensors", "f32", safetensors(
    [("w", "F32", [2, 3], struct.pack("<6f", *range(6)))]))
put("infer-fuzz-safetensors", "mixed", safetensors(
    [("a", "BF16", [4], b"\x80\x3f" * 4), ("b", "F16", [2, 1], b"\x00\x3c" * 2),
     ("c", "I64", [1], struct.pack("<q", 7))]))
for path in sorted(glob.glob(os.path.join(fixtures, "*/*/model.safetensors"))):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        f.seek(0)
        head = f.read(8 + min(n, 1 << 16))
    put("infer-fuzz-safetensors", "header-" + path.split("/")[-2], head)

# tokenizer: each fixture's pipeline with a small vocabulary (mode 0), and
# prompts for the fixture tokenizer (mode 1).
for path in sorted(glob.glob(os.path.join(fixtures, "tokenizers/*/tokenizer.json")) +
                   glob.glob(os.path.join(fixtures, "models/*/tokenizer.json"))):
    with open(path) as f:
        t = json.load(f)
    model = t.get("model", {})
    if isinstance(model.get("vocab"), dict):
        vocab = sorted(model["vocab"].items(), key=lambda kv: kv[1])[:300]
        model["vocab"] = dict(vocab)
        kept = set(model["vocab"])
        merges = []
        for m in model.get("merges", []):
            parts = m.split(" ") if isinstance(m, str) else m
            if len(parts) == 2 and all(p in kept for p in parts) and \
                    "".join(parts) in kept:
                merges.append(m)
        model["merges"] = merges[:200]
    t["added_tokens"] = t.get("added_tokens", [])[:8]
    put("infer-fuzz-tokenizer", "json-" + path.split("/")[-2],
        b"\x00" + json.dumps(t).encode())
golden = os.path.join(fixtures, "golden/tiny-pycode.json")
if os.path.exists(golden):
    with open(golden) as f:
        for i, case in enumerate(json.load(f)["tiny-pycode-target"]):
            put("infer-fuzz-tokenizer", "text-%d" % i,
                b"\x01" + case["prompt"].encode())
put("infer-fuzz-tokenizer", "text-bytes", b"\x01caf\xc3\xa9 \xff\xfe <s>\n\t x=1")

# plan.json and manifest.json (mode 0: plan, 1: manifest), and plans to run.
# Compact JSON: the readers see the same structure in a third of the bytes,
# and libFuzzer's mutations and -max_len follow the seeds' sizes. Plans to
# run are the one-layer cut only: every step op of the three-layer plan, at
# a third of the work per execution.
for path in sorted(glob.glob(os.path.join(repo, "fuzz/seeds/*.json"))):
    with open(path) as f:
        data = json.dumps(json.load(f), separators=(",", ":"),
                          sort_keys=True).encode()
    name = os.path.basename(path)
    mode = b"\x01" if "manifest" in name else b"\x00"
    put("infer-fuzz-plan", name, mode + data)
    if "1layer.plan" in name:
        put("infer-fuzz-cpu-plan", name, data)

# config.json (+ NUL + generation_config.json where the model has one).
for path in sorted(glob.glob(os.path.join(fixtures, "*/*/config.json")) +
                   glob.glob(os.path.join(repo, "tests/fixtures/*/config.json"))):
    with open(path, "rb") as f:
        data = f.read()
    gen = os.path.join(os.path.dirname(path), "generation_config.json")
    name = path.split("/")[-2]
    put("infer-fuzz-hf-config", name, b"\x00" + data)
    if os.path.exists(gen):
        with open(gen, "rb") as f:
            put("infer-fuzz-hf-config", name + "-gen", b"\x01" + data + b"\0" + f.read())

# IR: every case of the pass lit tests, under each pipeline byte.
case = 0
for path in sorted(glob.glob(os.path.join(repo, "lit_tests/passes/*.mlir"))):
    with open(path) as f:
        for chunk in f.read().split("// -----"):
            body = "\n".join(l for l in chunk.splitlines()
                             if not l.lstrip().startswith("//"))
            if "func.func" in body:
                put("infer-fuzz-infer-opt", "case-%d" % case,
                    bytes([case % 8]) + body.encode())
                case += 1

# Inputs that once crashed a harness: every run starts by replaying them.
for path in sorted(glob.glob(os.path.join(repo, "fuzz/regressions/*/*"))):
    with open(path, "rb") as f:
        put(path.split("/")[-2], "regression-" + os.path.basename(path), f.read())
