#!/usr/bin/env python3
"""PyTorch scaled_dot_product_attention on infer-attention-bench's shapes.

    attention_sdpa.py [--prefill 2048,4096,8192] [--decode 1:32768,256:2048]
                      [--heads 32 --kv-heads 8 --head-dim 128] [--repeats 7]

The peer of bench/AttentionBench.cpp, run beside it by
bench/attention_check.sh: bf16 q, k, v in PyTorch's contiguous
[batch, heads, tokens, head_dim] layout (no paging), GQA through
enable_gqa (k and v repeated per head where a backend refuses it; the line
says so), with the flash and cuDNN backends of
torch.nn.attention.sdpa_kernel:
  prefill  one sequence of N tokens, causal: ms and TFLOP/s counting
           2 matmuls x 2 FLOPs x N(N+1)/2 x head_dim x heads;
  decode   B queries of one token over C keys each: us and GB/s counting
           the K/V bytes of the C keys (bf16).
Each figure is the median of `repeats` samples; a sample is the mean of 10
calls replayed from a CUDA graph, as the bench times ours (repeated k and v
are made once, outside the timed calls). Ceilings in the same
process: a bf16 torch.matmul of 8192^3 and a 1 GiB device copy (read +
write). Lines start with "result" like the bench's.
"""

import argparse

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

BACKENDS = {"flash": SDPBackend.FLASH_ATTENTION, "cudnn": SDPBackend.CUDNN_ATTENTION}


def time_ms(fn, repeats):
    """Median over `repeats` of the mean ms of fn() in a graph of 10 calls
    (10 eager calls where the call cannot be captured)."""
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        fn()
        fn()
    torch.cuda.synchronize()
    try:
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=stream):
            for _ in range(10):
                fn()
        graph.replay()
        run = graph.replay
    except RuntimeError:
        torch.cuda.synchronize()

        def run():
            for _ in range(10):
                fn()

    torch.cuda.synchronize()
    samples = []
    for _ in range(repeats):
        start = torch.cuda.Event(enable_timing=True)
        stop = torch.cuda.Event(enable_timing=True)
        start.record()
        run()
        stop.record()
        stop.synchronize()
        samples.append(start.elapsed_time(stop) / 10)
    samples.sort()
    return samples[len(samples) // 2]


def sdpa_call(backend, q, k, v, causal, heads, kv_heads):
    """A call of SDPA on `backend` with GQA, and how it was given GQA."""

    def native():
        with sdpa_kernel(BACKENDS[backend]):
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal, enable_gqa=True)

    try:
        native()
        torch.cuda.synchronize()
        return native, "enable_gqa"
    except RuntimeError:
        pass
    group = heads // kv_heads
    kr = k.repeat_interleave(group, dim=1)
    vr = v.repeat_interleave(group, dim=1)

    def repeated():
        with sdpa_kernel(BACKENDS[backend]):
            return F.scaled_dot_product_attention(q, kr, vr, is_causal=causal)

    repeated()
    torch.cuda.synchronize()
    return repeated, "repeated_kv"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--prefill", default="2048,4096,8192")
    parser.add_argument(
        "--decode", default="1:32768,32:1024,32:8192,32:32768,128:4096,256:1024,256:2048"
    )
    parser.add_argument("--heads", type=int, default=32)
    parser.add_argument("--kv-heads", type=int, default=8)
    parser.add_argument("--head-dim", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    h, kvh, d = args.heads, args.kv_heads, args.head_dim
    torch.manual_seed(0)
    dev = torch.device("cuda")
    print(f"device {torch.cuda.get_device_name()}, torch {torch.__version__}, "
          f"cudnn {torch.backends.cudnn.version()}")

    a = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
    c = torch.empty_like(a)
    gemm = 2 * 8192**3 / (time_ms(lambda: torch.matmul(a, b, out=c), args.repeats) * 1e-3) / 1e12
    src = torch.empty(1 << 30, dtype=torch.uint8, device=dev).fill_(1)
    dst = torch.empty_like(src)
    copy = 2 * (1 << 30) / (time_ms(lambda: dst.copy_(src), args.repeats) * 1e-3) / 1e9
    del a, b, c, src, dst
    print(f"result ceiling copy_gbps={copy:.0f} gemm_tflops={gemm:.1f}")

    for n in (int(x) for x in args.prefill.split(",") if x):
        q = torch.randn(1, h, n, d, device=dev, dtype=torch.bfloat16)
        k = torch.randn(1, kvh, n, d, device=dev, dtype=torch.bfloat16)
        v = torch.randn(1, kvh, n, d, device=dev, dtype=torch.bfloat16)
        flops = 4 * (n * (n + 1) / 2) * d * h
        for backend in BACKENDS:
            try:
                fn, how = sdpa_call(backend, q, k, v, True, h, kvh)
                ms = time_ms(fn, args.repeats)
            except RuntimeError as error:
                print(f"# prefill {backend} tokens={n}: {str(error).splitlines()[0]}")
                continue
            tflops = flops / (ms * 1e-3) / 1e12
            print(f"result prefill kernel=torch-{backend} pool=bf16 tokens={n} ms={ms:.3f} "
                  f"tflops={tflops:.1f} pct_gemm={100 * tflops / gemm:.0f} gqa={how}")

    for bc in (x for x in args.decode.split(",") if x):
        batch, context = (int(x) for x in bc.split(":"))
        q = torch.randn(batch, h, 1, d, device=dev, dtype=torch.bfloat16)
        k = torch.randn(batch, kvh, context, d, device=dev, dtype=torch.bfloat16)
        v = torch.randn(batch, kvh, context, d, device=dev, dtype=torch.bfloat16)
        kv_bytes = 2 * batch * kvh * context * d * 2
        for backend in BACKENDS:
            try:
                fn, how = sdpa_call(backend, q, k, v, False, h, kvh)
                ms = time_ms(fn, args.repeats)
            except RuntimeError as error:
                print(f"# decode {backend} batch={batch} context={context}: "
                      f"{str(error).splitlines()[0]}")
                continue
            gbps = kv_bytes / (ms * 1e-3) / 1e9
            print(f"result decode kernel=torch-{backend} pool=bf16 batch={batch} "
                  f"context={context} us={ms * 1e3:.1f} gbps={gbps:.0f} "
                  f"pct_copy={100 * gbps / copy:.0f} gqa={how}")
        del q, k, v
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
