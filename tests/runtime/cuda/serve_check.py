#!/usr/bin/env python3
"""`infer serve` on the GPU, end to end (gpu_check.sh runs it; stdlib only).

Starts the server on cuda and on cpu for one artifact, sends the same
concurrent greedy completions to each (one streamed request disconnects
after its first event), and checks: every request answers 200 with its
max_tokens (ignore_eos), the server stays healthy after the disconnect, and
/metrics counts the steps (and, on cuda, the device's idle time). The cuda
server's texts are compared with the cpu server's, as the CLI check compares
tokens. Exits non-zero on a failed check.

usage: serve_check.py INFER ARTIFACT WEIGHTS OUTDIR
"""
import http.client
import json
import os
import socket
import subprocess
import sys
import threading
import time

INFER, ART, WEIGHTS, OUT = sys.argv[1:5]
PROMPTS = ["def fib(n):", "import os\n", "class Stack:", "for i in range(",
           "# sort a list", "def add(a, b):", "while True:", "x = [1, 2, 3]"]
MAX_TOKENS = 24


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def request(port, method, path, body=None, timeout=120):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    conn.request(method, path, json.dumps(body) if body is not None else None,
                 {"Content-Type": "application/json"})
    resp = conn.getresponse()
    data = resp.read()
    conn.close()
    return resp.status, data


def serve(backend):
    port = free_port()
    log = open(os.path.join(OUT, f"serve-{backend}.log"), "w")
    proc = subprocess.Popen([INFER, "serve", ART, "--weights", WEIGHTS,
                             "--backend", backend, "--port", str(port),
                             "--served-model-name", "m"],
                            stdout=log, stderr=subprocess.STDOUT)
    failures = []
    try:
        for _ in range(600):
            try:
                if request(port, "GET", "/health", timeout=2)[0] == 200:
                    break
            except OSError:
                pass
            if proc.poll() is not None:
                return None, [f"{backend}: the server exited ({proc.returncode})"]
            time.sleep(0.1)
        else:
            return None, [f"{backend}: no /health within 60 s"]
        texts = [None] * len(PROMPTS)

        def complete(i):
            status, data = request(port, "POST", "/v1/completions", {
                "model": "m", "prompt": PROMPTS[i], "max_tokens": MAX_TOKENS,
                "temperature": 0, "ignore_eos": True})
            if status != 200:
                failures.append(f"{backend}: request {i}: HTTP {status} {data[:200]}")
                return
            body = json.loads(data)
            if body["usage"]["completion_tokens"] != MAX_TOKENS:
                failures.append(f"{backend}: request {i}: {body['usage']}")
            texts[i] = body["choices"][0]["text"]

        def disconnect():
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
            conn.request("POST", "/v1/completions", json.dumps({
                "model": "m", "prompt": "def main():", "max_tokens": 400,
                "temperature": 0, "ignore_eos": True, "stream": True}),
                {"Content-Type": "application/json"})
            resp = conn.getresponse()
            resp.fp.readline()  # the first event, then hang up mid-stream
            conn.sock.shutdown(socket.SHUT_RDWR)
            conn.close()

        threads = [threading.Thread(target=complete, args=(i,))
                   for i in range(len(PROMPTS))]
        threads.append(threading.Thread(target=disconnect))
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        time.sleep(0.5)
        if request(port, "GET", "/health")[0] != 200:
            failures.append(f"{backend}: unhealthy after a client disconnected")
        complete(0)  # the engine still serves
        status, metrics = request(port, "GET", "/metrics")
        text = metrics.decode()
        steps = [l for l in text.splitlines()
                 if l.startswith("infer:engine_steps_total")]
        if status != 200 or not steps or float(steps[0].split()[-1]) <= 0:
            failures.append(f"{backend}: /metrics has no engine steps")
        idle = [l for l in text.splitlines()
                if l.startswith("infer:device_idle_seconds_total")]
        if (backend == "cuda") != bool(idle):
            failures.append(f"{backend}: device_idle_seconds_total {idle}")
        print(f"serve {backend}: {len(PROMPTS) + 1} completions, 1 disconnect; "
              f"{steps[0] if steps else ''} {idle[0] if idle else ''}".strip())
        return texts, failures
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            failures.append(f"{backend}: no clean exit on SIGTERM")


# BACKENDS="cpu" runs the cpu half alone (a machine without a GPU).
backends = os.environ.get("BACKENDS", "cuda cpu").split()
results, failures = {}, []
for b in backends:
    results[b], f = serve(b)
    failures += f
cuda_texts, cpu_texts = results.get("cuda"), results.get("cpu")
if cuda_texts is not None and cpu_texts is not None:
    same = sum(a == b for a, b in zip(cuda_texts, cpu_texts))
    print(f"serve: {same} of {len(PROMPTS)} cuda texts == cpu texts")
for f in failures:
    print("serve: FAILED", f)
sys.exit(1 if failures else 0)
