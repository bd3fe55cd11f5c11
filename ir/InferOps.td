//===- InferOps.td - infer dialect operations --------------*- tablegen -*-===//
//
// Operations of the infer dialect.
//
//===----------------------------------------------------------------------===//

#ifndef INFER_IR_INFEROPS_TD
#define INFER_IR_INFEROPS_TD

include "ir/InferAttrs.td"
include "ir/InferBase.td"
include "ir/InferTypes.td"
include "mlir/Interfaces/ControlFlowInterfaces.td"
include "mlir/Interfaces/InferTypeOpInterface.td"
include "mlir/Interfaces/SideEffectInterfaces.td"

//===----------------------------------------------------------------------===//
// Type constraints
//===----------------------------------------------------------------------===//

/// Token-major activations `[tokens, features]`.
def Infer_Activation : 2DTensorOf<[AnyFloat]>;
/// A vector of token ids, positions, offsets or indices.
def Infer_IndexVector : 1DTensorOf<[AnySignlessInteger]>;
def Infer_FloatTensor : RankedTensorOf<[AnyFloat]>;

//===----------------------------------------------------------------------===//
// Parameters
//===----------------------------------------------------------------------===//

def Infer_ConcatWeightsOp : Infer_Op<"concat_weights", [Pure]> {
  let summary = "Parameters concatenated along their first dimension at load";
  let description = [{
    Stacks the rows of several parameters into one, in operand order: the
    weight of a merged projection (q/k/v, gate/up) or its bias. Every operand
    must be produced by `infer.weight`, so the runtime performs the
    concatenation once, when it loads the checkpoint (a `concat` weight
    transform in the plan), never per forward call. In a tensor-parallel
    program an operand may be a `shard` of its checkpoint tensor: each rank
    then concatenates its own slice of every operand. The operands share their
    element type and every dimension but the first; the result's first
    dimension is the sum of theirs.

    ```mlir
    %wq = infer.weight "model.layers.0.self_attn.q_proj.weight" : tensor<128x128xbf16>
    %wk = infer.weight "model.layers.0.self_attn.k_proj.weight" : tensor<32x128xbf16>
    %wv = infer.weight "model.layers.0.self_attn.v_proj.weight" : tensor<32x128xbf16>
    %wqkv = infer.concat_weights %wq, %wk, %wv
        : tensor<128x128xbf16>, tensor<32x128xbf16>, tensor<32x128xbf16>
        -> tensor<192x128xbf16>
    ```
  }];

  let arguments = (ins Variadic<AnyRankedTensor>:$inputs);
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = [{
    $inputs attr-dict `:` type($inputs) `->` type($result)
  }];
  let hasVerifier = 1;
}

def Infer_WeightOp : Infer_Op<"weight", [Pure]> {
  let summary = "A model parameter read from the checkpoint";
  let description = [{
    Names one tensor of the checkpoint (its safetensors name). The result has
    a static shape and a float element type: the checkpoint's as imported,
    the one `infer-assign-precision` chooses after it. The runtime binds it
    to the loaded (and, after sharding or quantization, transformed)
    parameter, converting the checkpoint's elements to the result's type
    (round to nearest even) when they differ.

    In a tensor-parallel program, `shard` says which slice of the checkpoint
    tensor each rank holds; the result type is the slice's shape.

    A weight quantized by `infer-quantize-fp8` has element type `f8E4M3FN`
    and `quant = #infer.fp8<...>`, which says how its scales are computed
    when the runtime loads (and, with `shard`, slices) the checkpoint tensor.
    One goes with the other: an fp8 result needs `quant`, `quant` needs
    `f8E4M3FN`.

    ```mlir
    %w = infer.weight "model.embed_tokens.weight" : tensor<4096x384xbf16>
    %q = infer.weight "model.layers.0.self_attn.q_proj.weight"
        {shard = #infer.shard<dim = 0, shards = 2>} : tensor<192x384xbf16>
    %o = infer.weight "model.layers.0.self_attn.o_proj.weight"
        {quant = #infer.fp8<granularity = per_tensor>}
        : tensor<384x384xf8E4M3FN>
    ```
  }];

  let arguments = (ins
    StrAttr:$name,
    OptionalAttr<Infer_ShardAttr>:$shard,
    OptionalAttr<Infer_Fp8Attr>:$quant
  );
  let results = (outs AnyRankedTensor:$result);
  let assemblyFormat = "$name attr-dict `:` type($result)";
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Embedding and projections
//===----------------------------------------------------------------------===//

def Infer_EmbeddingOp : Infer_Op<"embedding", [Pure]> {
  let summary = "Looks up token embeddings";
  let description = [{
    Gathers row `ids[i]` of `table` for every token `i` of the flat batch and
    converts it to the result's element type (exact when the types agree,
    else rounded to nearest even). The table may be of any float type but
    fp8.

    With `vocab_shards = N` the lookup is vocabulary-parallel: `table` is the
    rank's slice of the vocabulary (rank `r` holds rows `r * V .. (r+1) * V`
    of the full table of `N * V` rows) and ids outside the slice give zero
    rows, so an `infer.all_reduce` over the ranks completes the lookup.

    With `scale` every row is multiplied by it, first rounded to the
    result's element type (Gemma's embedding normalizer `sqrt(hidden_size)`,
    a tensor of the activation dtype in Hugging Face); the product is
    computed in fp32 and rounded once.

    ```mlir
    %h = infer.embedding %table[%ids]
        : tensor<4096x384xbf16>, tensor<?xi32> -> tensor<?x384xf32>
    %p = infer.embedding %half[%ids] {vocab_shards = 2 : i64}
        : tensor<2048x384xbf16>, tensor<?xi32> -> tensor<?x384xf32>
    ```
  }];

  let arguments = (ins
    2DTensorOf<[AnyFloat]>:$table,
    Infer_IndexVector:$ids,
    OptionalAttr<I64Attr>:$vocab_shards,
    OptionalAttr<F64Attr>:$scale
  );
  let results = (outs Infer_Activation:$result);
  let assemblyFormat = [{
    $table `[` $ids `]` attr-dict `:` type($table) `,` type($ids) `->`
    type($result)
  }];
  let hasVerifier = 1;
}

def Infer_GatherRowsOp : Infer_Op<"gather_rows", [Pure]> {
  let summary = "Selects rows of an activation";
  let description = [{
    `result[i] = input[indices[i]]`. Selects the flat-batch positions that
    produce logits (the last token of each sequence, or the k+1 positions of
    a speculative verification). A copy: the result has the input's element
    type.

    ```mlir
    %s = infer.gather_rows %x[%logits_indices]
        : tensor<?x384xf32>, tensor<?xi32> -> tensor<?x384xf32>
    ```
  }];

  let arguments = (ins Infer_Activation:$input, Infer_IndexVector:$indices);
  let results = (outs Infer_Activation:$result);
  let assemblyFormat = [{
    $input `[` $indices `]` attr-dict `:` type($input) `,` type($indices) `->`
    type($result)
  }];
  let hasVerifier = 1;
}

def Infer_LinearOp : Infer_Op<"linear", [Pure, AttrSizedOperandSegments,
    OptionalTypesMatchWith<"residual has the result's type", "result",
                           "residual", "$_self">]> {
  let summary = "Fully connected layer: y = x * w^T + b (+ residual)";
  let description = [{
    Multiplies `[T, K]` activations by the transpose of a `[N, K]` weight (the
    PyTorch `nn.Linear` layout) and adds an optional `[N]` bias. The weight
    may be FP8 E4M3 (`f8E4M3FN`, an `infer.weight` with `#infer.fp8` scales,
    or their `infer.concat_weights`): the product uses `decode(code) * scale`.
    The bias is never fp8.

    With `residual(%r)` (`[T, N]`, the result's type) the op returns
    `x * w^T + b + r`: the residual-stream update of a decoder layer's o_proj
    or down_proj, added in the GEMM's epilogue (cuBLASLt's `beta * C`) by
    `infer-fuse-residual` instead of by a separate pass over the rows.

    Precision: the input, the residual and the result share one element
    type; the weight and the bias may be of another float type. The products
    accumulate in fp32, the bias and then the residual are added in fp32, and
    the sum is rounded once to the result's type (cuBLAS's
    `CUBLAS_COMPUTE_32F` with a bf16 output). A bf16 linear with a residual
    thus rounds once where `infer.linear` followed by `infer.add` rounds
    twice.

    An fp8 weight's product on the CUDA backend, past 8 rows, runs on the
    FP8 tensor cores: x is quantized per token to E4M3 and the tensor cores
    keep the partial sums (fast accumulation, as vLLM's FP8 kernels do), so
    that product departs from fp32 accumulation of `decode(code) * scale`
    by the quantization of x (about 2.5% of the largest output) and a tenth
    of that again for the sums (runtime/cuda/Gemm.h).

    `parallel` (`#infer.parallel`, set by the importer) says how
    `infer-shard-tensor-parallel` splits the layer; a linear without one is
    replicated on every rank. Its `parts` add up to the weight's rows. A
    linear with a residual has no `parallel`: fusion runs after sharding, and
    a row-parallel rank's partial sum must not add the residual.

    ```mlir
    %y = infer.linear %x, %w
        : tensor<?x384xf32>, tensor<128x384xbf16> -> tensor<?x128xf32>
    %o = infer.linear %x, %w {parallel = #infer.parallel<row>}
        : tensor<?x384xf32>, tensor<128x384xbf16> -> tensor<?x128xf32>
    %z = infer.linear %x, %w, %b
        : tensor<?x384xf32>, tensor<128x384xbf16>, tensor<128xbf16>
        -> tensor<?x128xf32>
    %s = infer.linear %x, %w, %b residual(%r)
        : tensor<?x384xf32>, tensor<128x384xbf16>, tensor<128xbf16>
        -> tensor<?x128xf32>
    ```
  }];

  let arguments = (ins
    Infer_Activation:$input,
    2DTensorOf<[AnyFloat]>:$weight,
    Optional<1DTensorOf<[AnyFloat]>>:$bias,
    Optional<Infer_Activation>:$residual,
    OptionalAttr<Infer_ParallelAttr>:$parallel
  );
  let results = (outs Infer_Activation:$result);
  let assemblyFormat = [{
    $input `,` $weight (`,` $bias^)? (`residual` `(` $residual^ `)`)?
    attr-dict `:` type($input) `,` type($weight) (`,` type($bias)^)? `->`
    type($result)
  }];
  let builders = [
    OpBuilder<(ins "Type":$result, "Value":$input, "Value":$weight,
                   CArg<"Value", "{}">:$bias,
                   CArg<"::mlir::infer::ParallelAttr", "{}">:$parallel), [{
      build($_builder, $_state, result, input, weight, bias, Value(),
            parallel);
    }]>
  ];
  let hasVerifier = 1;
}

def Infer_LogitsOp : Infer_Op<"logits", [Pure]> {
  let summary = "Final projection onto the vocabulary";
  let description = [{
    Projects `[S, H]` hidden states onto the `[V, H]` vocabulary weight (the
    LM head, or the tied embedding table) and produces f32 logits `[S, V]`.
    The weight may be FP8 E4M3, as that of `infer.linear`.

    Precision: the one op whose input and result types differ. The hidden
    states may be of any float type; the products accumulate in fp32 and the
    logits stay fp32, unrounded, for sampling (vLLM's and TensorRT-LLM's LM
    head output).

    With `softcap = c` (Gemma 2's `final_logit_softcapping`) each logit `l`
    becomes `c * tanh(l / c)`, in fp32.

    ```mlir
    %l = infer.logits %x, %w
        : tensor<?x384xf32>, tensor<4096x384xbf16> -> tensor<?x4096xf32>
    ```
  }];

  let arguments = (ins
    Infer_Activation:$input,
    2DTensorOf<[AnyFloat]>:$weight,
    OptionalAttr<F64Attr>:$softcap
  );
  let results = (outs 2DTensorOf<[F32]>:$result);
  let assemblyFormat = [{
    $input `,` $weight attr-dict `:` type($input) `,` type($weight) `->`
    type($result)
  }];
  let hasVerifier = 1;
}

def Infer_SplitOp : Infer_Op<"split", [Pure]> {
  let summary = "Splits activations into consecutive column blocks";
  let description = [{
    Result `i` holds the columns of `input` that follow those of results
    `0 .. i-1`; the feature widths of the results add up to the input's.
    `infer-fuse` uses it to hand the parts of a merged projection (q, k and v
    of one GEMM) to their consumers. A copy: every result has the input's
    element type.

    ```mlir
    %q, %k, %v = infer.split %qkv
        : tensor<?x192xf32> -> tensor<?x128xf32>, tensor<?x32xf32>,
                               tensor<?x32xf32>
    ```
  }];

  let arguments = (ins Infer_Activation:$input);
  let results = (outs Variadic<Infer_Activation>:$results);
  let assemblyFormat = "$input attr-dict `:` type($input) `->` type($results)";
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Normalization and positions
//===----------------------------------------------------------------------===//

def Infer_AddRMSNormOp : Infer_Op<"add_rms_norm", [Pure]> {
  let summary = "Residual addition followed by RMS normalization";
  let description = [{
    Returns `sum = lhs + rhs` and `infer.rms_norm` of `sum`: the residual
    update of a decoder layer and the normalization that feeds the next
    block, computed in one pass over the row. Both results are needed: the
    sum is the residual stream the next layer adds to.

    Precision: operands and results share one element type (the weight may
    be of another float type). The sum is computed in fp32 and rounded once
    to that type, and the normalization reads the rounded sum, so the op
    computes exactly `infer.add` followed by `infer.rms_norm`, as Hugging
    Face's separate add and norm and vLLM's `fused_add_rms_norm` do. The
    residual stream thus has the activation type. `weight_offset` is
    `infer.rms_norm`'s.

    ```mlir
    %sum, %y = infer.add_rms_norm %residual, %x, %w {epsilon = 1.0e-05 : f64}
        : tensor<?x384xf32>, tensor<?x384xf32>, tensor<384xbf16>
        -> tensor<?x384xf32>, tensor<?x384xf32>
    ```
  }];

  let arguments = (ins
    Infer_FloatTensor:$lhs,
    Infer_FloatTensor:$rhs,
    1DTensorOf<[AnyFloat]>:$weight,
    F64Attr:$epsilon,
    OptionalAttr<F64Attr>:$weight_offset
  );
  let results = (outs Infer_FloatTensor:$sum, Infer_FloatTensor:$result);
  let assemblyFormat = [{
    $lhs `,` $rhs `,` $weight attr-dict `:` type($lhs) `,` type($rhs) `,`
    type($weight) `->` type($sum) `,` type($result)
  }];
  let hasVerifier = 1;
}

def Infer_RMSNormOp : Infer_Op<"rms_norm", [Pure]> {
  let summary = "Root-mean-square layer normalization";
  let description = [{
    `y = x / sqrt(mean(x^2, last axis) + epsilon) * (weight_offset + weight)`.

    With `head_dim`, each `head_dim`-wide group of features (one attention
    head) is normalized on its own and `weight` has `head_dim` entries: the
    per-head query and key norms of Qwen3 and Gemma 3. `weight_offset`
    (default 0) is added to every weight entry in fp32: Gemma's RMSNorm
    scales by `1 + weight`.

    Precision: the input and the result share one element type; the weight
    may be of another float type. The mean of squares, the reciprocal square
    root and the normalized product with the (offset) weight are computed in
    fp32 and rounded once to the result's type.

    ```mlir
    %y = infer.rms_norm %x, %w {epsilon = 1.0e-05 : f64}
        : tensor<?x384xf32>, tensor<384xbf16> -> tensor<?x384xf32>
    %qn = infer.rms_norm %q, %wq {epsilon = 1.0e-06 : f64, head_dim = 64 : i64}
        : tensor<?x384xf32>, tensor<64xbf16> -> tensor<?x384xf32>
    %g = infer.rms_norm %x, %w {epsilon = 1.0e-06 : f64, weight_offset = 1.0 : f64}
        : tensor<?x384xf32>, tensor<384xbf16> -> tensor<?x384xf32>
    ```
  }];

  let arguments = (ins
    Infer_FloatTensor:$input,
    1DTensorOf<[AnyFloat]>:$weight,
    F64Attr:$epsilon,
    OptionalAttr<I64Attr>:$head_dim,
    OptionalAttr<F64Attr>:$weight_offset
  );
  let results = (outs Infer_FloatTensor:$result);
  let assemblyFormat = [{
    $input `,` $weight attr-dict `:` type($input) `,` type($weight) `->`
    type($result)
  }];
  let hasVerifier = 1;
}

def Infer_RopeOp : Infer_Op<"rope", [Pure]> {
  let summary = "Rotary position embedding";
  let description = [{
    Rotates the first `rotary_dim` features of every `head_dim`-wide head of
    `input` by angles `positions[t] * inv_freq`, with the Hugging Face
    `rotate_half` convention (the two halves of the rotary part are the real
    and imaginary parts). `rope` gives the frequencies and their scaling.

    A `dynamic` rope (dynamic NTK) also takes the batch's `query_start_loc`
    (present exactly then): the frequencies of a sequence's tokens depend on
    the sequence's length after the step, its last position in the batch
    + 1, so each sequence gets its own and none depends on the rest of the
    batch.

    Precision: the result has the input's type. The angles, their cosines
    and sines and the rotation are computed in fp32, and each result element
    is rounded once.

    ```mlir
    %y = infer.rope %x, %positions {head_dim = 64 : i64, rotary_dim = 64 : i64,
                                    rope = #infer.rope<theta = 1.0e+04, kind = default>}
        : tensor<?x384xf32>, tensor<?xi32> -> tensor<?x384xf32>
    %z = infer.rope %x, %positions, %query_start_loc
        {head_dim = 64 : i64, rotary_dim = 64 : i64,
         rope = #infer.rope<theta = 1.0e+04, kind = dynamic, factor = 2.0,
                            original_max_position_embeddings = 2048>}
        : tensor<?x384xf32>, tensor<?xi32>, tensor<?xi32> -> tensor<?x384xf32>
    ```
  }];

  let arguments = (ins
    Infer_Activation:$input,
    Infer_IndexVector:$positions,
    Optional<Infer_IndexVector>:$query_start_loc,
    I64Attr:$head_dim,
    I64Attr:$rotary_dim,
    Infer_RopeAttr:$rope
  );
  let results = (outs Infer_Activation:$result);
  let assemblyFormat = [{
    $input `,` $positions (`,` $query_start_loc^)? attr-dict `:` type($input)
    `,` type($positions) (`,` type($query_start_loc)^)? `->` type($result)
  }];
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Elementwise
//===----------------------------------------------------------------------===//

def Infer_AddOp : Infer_Op<"add", [Pure, SameOperandsAndResultType]> {
  let summary = "Elementwise addition";
  let description = [{
    Precision: operands and result share one element type; each element is
    loaded to fp32, computed in fp32 and rounded once to the result's type.

    ```mlir
    %y = infer.add %a, %b : tensor<?x384xf32>
    ```
  }];

  let arguments = (ins Infer_FloatTensor:$lhs, Infer_FloatTensor:$rhs);
  let results = (outs Infer_FloatTensor:$result);
  let assemblyFormat = "$lhs `,` $rhs attr-dict `:` type($result)";
}

def Infer_BiasAddOp
    : Infer_Op<"bias_add", [Pure, AllTypesMatch<["input", "result"]>]> {
  let summary = "Adds a bias row to every row: y[t, :] = x[t, :] + b";
  let description = [{
    Adds the `[N]` bias to each row of `[T, N]` activations. The bias of a
    row-parallel projection under tensor parallelism: each rank computes
    its partial `infer.linear` without it, `infer.all_reduce` sums the
    partials, and the bias is added once, after the sum (Megatron-LM's
    `RowParallelLinear`), not once per rank.

    Precision: the input and the result share one element type; the bias may
    be of another float type. The sum is computed in fp32 and rounded once.

    ```mlir
    %p = infer.linear %x, %w
        : tensor<?x64xf32>, tensor<384x64xbf16> -> tensor<?x384xf32>
    %s = infer.all_reduce %p : tensor<?x384xf32>
    %y = infer.bias_add %s, %b : tensor<?x384xf32>, tensor<384xbf16>
    ```
  }];

  let arguments = (ins Infer_Activation:$input, 1DTensorOf<[AnyFloat]>:$bias);
  let results = (outs Infer_Activation:$result);
  let assemblyFormat = [{
    $input `,` $bias attr-dict `:` type($input) `,` type($bias)
  }];
  let hasVerifier = 1;
}

def Infer_CastOp : Infer_Op<"cast", [Pure, SameOperandsAndResultShape]> {
  let summary = "Converts a tensor to another float element type";
  let description = [{
    Converts every element of `input` to the result's element type, rounding
    to nearest, ties to even (`torch.Tensor.to`, CUDA's
    `__float2bfloat16_rn`); a widening cast is exact. Element types are
    f32, bf16 or f16, and the two differ.

    The one op that changes the precision of an activation: the other ops
    reject operands of mixed float types (see the dialect's "Precision").
    `infer-assign-precision` inserts casts where an op's operand type differs
    from its producer's result type.

    ```mlir
    %y = infer.cast %x : tensor<?x384xf32> -> tensor<?x384xbf16>
    ```
  }];

  let arguments = (ins RankedTensorOf<[F16, BF16, F32]>:$input);
  let results = (outs RankedTensorOf<[F16, BF16, F32]>:$result);
  let assemblyFormat = [{
    $input attr-dict `:` type($input) `->` type($result)
  }];
  let hasVerifier = 1;
}

def Infer_GeluOp : Infer_Op<"gelu", [Pure, SameOperandsAndResultType]> {
  let summary = "Gaussian error linear unit";
  let description = [{
    `approximate` selects the exact erf form (`"none"`, the default) or the
    tanh approximation (`"tanh"`), as in `torch.nn.functional.gelu`.

    Precision: operands and result share one element type; each element is
    loaded to fp32, computed in fp32 and rounded once to the result's type.

    ```mlir
    %y = infer.gelu %x {approximate = "tanh"} : tensor<?x1024xf32>
    ```
  }];

  let arguments = (ins
    Infer_FloatTensor:$input,
    DefaultValuedStrAttr<StrAttr, "none">:$approximate
  );
  let results = (outs Infer_FloatTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($result)";
  let hasVerifier = 1;
}

def Infer_MulOp : Infer_Op<"mul", [Pure, SameOperandsAndResultType]> {
  let summary = "Elementwise multiplication";
  let description = [{
    Precision: operands and result share one element type; each element is
    loaded to fp32, computed in fp32 and rounded once to the result's type.

    ```mlir
    %y = infer.mul %a, %b : tensor<?x1024xf32>
    ```
  }];

  let arguments = (ins Infer_FloatTensor:$lhs, Infer_FloatTensor:$rhs);
  let results = (outs Infer_FloatTensor:$result);
  let assemblyFormat = "$lhs `,` $rhs attr-dict `:` type($result)";
}

def Infer_SiluOp : Infer_Op<"silu", [Pure, SameOperandsAndResultType]> {
  let summary = "Sigmoid linear unit: x * sigmoid(x)";
  let description = [{
    Precision: operands and result share one element type; each element is
    loaded to fp32, computed in fp32 and rounded once to the result's type.

    ```mlir
    %y = infer.silu %x : tensor<?x1024xf32>
    ```
  }];

  let arguments = (ins Infer_FloatTensor:$input);
  let results = (outs Infer_FloatTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($result)";
}

def Infer_LinearSwiGluOp : Infer_Op<"linear_swiglu", [Pure]> {
  let summary = "The gate/up projection and SwiGLU of an MLP in one GEMM";
  let description = [{
    `silu(x * w_gate^T) * (x * w_up^T)` for a `[2I, K]` weight whose first
    `I` rows are the gate projection's and the rest the up projection's (the
    `infer.concat_weights` of the two that `infer-fuse` makes): what
    `infer.linear` of that weight, `infer.split` of its result in halves and
    `infer.silu_mul` of the halves compute, as one op. `infer-fuse` forms
    it, so that the CUDA backend runs one GEMM whose epilogue applies the
    activation: gate and up never leave the accumulators, and the `[T, 2I]`
    product is neither written nor read back.

    Precision: the input and the result share one element type; the weight
    may be of another float type (FP8 E4M3 as for `infer.linear`). Both
    products accumulate in fp32, `silu(gate) * up` is computed in fp32 and
    rounded once to the result's type: a bf16 program rounds once where
    linear, split and silu_mul round twice.

    ```mlir
    %y = infer.linear_swiglu %x, %w
        : tensor<?x128xbf16>, tensor<512x128xbf16> -> tensor<?x256xbf16>
    ```
  }];

  let arguments = (ins Infer_Activation:$input, 2DTensorOf<[AnyFloat]>:$weight);
  let results = (outs Infer_Activation:$result);
  let assemblyFormat = [{
    $input `,` $weight attr-dict `:` type($input) `,` type($weight) `->`
    type($result)
  }];
  let hasVerifier = 1;
}

def Infer_SiluMulOp : Infer_Op<"silu_mul", [Pure, SameOperandsAndResultType]> {
  let summary = "Gated activation: silu(gate) * up";
  let description = [{
    The SwiGLU gate of a Llama MLP, `infer.silu` of `gate` times `up`, in one
    pass.

    Precision: operands and result share one element type; each element is
    loaded to fp32, computed in fp32 and rounded once to the result's type
    (`silu(gate)` is not rounded on its own).

    ```mlir
    %y = infer.silu_mul %gate, %up : tensor<?x1024xf32>
    ```
  }];

  let arguments = (ins Infer_FloatTensor:$gate, Infer_FloatTensor:$up);
  let results = (outs Infer_FloatTensor:$result);
  let assemblyFormat = "$gate `,` $up attr-dict `:` type($result)";
}

//===----------------------------------------------------------------------===//
// Attention
//===----------------------------------------------------------------------===//

def Infer_AttentionOp : Infer_Op<"attention", [Pure]> {
  let summary = "Logical causal multi-head attention";
  let description = [{
    Causal grouped-query attention over the flat batch: the tokens of
    sequence `s` are rows `query_start_loc[s] .. query_start_loc[s+1]`, and
    each attends to every token of its own sequence up to itself, including
    those of earlier steps (the `infer-page-kv-cache` pass turns this into
    explicit cache writes and paged attention). Query head `h` reads
    key/value head `h / (num_heads / num_kv_heads)`.

    `sliding_window = 0` means no window; otherwise a query at position `p`
    sees keys at positions `> p - sliding_window` (Mistral semantics).
    With `logit_softcap = c` (Gemma 2's `attn_logit_softcapping`) each
    scaled score `s` becomes `c * tanh(s / c)` before the softmax.
    `layer` is the decoder layer, used to place the layer in the KV cache.

    Precision: queries, keys, values and the result share one element type.
    The scores, the softmax and the weighted sum of the values are fp32, and
    the output is rounded once to the result's type (FlashAttention's
    numerics).

    ```mlir
    %o = infer.attention %q, %k, %v, %query_start_loc
        {layer = 0 : i64, num_heads = 6 : i64, num_kv_heads = 2 : i64,
         head_dim = 64 : i64, scale = 1.250000e-01 : f64,
         sliding_window = 0 : i64}
        : tensor<?x384xf32>, tensor<?x128xf32>, tensor<?x128xf32>,
          tensor<?xi32> -> tensor<?x384xf32>
    ```
  }];

  let arguments = (ins
    Infer_Activation:$query,
    Infer_Activation:$key,
    Infer_Activation:$value,
    Infer_IndexVector:$query_start_loc,
    I64Attr:$layer,
    I64Attr:$num_heads,
    I64Attr:$num_kv_heads,
    I64Attr:$head_dim,
    F64Attr:$scale,
    I64Attr:$sliding_window,
    OptionalAttr<F64Attr>:$logit_softcap
  );
  let results = (outs Infer_Activation:$result);
  let assemblyFormat = [{
    $query `,` $key `,` $value `,` $query_start_loc attr-dict `:`
    type($query) `,` type($key) `,` type($value) `,` type($query_start_loc)
    `->` type($result)
  }];
  let hasVerifier = 1;
}

def Infer_KVCacheWriteOp : Infer_Op<"kv_cache_write", [Pure]> {
  let summary = "Stores the keys and values of new tokens in the KV cache";
  let description = [{
    Writes `key[t]` and `value[t]` of every token `t` of the flat batch into
    slot `slot_mapping[t]` (`block * block_size + offset`) of layer `layer`
    and returns the updated cache.

    Precision: keys and values share one element type, which is the cache's
    unless the cache is fp8: then the write quantizes them (see
    `!infer.kv_cache`).

    ```mlir
    %c1 = infer.kv_cache_write %c0, %k, %v, %slot_mapping {layer = 0 : i64}
        : !infer.kv_cache<num_layers = 2, num_kv_heads = 2, block_size = 16,
                          head_dim = 64, element_type = f32>,
          tensor<?x128xf32>, tensor<?x128xf32>, tensor<?xi64>
        -> !infer.kv_cache<num_layers = 2, num_kv_heads = 2, block_size = 16,
                           head_dim = 64, element_type = f32>
    ```
  }];

  let arguments = (ins
    Infer_KVCacheType:$cache,
    Infer_Activation:$key,
    Infer_Activation:$value,
    Infer_IndexVector:$slot_mapping,
    I64Attr:$layer
  );
  let results = (outs Infer_KVCacheType:$result);
  let assemblyFormat = [{
    $cache `,` $key `,` $value `,` $slot_mapping attr-dict `:`
    qualified(type($cache)) `,` type($key) `,` type($value) `,`
    type($slot_mapping) `->` qualified(type($result))
  }];
  let hasVerifier = 1;
}

def Infer_PagedAttentionOp : Infer_Op<"paged_attention", [Pure]> {
  let summary = "Causal attention reading keys and values from the KV cache";
  let description = [{
    The attention of `infer.attention` with keys and values read from layer
    `layer` of the paged cache: sequence `s` owns the blocks
    `block_tables[s, 0 .. ceil(context_lens[s] / block_size))`, holding its
    `context_lens[s]` tokens, and its queries (rows
    `query_start_loc[s] .. query_start_loc[s+1]`) are the last of them.

    ```
      block_tables[s] = [7, 2, 9]      block_size = 4, context_lens[s] = 10
      tokens 0-3 -> block 7, 4-7 -> block 2, 8-9 -> block 9 (slots 36, 37)
    ```

    With `key_rope` (and `key_rotary_dim`, both or neither) the cache holds
    keys without rotary embedding, and each key is rotated by `key_rope` at
    its index `0 .. context_lens[s])` in the sequence's cache when it is
    read: the position shift of StreamingLLM (`infer-streaming-kv`), under
    which evicting tokens renumbers the keys after them without rewriting
    the cache. Such an attention has no `sliding_window`.

    Precision: the query and the result share one element type, which is
    the cache's unless the cache is fp8 (then keys and values are decoded as
    they are read). Key rotation, scores, softmax and the weighted sum are
    fp32, and the output is rounded once.

    ```mlir
    %o = infer.paged_attention %q, %c1, %block_tables, %context_lens,
                               %query_start_loc
        {layer = 0 : i64, num_heads = 6 : i64, num_kv_heads = 2 : i64,
         head_dim = 64 : i64, scale = 1.250000e-01 : f64,
         sliding_window = 0 : i64}
        : tensor<?x384xf32>,
          !infer.kv_cache<num_layers = 2, num_kv_heads = 2, block_size = 16,
                          head_dim = 64, element_type = f32>,
          tensor<?x?xi32>, tensor<?xi32>, tensor<?xi32> -> tensor<?x384xf32>
    ```
  }];

  let arguments = (ins
    Infer_Activation:$query,
    Infer_KVCacheType:$cache,
    2DTensorOf<[AnySignlessInteger]>:$block_tables,
    Infer_IndexVector:$context_lens,
    Infer_IndexVector:$query_start_loc,
    I64Attr:$layer,
    I64Attr:$num_heads,
    I64Attr:$num_kv_heads,
    I64Attr:$head_dim,
    F64Attr:$scale,
    I64Attr:$sliding_window,
    OptionalAttr<Infer_RopeAttr>:$key_rope,
    OptionalAttr<I64Attr>:$key_rotary_dim,
    OptionalAttr<F64Attr>:$logit_softcap
  );
  let results = (outs Infer_Activation:$result);
  let assemblyFormat = [{
    $query `,` $cache `,` $block_tables `,` $context_lens `,` $query_start_loc
    attr-dict `:` type($query) `,` qualified(type($cache)) `,`
    type($block_tables) `,`
    type($context_lens) `,` type($query_start_loc) `->` type($result)
  }];
  let hasVerifier = 1;
}

def Infer_RopeKVCacheWriteOp : Infer_Op<"rope_kv_cache_write", [Pure]> {
  let summary = "Rotates new keys and stores them and the values in the cache";
  let description = [{
    `infer.kv_cache_write` of `infer.rope(key, positions)` and `value`: the
    keys are rotated on their way into the cache, so the rotated keys never
    exist as a separate activation. The attributes are those of the
    `infer.rope` (`head_dim`, `rotary_dim`, `rope`) and the
    `infer.kv_cache_write` (`layer`) it replaces, and so is the
    `query_start_loc` of a `dynamic` rope. The rotation is fp32, and
    the rotated key is rounded once, to the cache's element type; keys and
    values are typed as for `infer.kv_cache_write`.

    ```mlir
    %c1 = infer.rope_kv_cache_write %c0, %k, %v, %slot_mapping, %positions
        {layer = 0 : i64, head_dim = 64 : i64, rotary_dim = 64 : i64,
         rope = #infer.rope<theta = 1.0e+04, kind = default>}
        : !infer.kv_cache<num_layers = 2, num_kv_heads = 2, block_size = 16,
                          head_dim = 64, element_type = f32>,
          tensor<?x128xf32>, tensor<?x128xf32>, tensor<?xi64>, tensor<?xi32>
        -> !infer.kv_cache<num_layers = 2, num_kv_heads = 2, block_size = 16,
                           head_dim = 64, element_type = f32>
    ```
  }];

  let arguments = (ins
    Infer_KVCacheType:$cache,
    Infer_Activation:$key,
    Infer_Activation:$value,
    Infer_IndexVector:$slot_mapping,
    Infer_IndexVector:$positions,
    Optional<Infer_IndexVector>:$query_start_loc,
    I64Attr:$layer,
    I64Attr:$head_dim,
    I64Attr:$rotary_dim,
    Infer_RopeAttr:$rope
  );
  let results = (outs Infer_KVCacheType:$result);
  let assemblyFormat = [{
    $cache `,` $key `,` $value `,` $slot_mapping `,` $positions
    (`,` $query_start_loc^)? attr-dict `:`
    qualified(type($cache)) `,` type($key) `,` type($value) `,`
    type($slot_mapping) `,` type($positions) (`,` type($query_start_loc)^)?
    `->` qualified(type($result))
  }];
  let hasVerifier = 1;
}

def Infer_RopeQKVCacheWriteOp : Infer_Op<"rope_qkv_cache_write", [Pure]> {
  let summary = "Rotates new queries and keys, stores keys and values in the "
                "cache";
  let description = [{
    `infer.rope(query, positions)` and `infer.rope_kv_cache_write(cache, key,
    value, slot_mapping, positions)` of one layer with one rope: the queries
    and the keys are rotated by the same frequencies at the same positions,
    so one pass over a token's q/k/v row takes the rotation factors once,
    rotates the queries into `rotated_query` and writes the rotated keys and
    the values into the cache. `infer-fuse` forms it for the queries that
    the layer's `infer.paged_attention` reads from the cache written.

    The attributes are those of `infer.rope_kv_cache_write` (`layer`,
    `head_dim`, `rotary_dim`, `rope`), which apply to the queries too, and
    so is the `query_start_loc` of a `dynamic` rope. The query holds a whole
    number of `head_dim`-wide heads and has the keys' element type;
    `rotated_query` has the query's type. Precision is that of the two ops
    it replaces: the rotations are fp32, each rotated query element is
    rounded once to the query's type, and each rotated key once to the
    cache's element type.

    ```mlir
    %qr, %c1 = infer.rope_qkv_cache_write %c0, %q, %k, %v, %slot_mapping,
                                          %positions
        {layer = 0 : i64, head_dim = 64 : i64, rotary_dim = 64 : i64,
         rope = #infer.rope<theta = 1.0e+04, kind = default>}
        : !infer.kv_cache<num_layers = 2, num_kv_heads = 2, block_size = 16,
                          head_dim = 64, element_type = f32>,
          tensor<?x384xf32>, tensor<?x128xf32>, tensor<?x128xf32>,
          tensor<?xi64>, tensor<?xi32>
        -> tensor<?x384xf32>,
           !infer.kv_cache<num_layers = 2, num_kv_heads = 2, block_size = 16,
                           head_dim = 64, element_type = f32>
    ```
  }];

  let arguments = (ins
    Infer_KVCacheType:$cache,
    Infer_Activation:$query,
    Infer_Activation:$key,
    Infer_Activation:$value,
    Infer_IndexVector:$slot_mapping,
    Infer_IndexVector:$positions,
    Optional<Infer_IndexVector>:$query_start_loc,
    I64Attr:$layer,
    I64Attr:$head_dim,
    I64Attr:$rotary_dim,
    Infer_RopeAttr:$rope
  );
  let results = (outs Infer_Activation:$rotated_query,
                      Infer_KVCacheType:$result);
  let assemblyFormat = [{
    $cache `,` $query `,` $key `,` $value `,` $slot_mapping `,` $positions
    (`,` $query_start_loc^)? attr-dict `:`
    qualified(type($cache)) `,` type($query) `,` type($key) `,`
    type($value) `,` type($slot_mapping) `,` type($positions)
    (`,` type($query_start_loc)^)? `->` type($rotated_query) `,`
    qualified(type($result))
  }];
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Fusion
//===----------------------------------------------------------------------===//

def Infer_FusedOp : Infer_Op<"fused", [IsolatedFromAbove, Pure, SingleBlock]> {
  let summary = "A group of elementwise operations run as one kernel";
  let description = [{
    The body computes the results from the inputs (its block arguments, one
    per input) with elementwise operations only (`infer.add`, `infer.gelu`,
    `infer.mul`, `infer.silu`, `infer.silu_mul`) and yields them with
    `infer.yield`. Every input and result has the same shape. Code
    generation turns each region into one kernel that reads every input
    element once and writes every result element once; the intermediate
    values stay in registers.

    Precision: the body computes in fp32, and its types say so. Inputs and
    results may be of any float type; each block argument is its input
    loaded to f32 (the input's shape with f32 elements), the body's
    operations are f32, and each yielded f32 value is rounded once to its
    result's type. Intermediate values are never rounded.

    ```mlir
    %y = infer.fused ins(%gate, %up : tensor<?x1024xbf16>, tensor<?x1024xbf16>)
        -> tensor<?x1024xbf16> {
    ^bb0(%g: tensor<?x1024xf32>, %u: tensor<?x1024xf32>):
      %a = infer.gelu %g {approximate = "tanh"} : tensor<?x1024xf32>
      %m = infer.mul %a, %u : tensor<?x1024xf32>
      infer.yield %m : tensor<?x1024xf32>
    }
    ```
  }];

  let arguments = (ins Variadic<Infer_FloatTensor>:$inputs);
  let results = (outs Variadic<Infer_FloatTensor>:$results);
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat = [{
    `ins` `(` $inputs `:` type($inputs) `)` attr-dict `->` type($results)
    $body
  }];
  let hasRegionVerifier = 1;
}

def Infer_YieldOp : Infer_Op<"yield", [
    HasParent<"FusedOp">, Pure, ReturnLike, Terminator]> {
  let summary = "Returns the results of an `infer.fused` body";
  let description = [{
    ```mlir
    infer.yield %m : tensor<?x1024xf32>
    ```
  }];

  let arguments = (ins Variadic<Infer_FloatTensor>:$values);
  let assemblyFormat = "($values^ `:` type($values))? attr-dict";
}

//===----------------------------------------------------------------------===//
// Collectives
//===----------------------------------------------------------------------===//

def Infer_AllGatherOp : Infer_Op<"all_gather", [Pure]> {
  let summary = "Concatenates every rank's tensor along a dimension";
  let description = [{
    Collective over the ranks of a tensor-parallel program: every rank
    receives the concatenation, in rank order, of all ranks' `input` along
    `dim`. The result is `input` with dimension `dim` multiplied by the
    number of ranks; the other dimensions are unchanged. Gathers the
    vocabulary-parallel logits. A copy: the result has the input's element
    type.

    ```mlir
    %all = infer.all_gather %part {dim = 1 : i64}
        : tensor<?x2048xf32> -> tensor<?x4096xf32>
    ```
  }];

  let arguments = (ins Infer_FloatTensor:$input, I64Attr:$dim);
  let results = (outs Infer_FloatTensor:$result);
  let assemblyFormat = [{
    $input attr-dict `:` type($input) `->` type($result)
  }];
  let hasVerifier = 1;
}

def Infer_AllReduceOp : Infer_Op<"all_reduce", [Pure,
                                                SameOperandsAndResultType]> {
  let summary = "Sums a tensor over the ranks";
  let description = [{
    Collective over the ranks of a tensor-parallel program: every rank
    receives the elementwise sum of all ranks' `input`. Completes
    row-parallel projections (each rank holds a partial sum) and
    vocabulary-parallel embeddings.

    Precision: the result has the input's element type. How the partial sums
    are accumulated and rounded on their way is the collective library's
    (NCCL adds two values at a time and rounds each sum to the element type).

    ```mlir
    %h = infer.all_reduce %partial : tensor<?x384xf32>
    ```
  }];

  let arguments = (ins Infer_FloatTensor:$input);
  let results = (outs Infer_FloatTensor:$result);
  let assemblyFormat = "$input attr-dict `:` type($result)";
}

#endif // INFER_IR_INFEROPS_TD
