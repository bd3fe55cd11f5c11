//===- InferEnums.td - infer dialect enumerations ----------*- tablegen -*-===//
//
// Enumerations used by the attributes and operations of the infer dialect.
//
//===----------------------------------------------------------------------===//

#ifndef INFER_IR_INFERENUMS_TD
#define INFER_IR_INFERENUMS_TD

include "mlir/IR/EnumAttr.td"

def Infer_RopeScalingKind : I32EnumAttr<"RopeScalingKind",
    "how rotary position embedding frequencies are scaled", [
      I32EnumAttrCase<"Default", 0, "default">,
      I32EnumAttrCase<"Linear", 1, "linear">,
      I32EnumAttrCase<"Llama3", 2, "llama3">,
      I32EnumAttrCase<"Yarn", 3, "yarn">,
      I32EnumAttrCase<"LongRope", 4, "longrope">,
      I32EnumAttrCase<"Dynamic", 5, "dynamic">
    ]> {
  let cppNamespace = "::mlir::infer";
  let genSpecializedAttr = 0;
  let description = [{
    The `rope_scaling.rope_type` of a Hugging Face configuration:

    - `default`: plain RoPE, inverse frequencies `theta^(-2i/d)`;
    - `linear`: positions divided by `factor` (position interpolation);
    - `llama3`: Llama 3.1 frequency-dependent scaling between
      `low_freq_factor` and `high_freq_factor` wavelengths;
    - `yarn`: YaRN (Peng et al., 2023): frequencies interpolated by `factor`
      below `beta_slow` rotations over `original_max_position_embeddings`,
      kept above `beta_fast`, ramped linearly between;
    - `longrope`: LongRoPE / "su" (Phi-3): each inverse frequency divided by
      its `short_factor` entry, or its `long_factor` entry for tokens at
      positions `>= original_max_position_embeddings`;
    - `dynamic`: dynamic NTK: while a sequence is no longer than
      `original_max_position_embeddings` (config.json's
      `max_position_embeddings`), plain RoPE; past it, the base becomes
      `theta * (factor * L / original - (factor - 1))^(d / (d - 2))` for a
      sequence of length `L` (`d` = `rotary_dim`). `L` is the sequence's
      length after the step: its last position in the step + 1, read from
      the op's `query_start_loc` operand.
  }];
}

def Infer_ParallelStyle : I32EnumAttr<"ParallelStyle",
    "how a linear layer splits over tensor-parallel ranks", [
      I32EnumAttrCase<"Column", 0, "column">,
      I32EnumAttrCase<"KVColumn", 1, "kv_column">,
      I32EnumAttrCase<"Row", 2, "row">
    ]> {
  let cppNamespace = "::mlir::infer";
  let genSpecializedAttr = 0;
  let description = [{
    The split of `#infer.parallel`: `column` (output features), `kv_column`
    (output features by key/value head), `row` (input features).
  }];
}

def Infer_Fp8Granularity : I32EnumAttr<"Fp8Granularity",
    "how many scales an fp8 weight has", [
      I32EnumAttrCase<"PerTensor", 0, "per_tensor">,
      I32EnumAttrCase<"PerChannel", 1, "per_channel">
    ]> {
  let cppNamespace = "::mlir::infer";
  let genSpecializedAttr = 0;
  let description = [{
    The scale granularity of an FP8 E4M3 weight (`#infer.fp8`):

    - `per_tensor`: one scale for the whole (per-rank) tensor;
    - `per_channel`: one scale per output channel (row of dimension 0).
  }];
}

#endif // INFER_IR_INFERENUMS_TD
