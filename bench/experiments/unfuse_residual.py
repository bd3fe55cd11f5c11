#!/usr/bin/env python3
"""Rewrites an artifact's plan so that the residual adds run in add_rms_norm.

The experiment behind bench/RESULTS.md's "residual in the norm" rows: every
`linear_residual(a, w, res) -> h` that is read next by `rms_norm(h, g) -> n`
becomes

    linear(a, w) -> o                  (a new bf16 activation)
    add_rms_norm(res, o, g) -> h, n

which is the plan `infer-fuse` made before infer-fuse-residual existed. The
rest of the plan (and every other step) is left as it is. The new activation
takes a fresh region at the end of each row's workspace; an activation that
then shares bytes with another live at the same step (the norm's result
reused the residual's memory once the GEMM had read it) moves to the lowest
offset where it shares none.

usage: unfuse_residual.py SRC_ARTIFACT DST_ARTIFACT
"""
import json
import os
import shutil
import sys

ELEMENT_BYTES = {"f32": 4, "bf16": 2, "f16": 2}


def row_bytes(value):
    cols = 1
    for dim in value["shape"][1:]:
        cols *= dim
    return cols * ELEMENT_BYTES[value["dtype"]]


def region(value):
    start = value["workspace_offset"]
    return start, start + row_bytes(value)


def overlaps(a, b):
    return a[0] < b[1] and b[0] < a[1]


def replace(rank, values, size):
    """Moves each activation that shares bytes with another live at the same
    step (as the plan verifier defines it: from the defining step to the last
    use) to the lowest offset where it shares none; returns the row size."""
    first, last = {}, {}
    for i, step in enumerate(rank["steps"]):
        for vid in step["operands"]:
            last[vid] = i
        for vid in step["results"]:
            first[vid] = last[vid] = i
    placed = [v for v in rank["values"]
              if "workspace_offset" in v and v["id"] in first]
    placed.sort(key=lambda v: first[v["id"]])

    def live_together(a, b):
        return first[a["id"]] <= last[b["id"]] and first[b["id"]] <= last[a["id"]]

    settled = []
    moved = 0
    for v in placed:
        clashes = [u for u in settled if live_together(u, v)]
        if any(overlaps(region(u), region(v)) for u in clashes):
            offset = 0
            while True:
                candidate = (offset, offset + row_bytes(v))
                hit = [u for u in clashes if overlaps(region(u), candidate)]
                if not hit:
                    break
                offset = max(region(u)[1] for u in hit)
            v["workspace_offset"] = offset
            moved += 1
        settled.append(v)
        size = max(size, region(v)[1])
    print("moved %d activations" % moved)
    return size


def rewrite(rank):
    values = {v["id"]: v for v in rank["values"]}
    next_id = max(values) + 1
    steps = rank["steps"]
    out = []
    rewritten = 0
    # The products share one region at the end of each row's workspace (one
    # is live at a time).
    scratch = rank["workspace_bytes_per_row"]
    hidden = max((row_bytes(values[s["results"][0]]) for s in steps
                  if s["op"] == "linear_residual"), default=0)
    i = 0
    while i < len(steps):
        step = steps[i]
        following = steps[i + 1] if i + 1 < len(steps) else None
        if (step["op"] == "linear_residual" and len(step["operands"]) == 3
                and following is not None and following["op"] == "rms_norm"
                and following["operands"][0] == step["results"][0]
                and "head_dim" not in following["attrs"]):
            a, w, res = step["operands"]
            h = step["results"][0]
            g = following["operands"][1]
            n = following["results"][0]
            product = dict(values[h])
            product["id"] = next_id
            product["name"] = "%%unfused%d" % next_id
            product["workspace_offset"] = scratch
            rank["values"].append(product)
            values[next_id] = product
            # An output that shares memory with an input of the add_rms_norm
            # where the kernel does not allow it moves to a region of its own
            # past everything else.
            out.append({"attrs": {}, "op": "linear", "operands": [a, w],
                        "results": [next_id]})
            out.append({"attrs": dict(following["attrs"]), "op": "add_rms_norm",
                        "operands": [res, next_id, g], "results": [h, n]})
            next_id += 1
            rewritten += 1
            i += 2
            continue
        out.append(step)
        i += 1
    rank["steps"] = out
    if rewritten:
        rank["workspace_bytes_per_row"] = replace(rank, values, scratch + hidden)
    return rewritten


def main():
    if len(sys.argv) != 3:
        raise SystemExit(__doc__)
    src, dst = sys.argv[1:]
    if os.path.exists(dst):
        shutil.rmtree(dst)
    shutil.copytree(src, dst)
    with open(os.path.join(src, "plan.json")) as f:
        plan = json.load(f)
    counts = [rewrite(rank) for rank in plan["ranks"]]
    with open(os.path.join(dst, "plan.json"), "w") as f:
        json.dump(plan, f, indent=1, sort_keys=True)
    print("rewrote %s residual adds (per rank) into add_rms_norm" % counts)


if __name__ == "__main__":
    main()
