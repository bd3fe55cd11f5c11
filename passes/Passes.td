//===- Passes.td - infer transformation passes -------------*- tablegen -*-===//
//
// Declares the passes that rewrite infer IR on its way to a deployable plan.
//
//===----------------------------------------------------------------------===//

#ifndef INFER_PASSES_PASSES_TD
#define INFER_PASSES_PASSES_TD

include "mlir/Pass/PassBase.td"

//===----------------------------------------------------------------------===//
// KV cache
//===----------------------------------------------------------------------===//

def PageKVCachePass : Pass<"infer-page-kv-cache", "::mlir::func::FuncOp"> {
  let summary = "Turns logical attention into paged KV-cache writes and reads";
  let description = [{
    Gives every function that contains `infer.attention` an explicit paged KV
    cache. The function must bind the `slot_mapping`, `block_tables` and
    `context_lens` inputs of the batch contract (arguments marked with
    `infer.input`); the pass appends a `!infer.kv_cache` argument marked
    `{infer.input = "kv_cache"}` and rewrites each attention, in program
    order, into an `infer.kv_cache_write` of the new tokens' keys and values
    followed by an `infer.paged_attention` reading the updated cache. The
    cache value is threaded from one layer to the next.

    The cache has `max(#attention ops, max layer + 1)` layers; its head
    count, head size and element type come from the attention ops (their key
    element type), which must agree. Each attention op must own a distinct
    layer and sit in the function's entry block.

    Before:

    ```mlir
    func.func @forward(%qsl: tensor<?xi32> {infer.input = "query_start_loc"},
                       %lens: tensor<?xi32> {infer.input = "context_lens"},
                       %tables: tensor<?x?xi32> {infer.input = "block_tables"},
                       %slots: tensor<?xi64> {infer.input = "slot_mapping"},
                       %q: tensor<?x384xf32>, %k: tensor<?x128xf32>,
                       %v: tensor<?x128xf32>) -> tensor<?x384xf32> {
      %o = infer.attention %q, %k, %v, %qsl
          {layer = 0 : i64, num_heads = 6 : i64, num_kv_heads = 2 : i64,
           head_dim = 64 : i64, scale = 1.250000e-01 : f64,
           sliding_window = 0 : i64}
          : tensor<?x384xf32>, tensor<?x128xf32>, tensor<?x128xf32>,
            tensor<?xi32> -> tensor<?x384xf32>
      return %o : tensor<?x384xf32>
    }
    ```

    After `--infer-page-kv-cache="block-size=16"`:

    ```mlir
    func.func @forward(..., %cache: !infer.kv_cache<num_layers = 1,
                                num_kv_heads = 2, block_size = 16,
                                head_dim = 64, element_type = f32>
                            {infer.input = "kv_cache"}) -> tensor<?x384xf32> {
      %c = infer.kv_cache_write %cache, %k, %v, %slots {layer = 0 : i64} : ...
      %o = infer.paged_attention %q, %c, %tables, %lens, %qsl
          {layer = 0 : i64, num_heads = 6 : i64, num_kv_heads = 2 : i64,
           head_dim = 64 : i64, scale = 1.250000e-01 : f64,
           sliding_window = 0 : i64} : ...
      return %o : tensor<?x384xf32>
    }
    ```
  }];

  let options = [
    Option<"blockSize", "block-size", "int64_t", /*default=*/"16",
           "Tokens per KV-cache block; a positive power of two">
  ];
  let dependentDialects = ["::mlir::infer::InferDialect"];
}

def StreamingKVPass : Pass<"infer-streaming-kv", "::mlir::ModuleOp"> {
  let summary = "Attention sinks and a rolling KV window (StreamingLLM)";
  let description = [{
    Makes a paged program run indefinitely in bounded KV-cache memory, as
    StreamingLLM (Xiao et al., 2023) and SwiftInfer do: the cache of a
    sequence keeps its first `sink-tokens` tokens (rounded up to whole
    blocks) and at least its `window` most recent ones; the runtime evicts
    the blocks between before each step. Run it after
    `infer-page-kv-cache` and before `infer-fuse`.

    Positions are assigned inside the cache. The keys' `infer.rope` moves
    from before the cache write into `infer.paged_attention` (`key_rope`,
    `key_rotary_dim`): the cache holds unrotated keys and attention rotates
    each at its index in the sequence's cache, so eviction never rewrites
    the cache. Queries keep their `infer.rope`; the runtime feeds
    `positions` = in-cache index of each new token. The module gets
    `infer.streaming = #infer.streaming<sink_tokens = .., window = ..>`,
    which codegen records in the plan's and manifest's KV-cache layout.
    With the rope gone from the cache write, `infer-fuse` has no
    `infer.rope_kv_cache_write` (nor `infer.rope_qkv_cache_write`) to form
    for the keys.

    Errors: `sink-tokens < 0`, `window <= 0`; logical `infer.attention`
    left (page the cache first) or `infer.rope_kv_cache_write` or
    `infer.rope_qkv_cache_write` present (fused already); an attention with a `sliding_window` (sliding-window
    models are not combined with attention sinks); keys not rotated by an
    `infer.rope` (no position to shift).

    Before (after `infer-page-kv-cache`):

    ```mlir
    %kr = infer.rope %k, %pos {head_dim = 64 : i64, rotary_dim = 64 : i64,
                               rope = #infer.rope<theta = 1.0e+04, kind = default>}
        : tensor<?x128xf32>, tensor<?xi32> -> tensor<?x128xf32>
    %c = infer.kv_cache_write %cache, %kr, %v, %slots {layer = 0 : i64} : ...
    %o = infer.paged_attention %qr, %c, %tables, %lens, %qsl
        {layer = 0 : i64, ..., sliding_window = 0 : i64} : ...
    ```

    After `--infer-streaming-kv="sink-tokens=4 window=1024"`:

    ```mlir
    module attributes {infer.streaming = #infer.streaming<sink_tokens = 4,
                                                          window = 1024>} {
      %c = infer.kv_cache_write %cache, %k, %v, %slots {layer = 0 : i64} : ...
      %o = infer.paged_attention %qr, %c, %tables, %lens, %qsl
          {layer = 0 : i64, ..., sliding_window = 0 : i64,
           key_rope = #infer.rope<theta = 1.0e+04, kind = default>,
           key_rotary_dim = 64 : i64} : ...
    }
    ```
  }];

  let options = [
    Option<"sinkTokens", "sink-tokens", "int64_t", /*default=*/"4",
           "Leading tokens whose keys and values are never evicted (rounded "
           "up to whole KV-cache blocks)">,
    Option<"window", "window", "int64_t", /*default=*/"1024",
           "Most recent tokens kept in the cache, at least; eviction is by "
           "whole blocks">
  ];
  let dependentDialects = ["::mlir::infer::InferDialect"];
}

//===----------------------------------------------------------------------===//
// Precision
//===----------------------------------------------------------------------===//

def AssignPrecisionPass
    : Pass<"infer-assign-precision", "::mlir::func::FuncOp"> {
  let summary = "Chooses the element types of activations, weights and the "
                "KV cache";
  let description = [{
    Gives a program the activation type its target runs (`activation-type`:
    bf16 or f16 for GPUs, f32 for the CPU reference):

    - every float activation (op results, function arguments other than the
      batch-contract inputs) takes the activation type, except the result of
      `infer.logits`, which stays f32: the LM head writes fp32 logits for
      sampling, and the function result with it;
    - every float `infer.weight` and `infer.concat_weights` result takes it
      too: the runtime converts the checkpoint's tensors to the parameter's
      type when it loads them. fp8 weights keep their type
      (`infer-quantize-fp8` runs later);
    - the KV cache (`!infer.kv_cache`) takes it as its element type, unless
      the cache is fp8.

    Ops that make a new activation from parameters, the cache or whole rows
    (`infer.embedding`, `infer.linear`, `infer.rms_norm`,
    `infer.add_rms_norm`, `infer.attention`, `infer.paged_attention`) produce
    the activation type. Ops that move data or compute elementwise
    (`infer.gather_rows`, `infer.split`, `infer.all_gather`,
    `infer.all_reduce`, `infer.rope`, `infer.add`, `infer.mul`, `infer.silu`,
    `infer.gelu`, `infer.silu_mul`, `infer.bias_add`, `infer.fused`) produce
    their operands' type, the widest of them where they differ (PyTorch's
    type promotion), so a value computed from the logits (their
    `infer.all_gather` under tensor parallelism) stays f32. Where an
    operand's type differs from the type its op reads, the pass inserts an
    `infer.cast` (an f32 value read by an op of the activation type, or the
    narrower operand of a promoting elementwise op); an existing cast keeps
    its result type and disappears once its operand has that type. What each
    op computes in fp32 inside is in its description (the dialect's
    "Precision").

    The residual stream has the activation type, as in Hugging Face's and
    vLLM's bf16 runs: a bf16 program is measured against Hugging Face's own
    bf16 run on the same inputs (DESIGN.md's correctness rule), so it rounds
    the residual sums where that run does, and its error is comparable.

    Run it after `infer-page-kv-cache` and `infer-streaming-kv` (it types
    the paged cache) and before `infer-quantize-fp8` and `infer-fuse`. The
    function must have a single block.

    Before:

    ```mlir
    func.func @forward(%ids: tensor<?xi32> {infer.input = "token_ids"},
                       %cache: !infer.kv_cache<num_layers = 1,
                           num_kv_heads = 2, block_size = 16, head_dim = 64,
                           element_type = f32> {infer.input = "kv_cache"}, ...)
        -> tensor<?x512xf32> {
      %t = infer.weight "model.embed_tokens.weight" : tensor<512x128xf32>
      %h = infer.embedding %t[%ids]
          : tensor<512x128xf32>, tensor<?xi32> -> tensor<?x128xf32>
      ...
      %w = infer.weight "lm_head.weight" : tensor<512x128xf32>
      %l = infer.logits %y, %w
          : tensor<?x128xf32>, tensor<512x128xf32> -> tensor<?x512xf32>
      return %l : tensor<?x512xf32>
    }
    ```

    After `--infer-assign-precision="activation-type=bf16"`:

    ```mlir
    func.func @forward(%ids: tensor<?xi32> {infer.input = "token_ids"},
                       %cache: !infer.kv_cache<num_layers = 1,
                           num_kv_heads = 2, block_size = 16, head_dim = 64,
                           element_type = bf16> {infer.input = "kv_cache"}, ...)
        -> tensor<?x512xf32> {
      %t = infer.weight "model.embed_tokens.weight" : tensor<512x128xbf16>
      %h = infer.embedding %t[%ids]
          : tensor<512x128xbf16>, tensor<?xi32> -> tensor<?x128xbf16>
      ...
      %w = infer.weight "lm_head.weight" : tensor<512x128xbf16>
      %l = infer.logits %y, %w
          : tensor<?x128xbf16>, tensor<512x128xbf16> -> tensor<?x512xf32>
      return %l : tensor<?x512xf32>
    }
    ```
  }];

  let options = [
    Option<"activationType", "activation-type",
           "::mlir::infer::ActivationType",
           /*default=*/"::mlir::infer::ActivationType::BF16",
           "Element type of activations, weights and the KV cache: bf16, "
           "f16 or f32",
           [{::llvm::cl::values(
             clEnumValN(::mlir::infer::ActivationType::BF16, "bf16",
                        "bfloat16"),
             clEnumValN(::mlir::infer::ActivationType::F16, "f16",
                        "IEEE half precision"),
             clEnumValN(::mlir::infer::ActivationType::F32, "f32",
                        "IEEE single precision"))}]>
  ];
  let dependentDialects = ["::mlir::infer::InferDialect"];
}

//===----------------------------------------------------------------------===//
// Quantization
//===----------------------------------------------------------------------===//

def QuantizeFp8Pass : Pass<"infer-quantize-fp8", "::mlir::func::FuncOp"> {
  let summary = "FP8 projection weights (E4M3) and FP8 KV cache";
  let description = [{
    Weight-only and KV-cache FP8 quantization, with scales computed by the
    runtime from the checkpoint when it loads the artifact (no calibration).

    `weights=e4m3` gives the weight of every `infer.linear` and
    `infer.logits` element type `f8E4M3FN` and `quant = #infer.fp8<...>`:
    one scale `amax / 448` per tensor (`granularity=per-tensor`) or per
    output row (`per-channel`), computed on the rank's slice when the weight
    is a tensor-parallel shard. Embeddings, norms and biases keep their
    type; a checkpoint tensor read both as a projection weight and otherwise
    (a tied embedding) gets a second, quantized `infer.weight` for the
    projection.

    `kv-cache=e5m2` or `e4m3` changes the element type of the paged KV cache
    (`!infer.kv_cache`, so run it after `infer-page-kv-cache`) to `f8E5M2`
    (codes only) or `f8E4M3FN` (codes and one dynamic fp32 scale per token,
    layer, key/value and head): the cache writes quantize, paged attention
    dequantizes.

    Run it before `infer-fuse`: merged projections then concatenate fp8
    weights (each part keeps its own scales).

    Before:

    ```mlir
    %w = infer.weight "model.layers.0.mlp.down_proj.weight"
        : tensor<128x256xbf16>
    %y = infer.linear %x, %w : tensor<?x256xf32>, tensor<128x256xbf16>
        -> tensor<?x128xf32>
    ```

    After `--infer-quantize-fp8="weights=e4m3 granularity=per-channel"`:

    ```mlir
    %w = infer.weight "model.layers.0.mlp.down_proj.weight"
        {quant = #infer.fp8<granularity = per_channel>}
        : tensor<128x256xf8E4M3FN>
    %y = infer.linear %x, %w : tensor<?x256xf32>, tensor<128x256xf8E4M3FN>
        -> tensor<?x128xf32>
    ```
  }];

  let options = [
    Option<"weights", "weights", "::mlir::infer::Fp8WeightQuant",
           /*default=*/"::mlir::infer::Fp8WeightQuant::E4M3",
           "Projection weights: e4m3 or none",
           [{::llvm::cl::values(
             clEnumValN(::mlir::infer::Fp8WeightQuant::E4M3, "e4m3",
                        "FP8 E4M3 with scales computed at load"),
             clEnumValN(::mlir::infer::Fp8WeightQuant::None, "none",
                        "keep the checkpoint's type"))}]>,
    Option<"kvCache", "kv-cache", "::mlir::infer::Fp8KVCacheQuant",
           /*default=*/"::mlir::infer::Fp8KVCacheQuant::None",
           "KV cache: e5m2, e4m3 or none",
           [{::llvm::cl::values(
             clEnumValN(::mlir::infer::Fp8KVCacheQuant::E5M2, "e5m2",
                        "FP8 E5M2 codes, no scale"),
             clEnumValN(::mlir::infer::Fp8KVCacheQuant::E4M3, "e4m3",
                        "FP8 E4M3 codes, an fp32 scale per token and head"),
             clEnumValN(::mlir::infer::Fp8KVCacheQuant::None, "none",
                        "keep the cache's type"))}]>,
    Option<"granularity", "granularity", "::mlir::infer::Fp8Granularity",
           /*default=*/"::mlir::infer::Fp8Granularity::PerTensor",
           "Weight scales: per-tensor or per-channel (per output row)",
           [{::llvm::cl::values(
             clEnumValN(::mlir::infer::Fp8Granularity::PerTensor,
                        "per-tensor", "one scale per tensor"),
             clEnumValN(::mlir::infer::Fp8Granularity::PerChannel,
                        "per-channel", "one scale per output row"))}]>
  ];
  let dependentDialects = ["::mlir::infer::InferDialect"];
}

//===----------------------------------------------------------------------===//
// Fusion
//===----------------------------------------------------------------------===//

def FusePass : Pass<"infer-fuse", "::mlir::func::FuncOp"> {
  let summary = "Fuses projections, normalizations, activations and "
                "elementwise chains";
  let description = [{
    Rewrites a model so that fewer, larger kernels run per layer:

    - sibling `infer.linear`s of one input, without a `parallel` style (one
      that may yet be split is left to `infer-shard-tensor-parallel`), whose
      weights (and biases, all or none) come from `infer.weight` become one
      GEMM over an
      `infer.concat_weights` of their weights, followed by an `infer.split`
      of its result (q/k/v, gate/up); the concatenation happens once, when the
      runtime loads the checkpoint. Tensor-parallel shards merge when every
      weight (and bias) is split along dim 0 for the same ranks: each rank
      concatenates its own slice of every part;
    - `infer.rms_norm` of an `infer.add` becomes `infer.add_rms_norm`, which
      returns the sum as well, provided no user of the sum comes before the
      normalization;
    - an `infer.linear` without a `parallel` style used only by an
      `infer.add_rms_norm` (or an `infer.add`) adds the other operand as its
      residual, and the add_rms_norm becomes an `infer.rms_norm`
      (`infer-fuse-residual`, which wins over the add+rmsnorm and
      elementwise fusions);
    - `infer.mul` of an `infer.silu` used only there becomes
      `infer.silu_mul`, and an `infer.silu_mul` of the two halves of an
      `infer.split` of a merged gate/up `infer.linear` (no bias, residual or
      `parallel` style, a weight that is not FP8, nothing else reading the
      product or its halves) becomes one `infer.linear_swiglu` of the same
      weight, whose GEMM applies the activation in its epilogue (an FP8
      MLP keeps its silu_mul, which writes the down projection's FP8
      operand);
    - `infer.kv_cache_write` of keys from an `infer.rope` used only there
      becomes `infer.rope_kv_cache_write` (run it after
      `infer-page-kv-cache`), and that with the `infer.rope` of the queries
      the layer's `infer.paged_attention` reads becomes
      `infer.rope_qkv_cache_write` when both rotate at the same positions by
      the same rope (`infer-fuse-rope` alone);
    - connected elementwise operations (`infer.add`, `infer.gelu`,
      `infer.mul`, `infer.silu`, `infer.silu_mul`), at least two, become one
      `infer.fused` region. A producer joins its consumer's region only if
      every user of its result is in the region, so nothing is computed
      twice; the region yields the value of its last operation. Its body
      computes in f32 (block arguments are the inputs in f32) and its result
      keeps the type of the operation it replaces, so a bf16 chain rounds
      once, at the end.

    Before:

    ```mlir
    %wg = infer.weight "mlp.gate_proj.weight" : tensor<256x128xbf16>
    %g = infer.linear %x, %wg : tensor<?x128xf32>, tensor<256x128xbf16> -> tensor<?x256xf32>
    %wu = infer.weight "mlp.up_proj.weight" : tensor<256x128xbf16>
    %u = infer.linear %x, %wu : tensor<?x128xf32>, tensor<256x128xbf16> -> tensor<?x256xf32>
    %s = infer.silu %g : tensor<?x256xf32>
    %y = infer.mul %s, %u : tensor<?x256xf32>
    ```

    After `--infer-fuse`:

    ```mlir
    %wg = infer.weight "mlp.gate_proj.weight" : tensor<256x128xbf16>
    %wu = infer.weight "mlp.up_proj.weight" : tensor<256x128xbf16>
    %w = infer.concat_weights %wg, %wu : tensor<256x128xbf16>, tensor<256x128xbf16> -> tensor<512x128xbf16>
    %y = infer.linear_swiglu %x, %w : tensor<?x128xf32>, tensor<512x128xbf16> -> tensor<?x256xf32>
    ```
  }];

  let dependentDialects = ["::mlir::infer::InferDialect"];
}

def FuseResidualPass : Pass<"infer-fuse-residual", "::mlir::func::FuncOp"> {
  let summary = "Adds residuals in the epilogue of the GEMM that feeds them";
  let description = [{
    A decoder layer adds the output of o_proj and of down_proj to the
    residual stream. Computed apart, the GEMM writes its result, and the add
    (or `infer.add_rms_norm`) reads it back with the residual: two passes
    over `[T, hidden]` that the GEMM's epilogue saves by adding the residual
    before it rounds (cuBLASLt's `beta = 1` with `C` the residual). The pass
    rewrites

    - `infer.add_rms_norm(a, b)` where `a` or `b` is an `infer.linear` used
      only there, in the same block, without a residual and without a
      `parallel` style: the linear takes the other operand as its residual,
      its result becomes the sum, and an `infer.rms_norm` of it (same
      `epsilon` and `weight_offset`) the normalized result;
    - `infer.add(a, b)` of such a linear likewise (the last residual add of
      a model without a final norm, parallel attention and MLP blocks),
      unless the add would join an `infer.fused` region of
      `infer-fuse` (its users all elementwise, or its other operand an
      elementwise op used only there): there the region reads the product
      as cheaply as the epilogue would.

    When both operands qualify the right one (the block's output in the
    importer's `residual + out`) takes the residual.

    Tensor parallelism: a linear that still has a `parallel` style (the
    importer's output, before `infer-shard-tensor-parallel`) is left alone,
    since it may yet be split and a row-parallel rank would add the residual
    to its partial sum (the verifier rejects a residual next to a style).
    The sharding pass consumes every style, at any `tp` (also 1), so the
    pass fuses after it, as `infer-deploy-pipeline` runs it: at tp=1 every
    o_proj and down_proj takes its residual; at tp > 1 a row-parallel
    product is summed by `infer.all_reduce` before it meets the residual,
    so nothing matches there (the residual must be added once, after the
    sum). Run before sharding, the pass fuses only unstyled (replicated)
    linears, which sharding keeps whole, and leaves the rest to the
    pipeline.

    Numerics: the sum is computed in fp32 and rounded once, as
    `infer.add` computes it, but from the unrounded product: a bf16
    program rounds once where it rounded twice. An fp32 program (the CPU
    reference) computes the same bits as before, so it runs the plan shape
    the GPU runs.

    `infer-fuse` applies the same patterns together with its others, before
    it forms elementwise regions, so the fused linear is what a Llama,
    Mistral or Qwen layer ends with, on every target.

    Before:

    ```mlir
    %o = infer.linear %a, %wo : tensor<?x128xbf16>, tensor<128x128xbf16> -> tensor<?x128xbf16>
    %h, %n = infer.add_rms_norm %res, %o, %w {epsilon = 1.0e-05 : f64}
        : tensor<?x128xbf16>, tensor<?x128xbf16>, tensor<128xbf16>
        -> tensor<?x128xbf16>, tensor<?x128xbf16>
    ```

    After `--infer-fuse-residual`:

    ```mlir
    %h = infer.linear %a, %wo residual(%res) : tensor<?x128xbf16>, tensor<128x128xbf16> -> tensor<?x128xbf16>
    %n = infer.rms_norm %h, %w {epsilon = 1.0e-05 : f64} : tensor<?x128xbf16>, tensor<128xbf16> -> tensor<?x128xbf16>
    ```
  }];

  let dependentDialects = ["::mlir::infer::InferDialect"];
}

def FuseRopePass : Pass<"infer-fuse-rope", "::mlir::func::FuncOp"> {
  let summary = "Fuses rotary embeddings into the KV-cache writes";
  let description = [{
    The rope patterns of `infer-fuse`, on their own: run it after
    `infer-page-kv-cache`.

    - `infer.kv_cache_write` of keys from an `infer.rope` used only there
      becomes `infer.rope_kv_cache_write`;
    - an `infer.rope_kv_cache_write` and the `infer.rope` of the queries that
      an `infer.paged_attention` reads together with the cache it writes
      (the layer's queries) become one `infer.rope_qkv_cache_write`, provided
      both take the same `positions` (and `query_start_loc`), `head_dim`,
      `rotary_dim` and `rope`, the queries have the keys' element type, and
      no user of the earlier of the two comes before the later one. A rope
      that differs (a partial rotary of other width, other positions) is
      left alone, and so is a streaming plan (`infer-streaming-kv`), whose
      cache write rotates no keys. Per-head q/k norms (Qwen3, Gemma 3)
      before the ropes change nothing: the fused op reads the normalized
      queries and keys.

    Before:

    ```mlir
    %q, %k, %v = infer.split %qkv : tensor<?x192xbf16>
        -> tensor<?x128xbf16>, tensor<?x32xbf16>, tensor<?x32xbf16>
    %qr = infer.rope %q, %pos {head_dim = 16 : i64, rotary_dim = 16 : i64,
                               rope = #infer.rope<theta = 1.0e+04, kind = default>}
        : tensor<?x128xbf16>, tensor<?xi32> -> tensor<?x128xbf16>
    %c1 = infer.rope_kv_cache_write %c0, %k, %v, %slots, %pos
        {layer = 0 : i64, head_dim = 16 : i64, rotary_dim = 16 : i64,
         rope = #infer.rope<theta = 1.0e+04, kind = default>} : ...
    %o = infer.paged_attention %qr, %c1, %tables, %lens, %qsl {...} : ...
    ```

    After `--infer-fuse-rope`:

    ```mlir
    %qr, %c1 = infer.rope_qkv_cache_write %c0, %q, %k, %v, %slots, %pos
        {layer = 0 : i64, head_dim = 16 : i64, rotary_dim = 16 : i64,
         rope = #infer.rope<theta = 1.0e+04, kind = default>} : ...
    %o = infer.paged_attention %qr, %c1, %tables, %lens, %qsl {...} : ...
    ```
  }];

  let dependentDialects = ["::mlir::infer::InferDialect"];
}

//===----------------------------------------------------------------------===//
// Distribution
//===----------------------------------------------------------------------===//

def ShardTensorParallelPass
    : Pass<"infer-shard-tensor-parallel", "::mlir::ModuleOp"> {
  let summary = "Splits a model into one SPMD program for tp ranks";
  let description = [{
    Megatron-style tensor parallelism. The module becomes the program every
    one of `tp` ranks runs; what differs between ranks is only which slice of
    each parameter it holds, recorded as `#infer.shard` on `infer.weight`
    (one checkpoint serves every `tp`). The module gets `infer.tp = tp`.

    Each `infer.linear` says how it splits in its `parallel` attribute
    (`#infer.parallel`), set by the importer from the architecture: the pass
    reads the IR, no architecture list or checkpoint names. It consumes the
    attribute.

    | `parallel`                       | split                                      |
    |----------------------------------|--------------------------------------------|
    | `column` (q, gate, up)           | weight rows and bias                       |
    | `kv_column` (k, v)               | weight rows and bias, by key/value head    |
    | `row` (o, down)                  | weight columns, then `infer.all_reduce`; a bias (replicated) then `infer.bias_add` |
    | `column` with `parts` (Phi-3 `qkv_proj`, `gate_up_proj`) | each part's rows on their own (`#infer.shard` with `offset` and `size`), concatenated per rank by `infer.concat_weights`; the `infer.split` of the result takes the rank's part widths |
    | none                             | replicated                                 |

    Attention keeps `num_heads / tp` heads per rank. Key/value heads are
    split when `num_kv_heads % tp == 0`; when there are fewer of them than
    ranks (`tp % num_kv_heads == 0`) each rank holds the one head its query
    heads read. The embedding is vocabulary-parallel (each rank looks up its
    slice of the vocabulary, zero rows elsewhere, then `infer.all_reduce`)
    and the LM head produces the rank's slice of the logits, concatenated by
    `infer.all_gather`; both stay replicated when the vocabulary does not
    divide by `tp`.
    A row-parallel bias (Llama's `attention_bias` / `mlp_bias`) leaves the
    `infer.linear` and is added once, after the sum, by `infer.bias_add`
    (Megatron-LM's `RowParallelLinear`): on every rank it would count `tp`
    times.

    Errors: `tp < 1`; attention whose queries are not split by head (no
    `column` query projection); `num_heads` not divisible by `tp` or smaller
    than it; key/value heads that can be neither split nor replicated; a
    part that does not divide. With `tp = 1` the pass splits nothing and
    sets no `infer.tp`; it only consumes the `parallel` styles, so the
    passes after it see the same program at every `tp`.

    Before (one layer's attention, 8 heads, 2 key/value heads):

    ```mlir
    %wk = infer.weight "model.layers.0.self_attn.k_proj.weight"
        : tensor<32x128xf32>
    %k = infer.linear %x, %wk {parallel = #infer.parallel<kv_column>}
        : tensor<?x128xf32>, tensor<32x128xf32> -> tensor<?x32xf32>
    %o = infer.attention %q, %k, %v, %qsl {num_heads = 8 : i64,
        num_kv_heads = 2 : i64, head_dim = 16 : i64, ...} : ...
    %wo = infer.weight "model.layers.0.self_attn.o_proj.weight"
        : tensor<128x128xf32>
    %y = infer.linear %o, %wo {parallel = #infer.parallel<row>}
        : tensor<?x128xf32>, tensor<128x128xf32> -> tensor<?x128xf32>
    ```

    After `--infer-shard-tensor-parallel="tp=4"`:

    ```mlir
    %wk = infer.weight "model.layers.0.self_attn.k_proj.weight"
        {shard = #infer.shard<dim = 0, shards = 2, replication = 2>}
        : tensor<16x128xf32>
    %k = infer.linear %x, %wk : tensor<?x128xf32>, tensor<16x128xf32>
        -> tensor<?x16xf32>
    %o = infer.attention %q, %k, %v, %qsl {num_heads = 2 : i64,
        num_kv_heads = 1 : i64, head_dim = 16 : i64, ...} : ...
    %wo = infer.weight "model.layers.0.self_attn.o_proj.weight"
        {shard = #infer.shard<dim = 1, shards = 4>} : tensor<128x32xf32>
    %p = infer.linear %o, %wo : tensor<?x32xf32>, tensor<128x32xf32>
        -> tensor<?x128xf32>
    %y = infer.all_reduce %p : tensor<?x128xf32>
    ```
  }];

  let options = [
    Option<"tp", "tp", "int64_t", /*default=*/"1",
           "Number of tensor-parallel ranks">
  ];
  let dependentDialects = ["::mlir::infer::InferDialect"];
}

//===----------------------------------------------------------------------===//
// Memory
//===----------------------------------------------------------------------===//

def PlanMemoryPass : Pass<"infer-plan-memory", "::mlir::func::FuncOp"> {
  let summary = "Places activations in one reused workspace";
  let description = [{
    Computes the live range of every activation of the function's entry
    block (from its defining op to its last user, in program order), builds
    the interference graph of the ranges (Boost.Graph) and places the
    activations largest first, each at the lowest offset where it overlaps
    no activation alive at the same time. The token count T is only known
    per forward call, so sizes and offsets are bytes per token row: an
    activation `tensor<?x384xf32>` takes 1536 bytes per row, and a batch of
    T tokens places it at `offset * T` in a workspace of
    `infer.workspace_bytes_per_row * T` bytes. Function results, weights
    and the KV cache stay outside the workspace.

    Each op with workspace results gets `infer.workspace_offsets`, one
    offset per result (-1: not in the workspace), and the function gets the
    peak, `infer.workspace_bytes_per_row`.

    ```mlir
    func.func @forward(...) -> tensor<?x512xf32>
        attributes {infer.workspace_bytes_per_row = 1024 : i64} {
      %h = infer.embedding %table[%ids] {infer.workspace_offsets = array<i64: 0>}
          : tensor<512x128xbf16>, tensor<?xi32> -> tensor<?x128xf32>
      %y = infer.rms_norm %h, %w {epsilon = 1.0e-06 : f64,
                                  infer.workspace_offsets = array<i64: 512>}
          : tensor<?x128xf32>, tensor<128xbf16> -> tensor<?x128xf32>
      ...
    }
    ```
  }];

  let dependentDialects = ["::mlir::infer::InferDialect"];
}

#endif // INFER_PASSES_PASSES_TD
