#!/usr/bin/env python3
"""Peer: Hugging Face transformers on the same checkpoint, same GPU.

usage: hf_generate.py MODEL_DIR [--decode-batches 1,8] [--prefill 128,2048]
                      [--context 128] [--new-tokens 128] [--repeats 3]

Decode: `generate` (greedy, static KV cache unless --dynamic-cache, EOS
ignored) of `new-tokens` tokens after a random prompt of `context` tokens;
ms per decode step = (time of new-tokens tokens - time of 1 token) /
(new-tokens - 1), so the prompt's prefill is not counted. Prefill: one
forward call over N tokens (SDPA attention), its time to first token.
Medians of `repeats` runs, printed as markdown rows like infer-cuda-bench.
"""
import argparse
import statistics
import time

import torch
from transformers import AutoModelForCausalLM


def timed(fn):
    torch.cuda.synchronize()
    start = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) * 1e3


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--decode-batches", default="1,8")
    ap.add_argument("--prefill", default="")
    ap.add_argument("--context", type=int, default=128)
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--dynamic-cache", action="store_true")
    args = ap.parse_args()
    import transformers
    start = time.perf_counter()
    model = AutoModelForCausalLM.from_pretrained(
        args.model, dtype=torch.bfloat16, device_map="cuda")
    model.eval()
    print(f"HF transformers {transformers.__version__}, torch {torch.__version__}, "
          f"{torch.cuda.get_device_name()}, load {time.perf_counter() - start:.1f} s, "
          f"attn {model.config._attn_implementation}, "
          f"cache {'dynamic' if args.dynamic_cache else 'static'}\n")
    vocab = model.config.vocab_size
    gen = torch.Generator(device="cuda").manual_seed(0)
    extra = {} if args.dynamic_cache else {"cache_implementation": "static"}

    def generate(ids, n):
        with torch.inference_mode():
            model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                           max_new_tokens=n, min_new_tokens=n, pad_token_id=0, **extra)

    batches = [int(b) for b in args.decode_batches.split(",") if b]
    if batches:
        print(f"| decode batch | context | ms/step (median of {args.repeats}) | tokens/s | runs |")
        print("|---|---|---|---|---|")
    for b in batches:
        ids = torch.randint(0, vocab, (b, args.context), device="cuda", generator=gen)
        generate(ids, 4)  # warm-up
        runs = []
        for _ in range(args.repeats):
            one = timed(lambda: generate(ids, 1))
            full = timed(lambda: generate(ids, args.new_tokens))
            runs.append((full - one) / (args.new_tokens - 1))
        ms = statistics.median(runs)
        print(f"| {b} | {args.context} | {ms:.3f} | {b / ms * 1e3:.0f} | "
              f"{', '.join(f'{r:.3f}' for r in runs)} |", flush=True)
    prefill = [int(n) for n in args.prefill.split(",") if n]
    if prefill:
        print(f"\n| prefill tokens | TTFT ms (median of {args.repeats}) | tokens/s | runs |")
        print("|---|---|---|---|")
    for n in prefill:
        ids = torch.randint(0, vocab, (1, n), device="cuda", generator=gen)

        def forward():
            with torch.inference_mode():
                model(ids, logits_to_keep=1)
        forward()
        runs = [timed(forward) for _ in range(args.repeats)]
        ms = statistics.median(runs)
        print(f"| {n} | {ms:.2f} | {n / ms * 1e3:.0f} | "
              f"{', '.join(f'{r:.2f}' for r in runs)} |", flush=True)


if __name__ == "__main__":
    main()
