//===- InferAttrs.td - infer dialect attributes ------------*- tablegen -*-===//
//
// Attributes of the infer dialect.
//
//===----------------------------------------------------------------------===//

#ifndef INFER_IR_INFERATTRS_TD
#define INFER_IR_INFERATTRS_TD

include "ir/InferBase.td"
include "ir/InferEnums.td"
include "mlir/IR/AttrTypeBase.td"

class Infer_Attr<string name, string attrMnemonic, list<Trait> traits = []>
    : AttrDef<Infer_Dialect, name, traits> {
  let mnemonic = attrMnemonic;
}

/// A double-precision parameter printed and parsed as an MLIR float literal;
/// it may be omitted from the assembly when `defaultValue` is set.
class Infer_F64Parameter<string desc, string defaultF64 = "">
    : APFloatParameter<desc> {
  let parser = [{ [&]() -> ::mlir::FailureOr<::llvm::APFloat> {
    ::llvm::APFloat value(0.0);
    if (::mlir::failed(
            $_parser.parseFloat(::llvm::APFloat::IEEEdouble(), value)))
      return ::mlir::failure();
    return value;
  }() }];
  let defaultValue = !if(!empty(defaultF64), "",
                         "::llvm::APFloat(" # defaultF64 # ")");
}

//===----------------------------------------------------------------------===//
// Rotary position embedding
//===----------------------------------------------------------------------===//

def Infer_RopeAttr : Infer_Attr<"Rope", "rope"> {
  let summary = "Rotary position embedding parameters";
  let description = [{
    Parameters of rotary position embedding (RoPE) as Hugging Face
    configurations give them: `rope_theta` and the `rope_scaling` (or
    transformers 5 `rope_parameters`) block. `factor`, `low_freq_factor`,
    `high_freq_factor`, `original_max_position_embeddings`, `beta_fast` and
    `beta_slow` default to 1.0, 1.0, 4.0, 0, 32.0 and 1.0, `short_factor` and
    `long_factor` to none; each is omitted from the printed form when it
    holds its default.

    `theta` must be positive. `linear` scaling needs a positive `factor`;
    `llama3` scaling also needs `high_freq_factor > low_freq_factor` and a
    positive `original_max_position_embeddings`; `yarn` a positive `factor`,
    a positive `original_max_position_embeddings` and positive `beta_fast`
    and `beta_slow`; `longrope` a positive `original_max_position_embeddings`
    and `short_factor` and `long_factor` of one length (the number of
    inverse frequencies, `rotary_dim / 2`, which the ops using the attribute
    check) with positive entries; `dynamic` a positive `factor` and a
    positive `original_max_position_embeddings` (the length past which the
    base grows). `short_factor` and `long_factor` belong to `longrope` only.

    The attention scaling of YaRN and LongRoPE (HF's `attention_factor`,
    which multiplies the cosines and sines) is not part of the rotation: it
    scales both queries and keys, so the importer multiplies the attention
    `scale` by its square instead.

    ```mlir
    #infer.rope<theta = 1.0e+04, kind = default>
    #infer.rope<theta = 5.0e+05, kind = llama3, factor = 8.0,
                low_freq_factor = 1.0, high_freq_factor = 4.0,
                original_max_position_embeddings = 8192>
    #infer.rope<theta = 1.0e+04, kind = yarn, factor = 4.0,
                original_max_position_embeddings = 1024>
    #infer.rope<theta = 1.0e+04, kind = longrope,
                original_max_position_embeddings = 4096,
                short_factor = array<f64: 1.0, 1.1>,
                long_factor = array<f64: 1.0, 4.0>>
    #infer.rope<theta = 1.0e+04, kind = dynamic, factor = 2.0,
                original_max_position_embeddings = 2048>
    ```
  }];

  let parameters = (ins
    Infer_F64Parameter<"base of the inverse frequencies">:$theta,
    EnumParameter<Infer_RopeScalingKind>:$kind,
    Infer_F64Parameter<"scaling factor", "1.0">:$factor,
    Infer_F64Parameter<"llama3 low-frequency factor", "1.0">:$low_freq_factor,
    Infer_F64Parameter<"llama3 high-frequency factor", "4.0">:$high_freq_factor,
    DefaultValuedParameter<"int64_t", "0",
        "trained context length (llama3, yarn, longrope, dynamic)">
        :$original_max_position_embeddings,
    Infer_F64Parameter<"yarn: rotations above which frequencies are kept",
                       "32.0">:$beta_fast,
    Infer_F64Parameter<"yarn: rotations below which frequencies are interpolated",
                       "1.0">:$beta_slow,
    OptionalParameter<"::mlir::DenseF64ArrayAttr",
        "longrope: divisors of the inverse frequencies (short contexts)">
        :$short_factor,
    OptionalParameter<"::mlir::DenseF64ArrayAttr",
        "longrope: divisors of the inverse frequencies (long contexts)">
        :$long_factor
  );
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;

  let builders = [
    AttrBuilder<(ins "double":$theta, "RopeScalingKind":$kind,
                     CArg<"double", "1.0">:$factor,
                     CArg<"double", "1.0">:$lowFreqFactor,
                     CArg<"double", "4.0">:$highFreqFactor,
                     CArg<"int64_t", "0">:$originalMaxPositionEmbeddings,
                     CArg<"double", "32.0">:$betaFast,
                     CArg<"double", "1.0">:$betaSlow,
                     CArg<"::llvm::ArrayRef<double>", "{}">:$shortFactor,
                     CArg<"::llvm::ArrayRef<double>", "{}">:$longFactor), [{
      auto array = [&](::llvm::ArrayRef<double> values) {
        return values.empty() ? ::mlir::DenseF64ArrayAttr()
                              : ::mlir::DenseF64ArrayAttr::get($_ctxt, values);
      };
      return $_get($_ctxt, ::llvm::APFloat(theta), kind, ::llvm::APFloat(factor),
                   ::llvm::APFloat(lowFreqFactor),
                   ::llvm::APFloat(highFreqFactor),
                   originalMaxPositionEmbeddings, ::llvm::APFloat(betaFast),
                   ::llvm::APFloat(betaSlow), array(shortFactor),
                   array(longFactor));
    }]>
  ];
}

//===----------------------------------------------------------------------===//
// KV cache policy
//===----------------------------------------------------------------------===//

def Infer_StreamingAttr : Infer_Attr<"Streaming", "streaming"> {
  let summary = "Attention sinks and a rolling window of the KV cache";
  let description = [{
    StreamingLLM (Xiao et al., 2023): the KV cache of a sequence keeps the
    keys and values of its first `sink_tokens` tokens (the attention sinks)
    and of at least its `window` most recent tokens; the tokens between are
    evicted, a whole KV-cache block at a time, so a sequence runs in bounded
    memory however long it grows. Positions are assigned inside the cache:
    keys are cached without rotary embedding and rotated at their index in
    the sequence's cache when attention reads them, and queries at theirs.

    ```
      sink blocks      evicted            window (>= `window` tokens)
      [ s0 .. s7 ] [ x x x ][ x x x ] [ w ... ][ w ... ][ w .. new ]
      in-cache:  0 .. 7                 8 ...                  ctx-1
    ```

    The sinks are rounded up to whole blocks. `sink_tokens` must be
    non-negative and `window` positive.

    ```mlir
    module attributes {infer.streaming = #infer.streaming<sink_tokens = 4,
                                                          window = 1024>}
    ```
  }];

  let parameters = (ins "int64_t":$sink_tokens, "int64_t":$window);
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
}

//===----------------------------------------------------------------------===//
// Quantization
//===----------------------------------------------------------------------===//

def Infer_Fp8Attr : Infer_Attr<"Fp8", "fp8"> {
  let summary = "An FP8 E4M3 weight with scales computed at load";
  let description = [{
    Marks an `infer.weight` of element type `f8E4M3FN` as quantized from the
    checkpoint (bf16, f16 or f32) when the runtime loads it: each scale is
    `amax / 448` over the tensor (`per_tensor`) or over each output channel,
    a row of dimension 0 (`per_channel`), and each element is the saturating,
    round-to-nearest-even E4M3 code of `x / scale`, so that `decode(code) *
    scale` approximates `x`. In a tensor-parallel program the scales are
    those of the rank's slice. Only projection weights (`infer.linear`,
    `infer.logits`) may be fp8; embeddings and norms keep the checkpoint's
    type.

    ```mlir
    %w = infer.weight "model.layers.0.mlp.down_proj.weight"
        {quant = #infer.fp8<granularity = per_channel>}
        : tensor<384x1024xf8E4M3FN>
    ```
  }];

  let parameters = (ins EnumParameter<Infer_Fp8Granularity>:$granularity);
  let assemblyFormat = "`<` struct(params) `>`";
}

//===----------------------------------------------------------------------===//
// Tensor parallelism
//===----------------------------------------------------------------------===//

def Infer_ShardAttr : Infer_Attr<"Shard", "shard"> {
  let summary = "Which slice of a checkpoint tensor a rank holds";
  let description = [{
    Marks a parameter of a tensor-parallel (SPMD) program as a per-rank slice
    of its checkpoint tensor, so that one checkpoint serves every degree of
    parallelism: the tensor is cut along `dim` into `shards` equal slices and
    rank `r` holds slice `r / replication`. The program runs on
    `shards * replication` ranks; `replication > 1` gives consecutive ranks
    the same slice (key/value heads when there are fewer of them than ranks).

    ```
      k_proj [2 heads * 16, 128], #infer.shard<dim = 0, shards = 2,
                                               replication = 2>
      rank 0, 1 -> rows  0..15 (head 0)    rank 2, 3 -> rows 16..31 (head 1)
    ```

    With `size` (default 0: the whole dimension) only the `size` indices
    from `offset` on are cut: one part of a checkpoint tensor that holds
    several (Phi-3's `qkv_proj` rows are q, then k, then v), each part
    sliced on its own and the rank's slices concatenated
    (`infer.concat_weights`).

    ```
      qkv_proj [128 + 32 + 32, 128], k part: #infer.shard<dim = 0, shards = 2,
                                                offset = 128, size = 32>
      rank 0 -> rows 128..143    rank 1 -> rows 144..159
    ```

    `dim` must be non-negative, `shards` and `replication` positive,
    `offset` and `size` non-negative, and `offset` 0 without a `size`.

    ```mlir
    %w = infer.weight "model.layers.0.self_attn.q_proj.weight"
        {shard = #infer.shard<dim = 0, shards = 2>} : tensor<64x128xf32>
    %k = infer.weight "model.layers.0.self_attn.k_proj.weight"
        {shard = #infer.shard<dim = 0, shards = 2, replication = 2>}
        : tensor<16x128xf32>
    %kp = infer.weight "model.layers.0.self_attn.qkv_proj.weight"
        {shard = #infer.shard<dim = 0, shards = 2, offset = 128, size = 32>}
        : tensor<16x128xf32>
    ```
  }];

  let parameters = (ins
    "int64_t":$dim,
    "int64_t":$shards,
    DefaultValuedParameter<"int64_t", "1",
        "ranks that hold the same slice">:$replication,
    DefaultValuedParameter<"int64_t", "0",
        "first index of the split part along dim">:$offset,
    DefaultValuedParameter<"int64_t", "0",
        "indices of the split part (0: the whole dimension)">:$size
  );
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
  let skipDefaultBuilders = 1;
  let builders = [
    AttrBuilder<(ins "int64_t":$dim, "int64_t":$shards,
                     CArg<"int64_t", "1">:$replication,
                     CArg<"int64_t", "0">:$offset,
                     CArg<"int64_t", "0">:$size), [{
      return $_get($_ctxt, dim, shards, replication, offset, size);
    }]>
  ];

  let extraClassDeclaration = [{
    /// Ranks of the program: shards * replication.
    int64_t getNumRanks() const { return getShards() * getReplication(); }
    /// The slice rank `rank` holds.
    int64_t getShardOf(int64_t rank) const { return rank / getReplication(); }
  }];
}

//===----------------------------------------------------------------------===//
// Tensor parallelism
//===----------------------------------------------------------------------===//

def Infer_ParallelAttr : Infer_Attr<"Parallel", "parallel"> {
  let summary = "How a linear layer splits over tensor-parallel ranks";
  let description = [{
    The importer's word on how `infer-shard-tensor-parallel` splits an
    `infer.linear` (its `parallel` attribute): the one place the
    architecture's layout reaches the pass, which reads no checkpoint names.

    - `column`: output features, the weight's rows (and the bias) cut into
      one slice per rank (q, gate and up projections);
    - `kv_column`: output features by key/value head, replicated over
      consecutive ranks when there are fewer heads than ranks (k and v);
    - `row`: input features, the weight's columns; each rank's product is a
      partial sum completed by `infer.all_reduce`, the bias added once
      after it (o and down projections).

    A `column` linear whose weight stacks several projections (Phi-3's
    `qkv_proj` rows are q, k, v; `gate_up_proj` gate, up) lists their
    widths in `parts`, and in `kv_parts` which of them are split by
    key/value head: each part is cut on its own, and a rank's weight is its
    slice of every part, in order. The linear's result then feeds an
    `infer.split` into those parts.

    `parts` belong to `column` only, with positive entries; `kv_parts` has
    one entry per part.

    ```mlir
    #infer.parallel<column>
    #infer.parallel<row>
    #infer.parallel<column, parts = [128, 32, 32],
                    kv_parts = [false, true, true]>
    ```
  }];

  let parameters = (ins
    EnumParameter<Infer_ParallelStyle>:$style,
    OptionalParameter<"::mlir::DenseI64ArrayAttr",
        "widths of the stacked projections of a fused column linear">:$parts,
    OptionalParameter<"::mlir::DenseBoolArrayAttr",
        "which parts split by key/value head">:$kv_parts
  );
  let assemblyFormat = [{
    `<` $style (`,` `parts` `=` $parts^ `,` `kv_parts` `=` $kv_parts)? `>`
  }];
  let genVerifyDecl = 1;
}

#endif // INFER_IR_INFERATTRS_TD
