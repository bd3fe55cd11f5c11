#!/usr/bin/env python3
"""A bounded load test of `infer serve` (CPU, tiny-pycode-target): 256
concurrent streaming clients while 1,000 idle connections stay open. Every
request must finish with exactly the text (and token count) its prompt gets
alone, none lost; prints p50/p99 time to first token.

usage: load_test.py --infer PATH --fixtures DIR --work DIR
       [--clients 256] [--idle 1000] [--max-tokens 8]
"""
import argparse
import asyncio
import json
import os
import resource
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
from serve_support import SKIP, Server, check, compile_artifact  # noqa: E402

PROMPTS = ["def fib(n):", "import os\n", "class Node:", "for i in range(",
           "def main():\n    ", "return x +", "# Sort a list\n", "while True:"]


def quantile(values, q):
    values = sorted(values)
    pos = q * (len(values) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(values) - 1)
    return values[lo] + (values[hi] - values[lo]) * (pos - lo)


async def stream_request(port, body):
    """(ttft seconds, text, completion tokens) of one streamed completion."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    data = json.dumps(body).encode()
    start = time.perf_counter()
    writer.write(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: "
                 b"application/json\r\nContent-Length: " + str(len(data)).encode() +
                 b"\r\n\r\n" + data)
    await writer.drain()
    head = await reader.readuntil(b"\r\n\r\n")
    check(b" 200 " in head.split(b"\r\n")[0], head)
    ttft, text, tokens, done = None, "", None, False
    pending = b""
    while not done:
        size = int((await reader.readuntil(b"\r\n")).strip(), 16)
        chunk = await reader.readexactly(size + 2)
        if size == 0:
            break
        pending += chunk[:-2]
        while b"\n\n" in pending:
            event, pending = pending.split(b"\n\n", 1)
            if not event.startswith(b"data: "):
                continue
            payload = event[6:]
            if payload == b"[DONE]":
                done = True
                break
            j = json.loads(payload)
            if j["choices"]:
                if ttft is None and j["choices"][0]["text"]:
                    ttft = time.perf_counter() - start
                text += j["choices"][0]["text"]
            if j.get("usage"):
                tokens = j["usage"]["completion_tokens"]
    writer.close()
    return ttft, text, tokens, done


async def load(port, clients, idle, max_tokens, expected):
    idle_conns = []
    for _ in range(idle):
        idle_conns.append(await asyncio.open_connection("127.0.0.1", port))
    bodies = [{"prompt": PROMPTS[i % len(PROMPTS)], "max_tokens": max_tokens,
               "temperature": 0, "ignore_eos": True, "stream": True,
               "stream_options": {"include_usage": True}} for i in range(clients)]
    start = time.perf_counter()
    results = await asyncio.gather(*(stream_request(port, b) for b in bodies))
    duration = time.perf_counter() - start
    # The idle connections are still open and still served.
    alive = 0
    for reader, writer in idle_conns[:: max(1, idle // 20)]:
        writer.write(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        await writer.drain()
        line = await reader.readline()
        alive += b" 200 " in line
    for _, writer in idle_conns:
        writer.close()
    return results, duration, alive, len(idle_conns[:: max(1, idle // 20)])


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--infer", required=True)
    p.add_argument("--fixtures", required=True)
    p.add_argument("--work", required=True)
    p.add_argument("--clients", type=int, default=256)
    p.add_argument("--idle", type=int, default=1000)
    p.add_argument("--max-tokens", type=int, default=8)
    a = p.parse_args()
    model_dir = os.path.join(a.fixtures, "models", "tiny-pycode-target")
    if not os.path.exists(os.path.join(model_dir, "config.json")):
        print("fixture missing: tiny-pycode-target; skipping")
        sys.exit(SKIP)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = 2 * (a.clients + a.idle) + 256
    if soft < need:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(need, hard), hard))
    if resource.getrlimit(resource.RLIMIT_NOFILE)[0] < need:
        print(f"the descriptor limit ({hard}) is below {need}; skipping")
        sys.exit(SKIP)
    os.makedirs(a.work, exist_ok=True)
    model = compile_artifact(a.infer, model_dir, os.path.join(a.work, "tiny"))
    with Server(a.infer, model, "--max-num-seqs", str(a.clients), "--num-blocks", "2048",
                "--request-timeout", "600", "--http-threads", "2") as s:
        expected = {}
        for prompt in PROMPTS:
            st, _, body = s.request("POST", "/v1/completions",
                                    {"prompt": prompt, "max_tokens": a.max_tokens,
                                     "temperature": 0, "ignore_eos": True})
            check(st == 200, body)
            expected[prompt] = (body["choices"][0]["text"], body["usage"]["completion_tokens"])
        results, duration, alive, probed = asyncio.run(
            load(s.port, a.clients, a.idle, a.max_tokens, expected))
        lost = 0
        for i, (ttft, text, tokens, done) in enumerate(results):
            want = expected[PROMPTS[i % len(PROMPTS)]]
            if not done or ttft is None:
                lost += 1
                continue
            check((text, tokens) == want,
                  f"request {i}: {(text, tokens)!r} != alone {want!r}")
        check(lost == 0, f"{lost} of {a.clients} requests lost")
        check(alive == probed, f"only {alive} of {probed} idle connections answered")
        ttfts = [r[0] for r in results]
        m = s.metrics()
        print(f"{a.clients} streaming clients, {a.idle} idle connections: all "
              f"{a.clients} requests complete with their solo text in {duration:.2f} s; "
              f"TTFT p50 {quantile(ttfts, 0.5) * 1e3:.0f} ms, "
              f"p99 {quantile(ttfts, 0.99) * 1e3:.0f} ms; "
              f"{a.clients * a.max_tokens / duration:.0f} output tok/s")
        check(s.stop() == 0, s.log())
        check(m["infer:generation_tokens_total{model_name=\"%s\"}" % "tiny"]
              == (a.clients + len(PROMPTS)) * a.max_tokens, m)


if __name__ == "__main__":
    main()
