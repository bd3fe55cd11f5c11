#!/usr/bin/env python3
#===- make_corpus.py - Seed corpora of the fuzz harnesses -----------------===#
#
# Usage: make_corpus.py FIXTURES_DIR REPO_ROOT OUT_DIR
# Writes OUT_DIR/<harness>/<seed> for every harness of fuzz/CMakeLists.txt
# from the shared fixtures (safetensors headers, tokenizers, configs, chat
# templates and their goldens) and the repository (lit inputs, the request
# bodies of tests/serving/serve_test.py, fuzz/seeds, and the crashers of
# fuzz/regressions/<harness>/, kept as they were found). Each
# seed starts with the mode byte its harness reads first, where it has one.
# Large fixture files are cut down: libFuzzer's mutations work on inputs of
# a few KiB, and its -max_len defaults to the largest seed.
#
#===------------------------------------------------------------------------===#
import ast
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

# OpenAI request bodies: a mode byte (bits 0-1: completions, chat
# completions, tokenize, detokenize; bits 2-3 clear: the model with its
# limits, tokenizer and chat template), then the body. The bodies of
# tests/serving/serve_test.py's requests that are literals, one per field its
# 400 loop sends, the fixtures' chat goldens, and bodies that set every field.
def compact(value):
    return json.dumps(value, separators=(",", ":"))


ENDPOINTS = {"/v1/completions": 0, "/v1/chat/completions": 1, "/tokenize": 2,
             "/detokenize": 3}
bodies = []
serve_test = os.path.join(repo, "tests/serving/serve_test.py")
for node in ast.walk(ast.parse(open(serve_test).read())):
    if isinstance(node, ast.Call):
        paths = [a.value for a in node.args if isinstance(a, ast.Constant) and
                 a.value in ENDPOINTS]
        raws = [k.value.value for k in node.keywords
                if k.arg == "raw" and isinstance(k.value, ast.Constant)]
        for a in node.args:
            if paths and isinstance(a, ast.Dict):
                try:
                    bodies.append((paths[0], compact(ast.literal_eval(a))))
                except ValueError:
                    pass
        if paths and raws:
            bodies.append((paths[0], raws[0]))
    elif isinstance(node, ast.For) and ast.unparse(node.target) == \
            "(field, value)":
        # for field, value in (("temperature", "hot"), ...): each bad field.
        try:
            pairs = ast.literal_eval(node.iter)
        except ValueError:
            continue
        for field, value in pairs:
            bodies.append(("/v1/completions",
                           compact({"prompt": "x", field: value})))
sampling = {"temperature": 0.7, "top_p": 0.9, "top_k": 40, "min_p": 0.05,
            "presence_penalty": 0.5, "frequency_penalty": -0.5,
            "repetition_penalty": 1.1, "n": 2, "best_of": 2, "seed": 7,
            "ignore_eos": False, "stop": ["\n\n", "def "],
            "stop_token_ids": [2, 3], "priority": -3, "stream": True,
            "stream_options": {"include_usage": True,
                               "continuous_usage_stats": True},
            "model": "tiny"}
bodies.append(("/v1/completions", compact(dict(
    sampling, prompt=["def f(x):", [5, 6, 7]], max_tokens=8, logprobs=3))))
bodies.append(("/v1/completions", compact(
    {"prompt": [[1, 2, 3], [4095, 0]], "max_tokens": 2044, "echo": False,
     "suffix": None})))
bodies.append(("/v1/completions", compact(dict(
    sampling, prompt=[1, 300, 4095], max_tokens=2045))))
golden = os.path.join(fixtures, "golden/tokenizers.json")
if os.path.exists(golden):
    with open(golden) as f:
        for name, entry in sorted(json.load(f).items()):
            if "chat" not in entry:
                continue
            messages = entry["chat"]["messages"]
            bodies.append(("/v1/chat/completions", compact(dict(
                sampling, messages=messages, max_completion_tokens=16,
                logprobs=True, top_logprobs=5, add_generation_prompt=True))))
            bodies.append(("/tokenize", compact(
                {"messages": messages, "add_generation_prompt": False})))
bodies.append(("/v1/chat/completions", compact(
    {"messages": [{"role": "system", "content": None},
                  {"role": "user", "content": [
                      {"type": "text", "text": "one"},
                      {"type": "text", "text": "two"}]}],
     "max_tokens": 4})))
bodies.append(("/tokenize", compact(
    {"prompt": "def fib(n):", "add_special_tokens": False})))
bodies.append(("/detokenize", compact({"tokens": [1, 300, 4095]})))
for i, (path, body) in enumerate(bodies):
    put("infer-fuzz-openai-request", "body-%d" % i,
        bytes([ENDPOINTS[path]]) + body.encode())

# Chat templates: each fixture tokenizer's template, NUL, its chat golden's
# messages (and the golden's rendering as one more message's content) with
# its special tokens; then small templates of the features chat templates
# use, over the same messages.
chat_messages = [{"role": "user", "content": "Hi"}]
for path in sorted(glob.glob(os.path.join(fixtures,
                                          "tokenizers/*/tokenizer_config.json"))):
    name = path.split("/")[-2]
    with open(path) as f:
        config = json.load(f)
    template = config.get("chat_template")
    if not isinstance(template, str):
        continue
    variables = {"add_generation_prompt": True}
    for token in ("bos_token", "eos_token", "pad_token", "unk_token"):
        t = config.get(token)
        if isinstance(t, dict):
            t = t.get("content")
        if isinstance(t, str):
            variables[token] = t
    chat = {}
    if os.path.exists(golden):
        with open(golden) as f:
            chat = json.load(f).get(name, {}).get("chat", {})
    messages = chat.get("messages", chat_messages)
    chat_messages = messages
    put("infer-fuzz-chat-template", name, template.encode() + b"\0" +
        compact(dict(variables, messages=messages)).encode())
    if "rendered" in chat:
        put("infer-fuzz-chat-template", name + "-rendered",
            template.encode() + b"\0" + compact(dict(
                variables, add_generation_prompt=False,
                messages=messages + [{"role": "assistant",
                                      "content": chat["rendered"]}])).encode())
    # Tools and tool calls, where the template renders them.
    if "tool" in template:
        tool_call = {"type": "function", "function": {
            "name": "get_time", "arguments": {"zone": "UTC"}}}
        put("infer-fuzz-chat-template", name + "-tools", template.encode() +
            b"\0" + compact(dict(variables, messages=[
                {"role": "user", "content": "What time is it?"},
                {"role": "assistant", "content": "", "tool_calls": [tool_call]},
                {"role": "tool", "content": "12:00"}])).encode())
features = [
    "{%- for m in messages %}{{ loop.index }}/{{ loop.length }} "
    "{{ m.role | upper }}: {{ m.content | trim }}{{ m['content'][:3] }}"
    "{{ m.content[-2:] }}{% if not loop.last %}\n{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<gen>{% endif %}",
    "{% set ns = namespace(n=0, roles=[]) %}{% macro tag(r, x='!') %}<{{ r }}"
    "{{ x }}>{% endmacro %}{% for m in messages if m.role != 'system' %}"
    "{% set ns.n = ns.n + 1 %}{% set ns.roles = ns.roles + [m.role] %}"
    "{{ tag(m.role) }}{{ m.content.replace('e', 'E').split(' ') | join('|') }}"
    "{% if ns.n >= 6 %}{% break %}{% endif %}{% endfor %}"
    "{{ ns.roles | tojson(indent=2) }}",
    "{{ 7 // 2 }} {{ -7 % 3 }} {{ 2 ** 10 }} {{ 1 / 4 }} {{ 'ab' * 3 }} "
    "{{ range(2, 9, 3) | list }} {{ [3, 1, 3] | unique | reverse | list }} "
    "{{ {'k': [1, 2.5, none, true]} | tojson }} {{ 'x' in 'xyz' }} "
    "{{ messages | length is odd }} {{ (messages | first).get('name', 'anon') }}"
    "{% for k, v in {'a': 1}.items() %}{{ k }}={{ v }}{% endfor %}"
    "{{ 'Hi There'.startswith(('Hi', 'x')) }} {{ '%s' | string | title }}"
    "{% set block %}captured {{ bos_token }}{% endset %}{{ block | length }}",
    "{%- if messages[0]['role'] == 'system' -%}{{ raise_exception('no system "
    "messages') }}{%- endif -%}{% for m in messages %}{% generation %}"
    "{{ m['content'] }}{% endgeneration %}{% else %}empty{% endfor %}"
    "{{ strftime_now('%Y') | length }}",
]
for i, template in enumerate(features):
    put("infer-fuzz-chat-template", "feature-%d" % i, template.encode() +
        b"\0" + compact({"messages": chat_messages, "bos_token": "<s>",
                              "eos_token": "</s>"}).encode())

# Inputs that once crashed a harness: every run starts by replaying them.
for path in sorted(glob.glob(os.path.join(repo, "fuzz/regressions/*/*"))):
    with open(path, "rb") as f:
        put(path.split("/")[-2], "regression-" + os.path.basename(path), f.read())
