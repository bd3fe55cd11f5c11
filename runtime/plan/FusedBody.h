//===- FusedBody.h - The elementwise program of a `fused` step --*- C++ -*-===//
//
// A `fused` plan step (an `infer.fused` region) carries its body as a short
// register program that the CPU backend interprets and the CUDA code
// generator compiles into one kernel, so both run the same description:
//
//   operands  a b c        registers 0 1 2     (one per step operand)
//   "body":   "gelu_tanh(0); mul(3, 1); add(4, 2)"
//                          instruction i defines register #operands + i
//   "yields": [5]          registers stored to the step's results, in order
//
// Every register is one element of a tensor of the results' shape; the ops
// (`add`, `mul`, `silu`, `gelu_tanh`, `silu_mul`) compute what the plan
// steps of the same name compute, element by element.
//
//===----------------------------------------------------------------------===//

#ifndef INFER_RUNTIME_PLAN_FUSEDBODY_H
#define INFER_RUNTIME_PLAN_FUSEDBODY_H

#include "runtime/plan/Plan.h"

#include <string>
#include <vector>

namespace infer::plan {

enum class ElementwiseOp { kAdd, kMul, kSilu, kGeluTanh, kSiluMul, kGelu };

/// "add", "mul", "silu", "gelu_tanh", "silu_mul".
std::string_view elementwiseOpName(ElementwiseOp op);
std::optional<ElementwiseOp> parseElementwiseOp(std::string_view name);
/// Operands of the op: 1 or 2.
int elementwiseArity(ElementwiseOp op);

struct FusedInstruction {
  ElementwiseOp op = ElementwiseOp::kAdd;
  std::vector<int> args;

  bool operator==(const FusedInstruction &o) const {
    return op == o.op && args == o.args;
  }
};

struct FusedBody {
  int numInputs = 0;
  std::vector<FusedInstruction> instructions;
  std::vector<int> yields;

  int numRegisters() const {
    return numInputs + static_cast<int>(instructions.size());
  }
  bool operator==(const FusedBody &o) const {
    return numInputs == o.numInputs && instructions == o.instructions &&
           yields == o.yields;
  }
};

/// Sets the "body" and "yields" attributes of a `fused` step.
void setFusedBody(const FusedBody &body, Step &step);

/// Reads and checks the body of a `fused` step: known ops with their arity,
/// arguments that name earlier registers, one yield per result.
StatusOr<FusedBody> getFusedBody(const Step &step);

} // namespace infer::plan

#endif // INFER_RUNTIME_PLAN_FUSEDBODY_H
