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
      I32EnumAttrCase<"Llama3", 2, "llama3">
    ]> {
  let cppNamespace = "::mlir::infer";
  let genSpecializedAttr = 0;
  let description = [{
    The `rope_scaling.rope_type` of a Hugging Face configuration:

    - `default`: plain RoPE, inverse frequencies `theta^(-2i/d)`;
    - `linear`: positions divided by `factor` (position interpolation);
    - `llama3`: Llama 3.1 frequency-dependent scaling between
      `low_freq_factor` and `high_freq_factor` wavelengths.
  }];
}

#endif // INFER_IR_INFERENUMS_TD
