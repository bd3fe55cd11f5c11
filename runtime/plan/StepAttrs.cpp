//===- StepAttrs.cpp - Decoded, checked attributes of plan steps ----------===//

#include "runtime/plan/StepAttrs.h"

#include <algorithm>
#include <cmath>

namespace infer::plan {

//===----------------------------------------------------------------------===//
// Rope
//===----------------------------------------------------------------------===//

Status RopeConfig::validate() const {
  if (headDim <= 0 || rotaryDim <= 0 || rotaryDim > headDim || rotaryDim % 2)
    return invalidArgument("rope: rotary_dim " + std::to_string(rotaryDim) +
                           " must be even and in (0, head_dim " +
                           std::to_string(headDim) + "]");
  if (!(theta > 0))
    return invalidArgument("rope: theta must be > 0");
  if (scaling == "default")
    return Status::ok();
  if (scaling == "linear") {
    if (!(factor > 0))
      return invalidArgument("rope: linear scaling needs factor > 0");
    return Status::ok();
  }
  if (scaling == "llama3") {
    if (!(factor > 0) || !(highFreqFactor > lowFreqFactor) ||
        originalMaxPositionEmbeddings <= 0)
      return invalidArgument("rope: llama3 scaling needs factor > 0, "
                             "high_freq_factor > low_freq_factor and "
                             "original_max_position_embeddings > 0");
    return Status::ok();
  }
  if (scaling == "yarn") {
    if (!(factor > 0) || !(betaFast > 0) || !(betaSlow > 0) ||
        originalMaxPositionEmbeddings <= 0)
      return invalidArgument("rope: yarn scaling needs factor > 0, "
                             "beta_fast > 0, beta_slow > 0 and "
                             "original_max_position_embeddings > 0");
    return Status::ok();
  }
  if (scaling == "longrope") {
    const size_t half = static_cast<size_t>(rotaryDim / 2);
    if (originalMaxPositionEmbeddings <= 0)
      return invalidArgument("rope: longrope scaling needs "
                             "original_max_position_embeddings > 0");
    if (shortFactor.size() != half || longFactor.size() != half)
      return invalidArgument(
          "rope: longrope scaling needs short_factor and long_factor of "
          "rotary_dim / 2 = " +
          std::to_string(half) + " entries, got " +
          std::to_string(shortFactor.size()) + " and " +
          std::to_string(longFactor.size()));
    for (const std::vector<double> *list : {&shortFactor, &longFactor})
      for (double value : *list)
        if (!(value > 0))
          return invalidArgument("rope: longrope factors must be > 0");
    return Status::ok();
  }
  if (scaling == "dynamic") {
    if (!(factor > 0) || originalMaxPositionEmbeddings <= 0 || rotaryDim <= 2)
      return invalidArgument("rope: dynamic scaling needs factor > 0, "
                             "original_max_position_embeddings > 0 and "
                             "rotary_dim > 2");
    return Status::ok();
  }
  return invalidArgument("rope: unknown scaling '" + scaling +
                         "' (expected default, linear, llama3, yarn, "
                         "longrope or dynamic)");
}

/// A Floats attribute (ints accepted), or empty when absent.
static std::vector<double> getFloats(const Step &step,
                                     const std::string &name) {
  auto it = step.attrs.find(name);
  if (it == step.attrs.end())
    return {};
  if (const auto *reals = std::get_if<std::vector<double>>(&it->second))
    return *reals;
  if (const auto *ints = std::get_if<std::vector<int64_t>>(&it->second))
    return std::vector<double>(ints->begin(), ints->end());
  return {};
}

StatusOr<RopeConfig> decodeRope(const Step &step) {
  RopeConfig c;
  INFER_ASSIGN_OR_RETURN(c.headDim, step.getInt("head_dim"));
  INFER_ASSIGN_OR_RETURN(c.theta, step.getFloat("theta"));
  c.rotaryDim = step.getInt("rotary_dim", c.headDim);
  c.scaling = step.getString("scaling", "default");
  c.factor = step.getFloat("factor", 1.0);
  c.lowFreqFactor = step.getFloat("low_freq_factor", 1.0);
  c.highFreqFactor = step.getFloat("high_freq_factor", 4.0);
  c.originalMaxPositionEmbeddings =
      step.getInt("original_max_position_embeddings", 0);
  c.betaFast = step.getFloat("beta_fast", 32.0);
  c.betaSlow = step.getFloat("beta_slow", 1.0);
  c.shortFactor = getFloats(step, "short_factor");
  c.longFactor = getFloats(step, "long_factor");
  if (c.scaling != "longrope" &&
      (!c.shortFactor.empty() || !c.longFactor.empty()))
    return invalidArgument("rope: short_factor and long_factor belong to "
                           "longrope scaling, not " +
                           c.scaling);
  INFER_RETURN_IF_ERROR(c.validate());
  return c;
}

StatusOr<std::optional<RopeConfig>> decodeKeyRope(const Step &step) {
  if (!step.attrs.count("key_rotary_dim"))
    return std::optional<RopeConfig>();
  INFER_ASSIGN_OR_RETURN(const int64_t keyRotaryDim,
                         step.getInt("key_rotary_dim"));
  if (step.getInt("sliding_window", 0) != 0)
    return invalidArgument("key_rotary_dim with a sliding_window");
  const std::string scaling = step.getString("scaling", "default");
  if (scaling == "longrope" || scaling == "dynamic")
    return invalidArgument("a " + scaling +
                           " key rope (streaming): its frequencies depend on "
                           "the sequence's length");
  INFER_ASSIGN_OR_RETURN(RopeConfig c, decodeRope(step));
  c.rotaryDim = keyRotaryDim;
  INFER_RETURN_IF_ERROR(c.validate());
  return std::optional<RopeConfig>(c);
}

float dynamicRopeBase(const RopeConfig &c, int64_t seqLen) {
  const int64_t original = c.originalMaxPositionEmbeddings;
  if (seqLen <= original)
    return static_cast<float>(c.theta);
  // base * ((factor * seq_len / max_pos) - (factor - 1)) ** (dim / (dim - 2)),
  // each operation in fp32 as torch computes it on the seq_len tensor.
  const float factor = static_cast<float>(c.factor);
  const float dim = static_cast<float>(c.rotaryDim);
  const float ratio =
      factor * static_cast<float>(seqLen) / static_cast<float>(original) -
      (factor - 1.0f);
  return static_cast<float>(c.theta) *
         std::pow(ratio, static_cast<float>(static_cast<double>(dim) /
                                            static_cast<double>(dim - 2)));
}

/// base ** (arange(0, dim, 2).float() / dim), in fp32.
static std::vector<float> ropePowers(double base, int64_t rotaryDim) {
  std::vector<float> powers(rotaryDim / 2);
  for (int64_t i = 0; i < rotaryDim / 2; ++i) {
    const float exponent =
        static_cast<float>(2 * i) / static_cast<float>(rotaryDim);
    powers[i] =
        static_cast<float>(std::pow(base, static_cast<double>(exponent)));
  }
  return powers;
}

std::vector<float> dynamicRopeInverseFrequencies(const RopeConfig &c,
                                                 int64_t seqLen) {
  std::vector<float> inv = ropePowers(dynamicRopeBase(c, seqLen), c.rotaryDim);
  for (float &f : inv)
    f = 1.0f / f;
  return inv;
}

std::vector<float> ropeInverseFrequencies(const RopeConfig &c) {
  const int64_t half = c.rotaryDim / 2;
  if (c.scaling == "dynamic")
    return dynamicRopeInverseFrequencies(c, 0);
  std::vector<float> powers = ropePowers(c.theta, c.rotaryDim);
  if (c.scaling == "longrope") {
    // inv_freq = 1.0 / (ext_factors * pos_freqs), short then long.
    std::vector<float> inv(2 * half);
    for (int64_t i = 0; i < half; ++i) {
      inv[i] = 1.0f / (static_cast<float>(c.shortFactor[i]) * powers[i]);
      inv[half + i] = 1.0f / (static_cast<float>(c.longFactor[i]) * powers[i]);
    }
    return inv;
  }
  if (c.scaling == "yarn") {
    // find_correction_range with truncate = True, then a linear ramp over
    // the frequency index between the two bounds.
    const double dim = static_cast<double>(c.rotaryDim);
    const double original =
        static_cast<double>(c.originalMaxPositionEmbeddings);
    auto correctionDim = [&](double rotations) {
      return dim * std::log(original / (rotations * 2 * M_PI)) /
             (2 * std::log(c.theta));
    };
    double low = std::max(std::floor(correctionDim(c.betaFast)), 0.0);
    double high = std::min(std::ceil(correctionDim(c.betaSlow)), dim - 1);
    if (low == high)
      high += 0.001;
    const float factor = static_cast<float>(c.factor);
    std::vector<float> inv(half);
    for (int64_t i = 0; i < half; ++i) {
      const float extrapolation = 1.0f / powers[i];
      const float interpolation = 1.0f / (factor * powers[i]);
      float ramp = (static_cast<float>(i) - static_cast<float>(low)) /
                   static_cast<float>(high - low);
      ramp = std::min(std::max(ramp, 0.0f), 1.0f);
      const float extrapolationFactor = 1.0f - ramp;
      inv[i] = interpolation * (1.0f - extrapolationFactor) +
               extrapolation * extrapolationFactor;
    }
    return inv;
  }
  std::vector<float> inv(half);
  for (int64_t i = 0; i < half; ++i)
    inv[i] = 1.0f / powers[i];
  if (c.scaling == "linear") {
    for (float &f : inv)
      f = f / static_cast<float>(c.factor);
  } else if (c.scaling == "llama3") {
    const float factor = static_cast<float>(c.factor);
    const float low = static_cast<float>(c.lowFreqFactor);
    const double oldContext =
        static_cast<double>(c.originalMaxPositionEmbeddings);
    const float lowFreqWavelen =
        static_cast<float>(oldContext / c.lowFreqFactor);
    const float highFreqWavelen =
        static_cast<float>(oldContext / c.highFreqFactor);
    for (float &f : inv) {
      const float wavelen = static_cast<float>(2 * M_PI) / f;
      float scaled = wavelen > lowFreqWavelen ? f / factor : f;
      const bool medium =
          !(wavelen < highFreqWavelen) && !(wavelen > lowFreqWavelen);
      if (medium) {
        const float smooth =
            (static_cast<float>(oldContext) / wavelen - low) /
            static_cast<float>(c.highFreqFactor - c.lowFreqFactor);
        scaled = (1.0f - smooth) * scaled / factor + smooth * scaled;
      }
      f = scaled;
    }
  }
  return inv;
}

//===----------------------------------------------------------------------===//
// decodeStep
//===----------------------------------------------------------------------===//

/// Operand and result counts and attribute names and types, from the
/// registry line of the step's op.
static Status checkAgainstRegistry(const Step &step, const StepOpInfo &info) {
  const std::vector<OperandRole> &roles = info.operands;
  const size_t n = step.operands.size();
  size_t least = roles.size(), most = roles.size();
  if (!roles.empty() && (roles.back() == OperandRole::kOptionalTensor ||
                         roles.back() == OperandRole::kOptionalQueryStartLoc))
    least = roles.size() - 1;
  if (!roles.empty() && roles.back() == OperandRole::kTensors)
    most = SIZE_MAX;
  if (n < least || n > most)
    return invalidArgument(
        "expected " +
        (most == SIZE_MAX ? "at least " + std::to_string(least)
         : least == most
             ? std::to_string(least)
             : std::to_string(least) + " or " + std::to_string(most)) +
        " operands, got " + std::to_string(n));
  const bool variadic = info.numResults == StepOpInfo::kVariadicResults;
  if (variadic ? step.results.empty()
               : static_cast<int>(step.results.size()) != info.numResults)
    return invalidArgument("expected " +
                           (variadic ? std::string("at least 1")
                                     : std::to_string(info.numResults)) +
                           " results, got " +
                           std::to_string(step.results.size()));

  for (const auto &[name, value] : step.attrs) {
    const AttrSpec *spec = info.attr(name);
    if (!spec)
      return invalidArgument("attribute '" + name + "' is not one of " +
                             std::string(info.name) + "'s (StepOps.def)");
    bool ok = false;
    switch (spec->type) {
    case AttrType::kInt:
      ok = std::holds_alternative<int64_t>(value);
      break;
    case AttrType::kFloat:
      ok = std::holds_alternative<double>(value) ||
           std::holds_alternative<int64_t>(value);
      break;
    case AttrType::kString:
      ok = std::holds_alternative<std::string>(value);
      break;
    case AttrType::kInts:
      ok = std::holds_alternative<std::vector<int64_t>>(value);
      break;
    case AttrType::kFloats:
      ok = std::holds_alternative<std::vector<double>>(value) ||
           std::holds_alternative<std::vector<int64_t>>(value);
      break;
    }
    if (!ok)
      return invalidArgument("attribute '" + name + "' must be " +
                             std::string(attrTypeName(spec->type)));
    if (const auto *real = std::get_if<double>(&value);
        real && !std::isfinite(*real))
      return invalidArgument("attribute '" + name + "' must be finite");
  }
  for (const AttrSpec &spec : info.attrs)
    if (spec.required && !step.attrs.count(std::string(spec.name)))
      return invalidArgument("attribute '" + std::string(spec.name) +
                             "' is missing");
  return Status::ok();
}

static Status checkNonNegative(const char *name, int64_t value) {
  if (value < 0)
    return invalidArgument("attribute '" + std::string(name) +
                           "' must be >= 0, got " + std::to_string(value));
  return Status::ok();
}

static Status checkPositive(const char *name, int64_t value) {
  if (value <= 0)
    return invalidArgument("attribute '" + std::string(name) +
                           "' must be > 0, got " + std::to_string(value));
  return Status::ok();
}

static StatusOr<AttentionAttrs> decodeAttention(const Step &step) {
  AttentionAttrs a;
  INFER_ASSIGN_OR_RETURN(a.layer, step.getInt("layer"));
  INFER_ASSIGN_OR_RETURN(a.numHeads, step.getInt("num_heads"));
  INFER_ASSIGN_OR_RETURN(a.numKVHeads, step.getInt("num_kv_heads"));
  INFER_ASSIGN_OR_RETURN(a.headDim, step.getInt("head_dim"));
  INFER_ASSIGN_OR_RETURN(a.scale, step.getFloat("scale"));
  a.slidingWindow = step.getInt("sliding_window", 0);
  a.logitSoftcap = step.getFloat("logit_softcap", 0.0);
  if (step.attrs.count("logit_softcap") && !(a.logitSoftcap > 0))
    return invalidArgument("attribute 'logit_softcap' must be > 0");
  INFER_RETURN_IF_ERROR(checkNonNegative("layer", a.layer));
  INFER_RETURN_IF_ERROR(checkPositive("num_heads", a.numHeads));
  INFER_RETURN_IF_ERROR(checkPositive("num_kv_heads", a.numKVHeads));
  INFER_RETURN_IF_ERROR(checkPositive("head_dim", a.headDim));
  INFER_RETURN_IF_ERROR(checkNonNegative("sliding_window", a.slidingWindow));
  if (a.numHeads % a.numKVHeads != 0)
    return invalidArgument("num_heads " + std::to_string(a.numHeads) +
                           " is not a multiple of num_kv_heads " +
                           std::to_string(a.numKVHeads));
  if (!(a.scale > 0))
    return invalidArgument("attribute 'scale' must be > 0");
  INFER_ASSIGN_OR_RETURN(a.keyRope, decodeKeyRope(step));
  if (a.keyRope && a.keyRope->headDim != a.headDim)
    return invalidArgument("the key rope's head_dim differs from the step's");
  return a;
}

/// A dynamic rope reads query_start_loc (operand `withLengths` - 1, the
/// last), the other scalings do not.
static Status checkRopeLengths(const RopeConfig &rope, const Step &step,
                               size_t withLengths) {
  const bool dynamic = rope.scaling == "dynamic";
  if (dynamic != (step.operands.size() == withLengths))
    return invalidArgument(
        dynamic ? "a dynamic rope needs the query_start_loc operand"
                : "only a dynamic rope takes a query_start_loc operand");
  return Status::ok();
}

StatusOr<DecodedStep> decodeStep(const Step &step) {
  std::optional<StepOp> op = parseStepOp(step.op);
  if (!op)
    return invalidArgument("unknown op '" + step.op + "'");
  INFER_RETURN_IF_ERROR(checkAgainstRegistry(step, stepOpInfo(*op)));
  DecodedStep d;
  d.op = *op;
  d.operands = step.operands;
  d.results = step.results;
  switch (d.op) {
  case StepOp::kEmbedding:
    d.vocabOffset = step.getInt("vocab_offset", 0);
    d.vocabSize = step.getInt("vocab_size", 0);
    INFER_RETURN_IF_ERROR(checkNonNegative("vocab_offset", d.vocabOffset));
    INFER_RETURN_IF_ERROR(checkNonNegative("vocab_size", d.vocabSize));
    d.embeddingScale = step.getFloat("scale", 1.0);
    if (!(d.embeddingScale > 0))
      return invalidArgument("attribute 'scale' must be > 0");
    break;
  case StepOp::kRmsNorm:
  case StepOp::kAddRmsNorm: {
    INFER_ASSIGN_OR_RETURN(d.epsilon, step.getFloat("epsilon"));
    if (!(d.epsilon > 0))
      return invalidArgument("attribute 'epsilon' must be > 0");
    d.weightOffset = step.getFloat("weight_offset", 0.0);
    d.normHeadDim = step.getInt("head_dim", 0);
    if (step.attrs.count("head_dim"))
      INFER_RETURN_IF_ERROR(checkPositive("head_dim", d.normHeadDim));
    break;
  }
  case StepOp::kRope: {
    INFER_ASSIGN_OR_RETURN(d.rope, decodeRope(step));
    INFER_RETURN_IF_ERROR(checkRopeLengths(d.rope, step, 3));
    break;
  }
  case StepOp::kKVCacheWrite:
  case StepOp::kRopeKVCacheWrite: {
    if (d.op == StepOp::kRopeKVCacheWrite) {
      INFER_ASSIGN_OR_RETURN(d.rope, decodeRope(step));
      INFER_RETURN_IF_ERROR(checkRopeLengths(d.rope, step, 6));
    }
    INFER_ASSIGN_OR_RETURN(d.layer, step.getInt("layer"));
    INFER_RETURN_IF_ERROR(checkNonNegative("layer", d.layer));
    break;
  }
  case StepOp::kRopeQKVCacheWrite: {
    INFER_ASSIGN_OR_RETURN(d.rope, decodeRope(step));
    INFER_RETURN_IF_ERROR(checkRopeLengths(d.rope, step, 7));
    INFER_ASSIGN_OR_RETURN(d.layer, step.getInt("layer"));
    INFER_RETURN_IF_ERROR(checkNonNegative("layer", d.layer));
    break;
  }
  case StepOp::kPagedAttention: {
    INFER_ASSIGN_OR_RETURN(d.attention, decodeAttention(step));
    d.layer = d.attention.layer;
    break;
  }
  case StepOp::kSplit: {
    INFER_ASSIGN_OR_RETURN(d.splitSizes, step.getSplitSizes());
    break;
  }
  case StepOp::kFused: {
    INFER_ASSIGN_OR_RETURN(d.fused, getFusedBody(step));
    if (d.fused.numInputs != static_cast<int>(step.operands.size()))
      return invalidArgument(
          "the fused body reads " + std::to_string(d.fused.numInputs) +
          " operands, the step has " + std::to_string(step.operands.size()));
    d.kernel = step.getString("kernel", "");
    break;
  }
  case StepOp::kAllGather: {
    INFER_ASSIGN_OR_RETURN(d.gatherDim, step.getGatherDim());
    break;
  }
  case StepOp::kLogits:
    d.logitSoftcap = step.getFloat("softcap", 0.0);
    if (step.attrs.count("softcap") && !(d.logitSoftcap > 0))
      return invalidArgument("attribute 'softcap' must be > 0");
    break;
  case StepOp::kLinear:
  case StepOp::kLinearResidual:
  case StepOp::kSilu:
  case StepOp::kGeluTanh:
  case StepOp::kGelu:
  case StepOp::kAdd:
  case StepOp::kMul:
  case StepOp::kBiasAdd:
  case StepOp::kCast:
  case StepOp::kGatherRows:
  case StepOp::kSiluMul:
  case StepOp::kLinearSwiGlu:
  case StepOp::kAllReduce:
    break;
  }
  return d;
}

} // namespace infer::plan
