//===- StepOps.cpp - The registry of plan step ops ------------------------===//

#include "runtime/plan/StepOps.h"

namespace infer::plan {

namespace {

/// The words StepOps.def spells its columns with.
namespace def {
constexpr bool Direct = true;
constexpr bool Custom = false;
constexpr int Variadic = StepOpInfo::kVariadicResults;
constexpr OperandRole Tensor = OperandRole::kTensor;
constexpr OperandRole Weight = OperandRole::kWeight;
constexpr OperandRole OptionalTensor = OperandRole::kOptionalTensor;
constexpr OperandRole Tensors = OperandRole::kTensors;
constexpr OperandRole KVCache = OperandRole::kKVCache;
constexpr OperandRole TokenIds = OperandRole::kTokenIds;
constexpr OperandRole Positions = OperandRole::kPositions;
constexpr OperandRole QueryStartLoc = OperandRole::kQueryStartLoc;
constexpr OperandRole ContextLens = OperandRole::kContextLens;
constexpr OperandRole BlockTables = OperandRole::kBlockTables;
constexpr OperandRole SlotMapping = OperandRole::kSlotMapping;
constexpr OperandRole LogitsIndices = OperandRole::kLogitsIndices;
constexpr OperandRole OptionalQueryStartLoc =
    OperandRole::kOptionalQueryStartLoc;
constexpr AttrType Int = AttrType::kInt;
constexpr AttrType Float = AttrType::kFloat;
constexpr AttrType String = AttrType::kString;
constexpr AttrType Ints = AttrType::kInts;
constexpr AttrType Floats = AttrType::kFloats;
constexpr bool Required = true;
constexpr bool Optional = false;

std::vector<StepOpInfo> build() {
  std::vector<StepOpInfo> ops;
#define INFER_STEP_OP(Name, Spelling, Lowering, Results, ...)                  \
  ops.push_back(StepOpInfo{                                                    \
      StepOp::k##Name, Spelling, Lowering, Results, {__VA_ARGS__}, {}});
#include "runtime/plan/StepOps.def"
#define INFER_STEP_ATTR(Name, Attribute, Type, Presence)                       \
  ops[static_cast<int>(StepOp::k##Name)].attrs.push_back(                      \
      AttrSpec{Attribute, Type, Presence});
#include "runtime/plan/StepOps.def"
  return ops;
}
} // namespace def

} // namespace

std::string_view inputNameOf(OperandRole role) {
  switch (role) {
  case OperandRole::kTokenIds:
    return "token_ids";
  case OperandRole::kPositions:
    return "positions";
  case OperandRole::kQueryStartLoc:
  case OperandRole::kOptionalQueryStartLoc:
    return "query_start_loc";
  case OperandRole::kContextLens:
    return "context_lens";
  case OperandRole::kBlockTables:
    return "block_tables";
  case OperandRole::kSlotMapping:
    return "slot_mapping";
  case OperandRole::kLogitsIndices:
    return "logits_indices";
  case OperandRole::kTensor:
  case OperandRole::kWeight:
  case OperandRole::kOptionalTensor:
  case OperandRole::kTensors:
  case OperandRole::kKVCache:
    break;
  }
  return "";
}

std::string_view attrTypeName(AttrType type) {
  switch (type) {
  case AttrType::kInt:
    return "an integer";
  case AttrType::kFloat:
    return "a number";
  case AttrType::kString:
    return "a string";
  case AttrType::kInts:
    return "a list of integers";
  case AttrType::kFloats:
    return "a list of numbers";
  }
  return "?";
}

const AttrSpec *StepOpInfo::attr(std::string_view attrName) const {
  for (const AttrSpec &spec : attrs)
    if (spec.name == attrName)
      return &spec;
  return nullptr;
}

const std::vector<StepOpInfo> &stepOpRegistry() {
  static const std::vector<StepOpInfo> registry = def::build();
  return registry;
}

const StepOpInfo &stepOpInfo(StepOp op) {
  return stepOpRegistry()[static_cast<int>(op)];
}

std::optional<StepOp> parseStepOp(std::string_view name) {
  for (const StepOpInfo &info : stepOpRegistry())
    if (info.name == name)
      return info.op;
  return std::nullopt;
}

std::string_view stepOpName(StepOp op) { return stepOpInfo(op).name; }

bool isDirectStep(std::string_view name) {
  std::optional<StepOp> op = parseStepOp(name);
  return op && stepOpInfo(*op).direct;
}

} // namespace infer::plan
