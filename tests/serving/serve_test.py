#!/usr/bin/env python3
"""`infer serve` on tiny-pycode-target (CPU): every error path (status and
OpenAI error body), 429 under a full queue, a client disconnecting
mid-stream (its KV blocks return), SIGTERM with requests in flight (all
finish, exit 0), texts equal to `infer generate`'s, and the chat page at /
(its headers, public under --api-key, 404 with --no-chat-page).

usage: serve_test.py --infer PATH --fixtures DIR --work DIR
"""
import argparse
import base64
import hashlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(__file__))
from serve_support import (SKIP, Server, check, compile_artifact,  # noqa: E402
                           run_tests)

CHAT_TEMPLATE = ("{% for m in messages %}{% if m.role == 'system' and not loop.first %}"
                 "{{ raise_exception('the system message must come first') }}{% endif %}"
                 "<|{{ m.role }}|>{{ m.content }}\n{% endfor %}"
                 "{% if add_generation_prompt %}<|assistant|>{% endif %}")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--infer", required=True)
    p.add_argument("--fixtures", required=True)
    p.add_argument("--work", required=True)
    a = p.parse_args()
    model_dir = os.path.join(a.fixtures, "models", "tiny-pycode-target")
    if not os.path.exists(os.path.join(model_dir, "config.json")):
        print("fixture missing: tiny-pycode-target; skipping")
        sys.exit(SKIP)
    os.makedirs(a.work, exist_ok=True)
    model = compile_artifact(a.infer, model_dir, os.path.join(a.work, "tiny"))
    template = os.path.join(a.work, "chat.jinja")
    with open(template, "w") as f:
        f.write(CHAT_TEMPLATE)

    def generate(prompt, max_tokens, temperature=0.0, seed=0):
        out = subprocess.run([a.infer, "generate", model, "--prompt", prompt,
                              "--max-new-tokens", str(max_tokens), "--temperature",
                              str(temperature), "--seed", str(seed), "--json"],
                             check=True, capture_output=True, text=True).stdout
        return json.loads(out.splitlines()[0])

    def error_of(status, body, expect_status, param=None, contains=None):
        check(status == expect_status, f"status {status} != {expect_status}: {body}")
        check(isinstance(body, dict) and "error" in body, f"no error object: {body}")
        e = body["error"]
        for key in ("message", "type", "param", "code"):
            check(key in e, f"error object lacks {key}: {e}")
        if param is not None:
            check(e["param"] == param, f"param {e['param']} != {param}: {e}")
        if contains is not None:
            check(contains in e["message"], f"'{contains}' not in {e['message']}")

    def test_error_paths():
        with Server(a.infer, model, "--chat-template", template, "--api-key", "sekret",
                    "--max-body-bytes", "16384", "--served-model-name", "tiny") as s:
            auth = {"Authorization": "Bearer sekret"}
            # 401: no key, a wrong key, a key of another length.
            for headers in ({}, {"Authorization": "Bearer sekreT"},
                            {"Authorization": "Bearer s"}):
                st, h, body = s.request("POST", "/v1/completions", {"prompt": "x"}, headers)
                error_of(st, body, 401)
                check(h.get("www-authenticate") == "Bearer", h)
            # /health and /metrics need no key.
            check(s.request("GET", "/health")[0] == 200, "health")
            check(s.request("GET", "/metrics")[0] == 200, "metrics")
            st, _, body = s.request("GET", "/v1/models", headers=auth)
            check(st == 200 and body["data"][0]["id"] == "tiny", body)
            # 400: malformed JSON, a non-object body, bad fields.
            error_of(*s.request("POST", "/v1/completions", raw="{bad", headers=auth)[::2], 400,
                     contains="not valid JSON")
            error_of(*s.request("POST", "/v1/completions", raw="[1]", headers=auth)[::2], 400)
            for field, value in (("temperature", "hot"), ("temperature", -1),
                                 ("max_tokens", 0), ("n", 0), ("top_p", 2),
                                 ("stop", 5), ("logprobs", 50), ("stream", "yes"),
                                 ("seed", 1.5), ("priority", "high"), ("echo", True)):
                st, _, body = s.request("POST", "/v1/completions",
                                        {"prompt": "x", field: value}, auth)
                error_of(st, body, 400, param=field)
            error_of(*s.request("POST", "/v1/completions", {"max_tokens": 3}, auth)[::2], 400,
                     param="prompt")
            error_of(*s.request("POST", "/v1/completions", {"prompt": [1, "a"]}, auth)[::2], 400,
                     param="prompt")
            error_of(*s.request("POST", "/v1/completions", {"prompt": [99999]}, auth)[::2], 400,
                     param="prompt", contains="outside the vocabulary")
            error_of(*s.request("POST", "/v1/completions",
                                {"prompt": "x", "stream_options": {"include_usage": True}},
                                auth)[::2], 400, param="stream_options")
            error_of(*s.request("POST", "/v1/chat/completions", {"messages": []}, auth)[::2],
                     400, param="messages")
            error_of(*s.request("POST", "/v1/chat/completions",
                                {"messages": [{"content": "no role"}]}, auth)[::2],
                     400, param="messages[0].role")
            # The template's own raise_exception is a 400 with its message.
            error_of(*s.request("POST", "/v1/chat/completions",
                                {"messages": [{"role": "user", "content": "a"},
                                              {"role": "system", "content": "b"}]},
                                auth)[::2], 400, param="messages",
                     contains="the system message must come first")
            # A prompt over the context.
            long_prompt = list(range(1, 2100))
            error_of(*s.request("POST", "/v1/completions", {"prompt": long_prompt}, auth)[::2],
                     400, param="prompt", contains="maximum context length")
            error_of(*s.request("POST", "/v1/completions",
                                {"prompt": "x", "max_tokens": 5000}, auth)[::2],
                     400, param="max_tokens", contains="maximum context length")
            # 404: an unknown model, an unknown path; 405: a wrong method.
            error_of(*s.request("POST", "/v1/completions", {"prompt": "x", "model": "gpt-4"},
                                auth)[::2], 404, param="model")
            error_of(*s.request("GET", "/v2/nothing", headers=auth)[::2], 404)
            error_of(*s.request("GET", "/v1/completions", headers=auth)[::2], 405)
            # 413: a body over --max-body-bytes.
            st, _, body = s.request("POST", "/v1/completions",
                                    {"prompt": "x" * 20000}, auth)
            error_of(st, body, 413)
            # The server still serves after all that.
            st, _, body = s.request("POST", "/v1/completions",
                                    {"prompt": "def", "max_tokens": 2}, auth)
            check(st == 200 and body["usage"]["completion_tokens"] == 2, body)
            # /tokenize and /detokenize round trip.
            st, _, body = s.request("POST", "/tokenize", {"prompt": "def fib(n):"}, auth)
            check(st == 200 and body["count"] == len(body["tokens"]), body)
            st, _, text = s.request("POST", "/detokenize", {"tokens": body["tokens"]}, auth)
            check(st == 200 and text["prompt"].endswith("def fib(n):"), text)
            error_of(*s.request("POST", "/detokenize", {"tokens": [-1]}, auth)[::2], 400,
                     param="tokens")
            m = s.metrics()
            check(m['infer:http_requests_total{model_name="tiny",status="401"}'] == 3, m)

    def test_texts_equal_generate():
        with Server(a.infer, model, "--chat-template", template) as s:
            for prompt, temperature, seed in (("def fib(n):", 0.0, 0), ("import os\n", 0.8, 7)):
                st, _, body = s.request("POST", "/v1/completions",
                                        {"prompt": prompt, "max_tokens": 24,
                                         "temperature": temperature, "seed": seed})
                check(st == 200, body)
                want = generate(prompt, 24, temperature, seed)
                check(body["choices"][0]["text"] == want["text"],
                      f"{body['choices'][0]['text']!r} != {want['text']!r}")
                # Streamed, the deltas add up to the same text.
                r = s.open_stream("/v1/completions", {"prompt": prompt, "max_tokens": 24,
                                                      "temperature": temperature,
                                                      "seed": seed, "stream": True})
                text = ""
                for data in r.events():
                    if data == "[DONE]":
                        break
                    text += json.loads(data)["choices"][0]["text"]
                r.close()
                check(text == want["text"], f"stream {text!r} != {want['text']!r}")

    def test_429_under_a_full_queue():
        with Server(a.infer, model, "--max-num-seqs", "1", "--max-queued-requests", "1") as s:
            body = {"prompt": "def", "max_tokens": 300, "ignore_eos": True, "stream": True}
            running = s.open_stream("/v1/completions", body)
            events = running.events()
            next(events)  # it runs
            queued = s.open_stream("/v1/completions", body)
            time.sleep(0.3)
            st, h, err = s.request("POST", "/v1/completions", {"prompt": "x", "max_tokens": 1})
            error_of(st, err, 429, contains="queue is full")
            check(h.get("retry-after", "").isdigit(), h)
            running.close()
            queued.close()

    def test_disconnect_mid_stream_returns_the_blocks():
        with Server(a.infer, model, "--served-model-name", "tiny") as s:
            r = s.open_stream("/v1/completions", {"prompt": "def", "max_tokens": 1000,
                                                  "ignore_eos": True, "stream": True})
            events = r.events()
            for _ in range(3):
                next(events)
            m = s.metrics()
            check(m['infer:kv_cache_usage_perc{model_name="tiny"}'] > 0, m)
            r.close()
            deadline = time.time() + 10
            while time.time() < deadline:
                m = s.metrics()
                if (m['infer:kv_cache_usage_perc{model_name="tiny"}'] == 0 and
                        m['infer:num_requests_running{model_name="tiny"}'] == 0):
                    break
                time.sleep(0.05)
            check(m['infer:kv_cache_usage_perc{model_name="tiny"}'] == 0, m)
            check(m['infer:request_success_total{model_name="tiny",finished_reason="abort"}']
                  == 1, m)
            # The same holds for a non-streaming request.
            import socket as socketlib
            c = socketlib.create_connection(("127.0.0.1", s.port))
            data = json.dumps({"prompt": "def", "max_tokens": 1000, "ignore_eos": True})
            c.sendall((f"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: "
                       f"{len(data)}\r\n\r\n{data}").encode())
            time.sleep(0.5)
            c.close()
            deadline = time.time() + 10
            while time.time() < deadline:
                m = s.metrics()
                if m['infer:request_success_total{model_name="tiny",finished_reason="abort"}'] == 2:
                    break
                time.sleep(0.05)
            check(m['infer:request_success_total{model_name="tiny",finished_reason="abort"}']
                  == 2, m)
            check(m['infer:kv_cache_usage_perc{model_name="tiny"}'] == 0, m)

    def test_sigterm_finishes_requests_in_flight():
        s = Server(a.infer, model, "--shutdown-timeout", "60")
        results = [None] * 3

        def client(i):
            r = s.open_stream("/v1/completions", {"prompt": "def", "max_tokens": 40,
                                                  "ignore_eos": True, "stream": True,
                                                  "seed": i, "temperature": 0.5})
            n, reason, done = 0, None, False
            for data in r.events():
                if data == "[DONE]":
                    done = True
                    break
                c = json.loads(data)["choices"][0]
                n += 1
                reason = c["finish_reason"] or reason
            results[i] = (done, reason)
            r.close()

        threads = [threading.Thread(target=client, args=(i,)) for i in range(3)]
        for t in threads:
            t.start()
        time.sleep(1.0)
        s.proc.send_signal(signal.SIGTERM)
        for t in threads:
            t.join(120)
        rc = s.proc.wait(60)
        check(rc == 0, f"exit status {rc}:\n{s.log()}")
        check(all(r == (True, "length") for r in results), results)
        check("SIGTERM" in s.log(), s.log())
        # SIGINT with nothing in flight exits 0 too.
        s2 = Server(a.infer, model)
        check(s2.stop(signal.SIGINT) == 0, s2.log())

    def test_bench_base_url():
        with Server(a.infer, model) as s:
            out = subprocess.run([a.infer, "bench", model, "--base-url",
                                  f"http://127.0.0.1:{s.port}/v1", "--input-len", "8",
                                  "--output-len", "6", "--num-prompts", "6",
                                  "--max-concurrency", "3", "--goodput", "ttft:60000",
                                  "--json"], check=True, capture_output=True, text=True)
            r = json.loads(out.stdout)
            check(r["completed"] == 6 and r["failed"] == 0, r)
            check(r["output_throughput"] > 0 and r["request_goodput"] > 0, r)
            check(r["ttft_ms"]["p50"] > 0 and r["tpot_ms"]["p50"] > 0, r)
            # Poisson arrivals, and a bad URL is a clear error.
            subprocess.run([a.infer, "bench", "--vocab-size", "4096", "--base-url",
                            f"http://127.0.0.1:{s.port}", "--input-len", "4",
                            "--output-len", "2", "--num-prompts", "3",
                            "--request-rate", "20"], check=True, capture_output=True)
            bad = subprocess.run([a.infer, "bench", "--vocab-size", "9", "--base-url",
                                  "ftp://x"], capture_output=True, text=True)
            check(bad.returncode == 1 and "http://" in bad.stderr, bad.stderr)

    def test_chat_page():
        with Server(a.infer, model, "--chat-template", template, "--api-key", "sekret") as s:
            # The page needs no key; the API behind it does.
            st, h, page = s.request("GET", "/")
            check(st == 200, f"GET / is {st}")
            check(h["content-type"] == "text/html; charset=utf-8", h)
            check(h["x-content-type-options"] == "nosniff", h)
            check(page.startswith("<!DOCTYPE html>") and "v1/chat/completions" in page,
                  page[:200])
            check(s.request("GET", "/v1/models")[0] == 401, "/v1/models without the key")
            # The policy allows the page's inline style and script by their
            # hashes (computed here independently of the build's), and nothing
            # else inline.
            csp = dict(d.strip().split(" ", 1) for d in h["content-security-policy"].split(";"))
            check(csp["default-src"] == "'self'", csp)
            check(csp["frame-ancestors"] == "'none'", csp)
            for tag, directive in (("style", "style-src"), ("script", "script-src")):
                inline = re.findall(f"<{tag}>(.*?)</{tag}>", page, re.S)
                check(len(inline) == 1, f"{len(inline)} <{tag}> elements")
                digest = base64.b64encode(hashlib.sha256(inline[0].encode()).digest()).decode()
                check(csp[directive] == f"'sha256-{digest}'", f"{directive}: {csp[directive]}")
            check("unsafe-inline" not in h["content-security-policy"], csp)
            # /index.html is the same page; HEAD gives the headers alone.
            st, _, same = s.request("GET", "/index.html")
            check(st == 200 and same == page, "/index.html")
            st, h, body = s.request("HEAD", "/")
            check(st == 200 and body == "", f"HEAD / {st} {body!r}")
            check(int(h["content-length"]) == len(page.encode()), h)
            check(h["content-security-policy"] and h["content-type"].startswith("text/html"), h)
            check(s.request("HEAD", "/health")[0] == 200, "HEAD /health")
            # Other methods: the usual 405.
            for method in ("POST", "PUT", "DELETE"):
                error_of(*s.request(method, "/", {})[::2], 405)
        with Server(a.infer, model, "--no-chat-page") as s:
            for method, path in (("GET", "/"), ("GET", "/index.html"), ("HEAD", "/")):
                st, _, body = s.request(method, path)
                check(st == 404, f"{method} {path} with --no-chat-page: {st}")
            check(s.request("GET", "/health")[0] == 200, "health")

    run_tests([test_error_paths, test_chat_page, test_bench_base_url, test_texts_equal_generate, test_429_under_a_full_queue,
               test_disconnect_mid_stream_returns_the_blocks,
               test_sigterm_finishes_requests_in_flight])


if __name__ == "__main__":
    main()
