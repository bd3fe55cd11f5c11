//===- ImportHF.cpp - Hugging Face model directory -> infer dialect -------===//
//
// The decoder all supported architectures share (HF LlamaDecoderLayer):
//
//   h = embed_tokens[token_ids]
//   per layer:
//     x = rms_norm(h, input_layernorm)
//     q, k, v = rope(x q_proj^T), rope(x k_proj^T), x v_proj^T  (+ bias)
//     h = h + attention(q, k, v) o_proj^T
//     x = rms_norm(h, post_attention_layernorm)
//     h = h + (act(x gate_proj^T) * x up_proj^T) down_proj^T
//   logits = rms_norm(h[logits_indices], norm) lm_head^T
//
// The rows that produce logits are gathered before the final norm: the norm
// is per row, so this computes the same values for S rows instead of T.
//
// Every linear carries how tensor parallelism splits it
// (#infer.parallel: q, gate, up column; k, v kv_column; o, down row; a
// fused projection column with its parts), so infer-shard-tensor-parallel
// needs no knowledge of architectures or checkpoint names.
//
// What the families add (Architectures.h says which has what):
//   - Phi-3: q/k/v from one qkv_proj and gate/up from one gate_up_proj,
//     each an infer.split of one linear;
//   - Qwen3, Gemma 3: q, k = rms_norm(q, q_norm), rms_norm(k, k_norm) per
//     head, before the rope;
//   - Gemma: h = embed_tokens[ids] * sqrt(hidden); every RMSNorm scales by
//     1 + w; the attention output and the MLP output are normalized
//     (post_attention_layernorm, post_feedforward_layernorm) before their
//     residual adds, and pre_feedforward_layernorm feeds the MLP; the scores
//     scale by query_pre_attn_scalar^-1/2 and may be soft-capped, as may the
//     logits; Gemma 3's sliding-window layers have their own rope;
//   - rope variants: yarn, longrope (attention factor folded into the
//     attention scale), partial_rotary_factor (rotary_dim < head_dim),
//     dynamic NTK (the ropes also read query_start_loc).
//
//===----------------------------------------------------------------------===//

#include "frontend/ImportHF.h"

#include "frontend/HFConfig.h"
#include "ir/InferDialect.h"
#include "ir/InferOps.h"
#include "runtime/safetensors/Safetensors.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/Verifier.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/Path.h"

#include <cmath>
#include <cstring>
#include <map>

using llvm::StringRef;
using mlir::FailureOr;
using mlir::Value;
using mlir::infer::ParallelStyle;

namespace infer::frontend {
namespace {

std::string formatShape(llvm::ArrayRef<int64_t> shape) {
  return "[" +
         llvm::join(llvm::map_range(
                        shape, [](int64_t d) { return std::to_string(d); }),
                    ", ") +
         "]";
}

/// The safetensors headers of a model directory, searchable by tensor name.
class WeightCatalog {
public:
  static std::optional<WeightCatalog> load(StringRef modelDir,
                                           mlir::MLIRContext &context) {
    WeightCatalog catalog;
    catalog.modelDir = modelDir.str();
    catalog.context = &context;
    StatusOr<std::map<std::string, std::string>> files =
        safetensors::listModelTensors(modelDir.str());
    if (!files.isOk()) {
      mlir::emitError(mlir::FileLineColLoc::get(&context, modelDir, 0, 0))
          << files.status().message();
      return std::nullopt;
    }
    catalog.fileOf = std::move(*files);
    for (const auto &entry : catalog.fileOf) {
      const std::string &file = entry.second;
      if (catalog.headers.count(file))
        continue;
      StatusOr<safetensors::Header> header =
          safetensors::readHeader(catalog.pathOf(file));
      if (!header.isOk()) {
        mlir::emitError(catalog.fileLoc(file)) << header.status().message();
        return std::nullopt;
      }
      catalog.headers.emplace(file, std::move(*header));
    }
    return catalog;
  }

  /// The tensor's header entry and the file that holds it, or null.
  const safetensors::TensorInfo *find(StringRef name,
                                      std::string *file = nullptr) const {
    auto it = fileOf.find(name.str());
    if (it == fileOf.end())
      return nullptr;
    if (file)
      *file = it->second;
    return headers.at(it->second).find(name);
  }

  bool contains(StringRef name) const { return find(name) != nullptr; }

  std::string pathOf(StringRef file) const {
    llvm::SmallString<256> path(modelDir);
    llvm::sys::path::append(path, file);
    return std::string(path);
  }

  mlir::Location fileLoc(StringRef file) const {
    return mlir::FileLineColLoc::get(context, pathOf(file), 0, 0);
  }

  /// Where "missing tensor" errors point: the (first) weights file.
  mlir::Location anyFileLoc() const {
    if (headers.empty())
      return mlir::FileLineColLoc::get(context, modelDir, 0, 0);
    return fileLoc(headers.begin()->first);
  }

  std::string fileList() const {
    return llvm::join(llvm::make_first_range(headers), ", ");
  }

private:
  std::string modelDir;
  mlir::MLIRContext *context = nullptr;
  std::map<std::string, std::string> fileOf;
  std::map<std::string, safetensors::Header> headers;
};

mlir::infer::RopeScalingKind toScalingKind(RopeKind kind) {
  switch (kind) {
  case RopeKind::kDefault:
    return mlir::infer::RopeScalingKind::Default;
  case RopeKind::kLinear:
    return mlir::infer::RopeScalingKind::Linear;
  case RopeKind::kLlama3:
    return mlir::infer::RopeScalingKind::Llama3;
  case RopeKind::kYarn:
    return mlir::infer::RopeScalingKind::Yarn;
  case RopeKind::kLongRope:
    return mlir::infer::RopeScalingKind::LongRope;
  case RopeKind::kDynamic:
    return mlir::infer::RopeScalingKind::Dynamic;
  }
  llvm_unreachable("unknown rope kind");
}

/// Builds the model-level module of one imported model.
class ModelImporter {
public:
  ModelImporter(const ModelConfig &config, const WeightCatalog &weights,
                mlir::MLIRContext &context)
      : config(config), weights(weights), context(context), builder(&context),
        f32(builder.getF32Type()) {}

  mlir::OwningOpRef<mlir::ModuleOp> import();

private:
  mlir::Location locFor(const llvm::Twine &name) {
    return mlir::NameLoc::get(builder.getStringAttr(name));
  }

  /// `tensor<?xwidthxf32>`: an activation of the flat token batch.
  mlir::RankedTensorType activationType(int64_t width) const {
    return mlir::RankedTensorType::get({mlir::ShapedType::kDynamic, width},
                                       f32);
  }

  template <typename OpTy>
  Value create(mlir::Location loc, mlir::Type resultType,
               mlir::ValueRange operands,
               llvm::ArrayRef<mlir::NamedAttribute> attributes = {}) {
    return builder
        .create<OpTy>(loc, mlir::TypeRange(resultType), operands, attributes)
        ->getResult(0);
  }

  FailureOr<Value> weight(const std::string &name,
                          llvm::ArrayRef<int64_t> shape);
  /// RMSNorm over the hidden features, or over each head with `headDim`.
  FailureOr<Value> rmsNorm(Value x, const std::string &weightName,
                           int64_t headDim = 0);
  /// A linear annotated with how tensor parallelism splits it.
  FailureOr<Value> linear(Value x, const std::string &module,
                          int64_t outFeatures, int64_t inFeatures, bool bias,
                          mlir::infer::ParallelStyle style);
  /// One checkpoint projection holding several (Phi-3's qkv_proj and
  /// gate_up_proj): the linear of the whole and an infer.split into `parts`
  /// (output widths, in checkpoint row order); `kvParts` says which are
  /// split by key/value head.
  FailureOr<llvm::SmallVector<Value>>
  fusedLinear(Value x, const std::string &module, llvm::ArrayRef<int64_t> parts,
              llvm::ArrayRef<bool> kvParts, int64_t inFeatures);
  FailureOr<Value> linearOp(Value x, const std::string &module,
                            int64_t outFeatures, int64_t inFeatures, bool bias,
                            mlir::infer::ParallelAttr parallel);
  FailureOr<Value> attentionBlock(Value h, int64_t layer);
  FailureOr<Value> mlpBlock(Value h, int64_t layer);
  Value activation(Value x, mlir::Location loc);
  mlir::DictionaryAttr modelAttr();

  const ModelConfig &config;
  const WeightCatalog &weights;
  mlir::MLIRContext &context;
  mlir::OpBuilder builder;
  mlir::Type f32;
  Value positions, queryStartLoc;
};

FailureOr<Value> ModelImporter::weight(const std::string &name,
                                       llvm::ArrayRef<int64_t> shape) {
  std::string file;
  const safetensors::TensorInfo *info = weights.find(name, &file);
  if (!info)
    return mlir::emitError(weights.anyFileLoc())
           << "tensor '" << name << "' is missing from the checkpoint ("
           << weights.fileList() << ")";
  mlir::Type elementType;
  switch (info->dtype) {
  case safetensors::DType::kF32:
    elementType = builder.getF32Type();
    break;
  case safetensors::DType::kF16:
    elementType = builder.getF16Type();
    break;
  case safetensors::DType::kBF16:
    elementType = builder.getBF16Type();
    break;
  default:
    return mlir::emitError(weights.fileLoc(file))
           << "tensor '" << name << "' has dtype "
           << safetensors::dtypeName(info->dtype)
           << "; weights must be F32, F16 or BF16";
  }
  if (!llvm::equal(info->shape, shape))
    return mlir::emitError(weights.fileLoc(file))
           << "tensor '" << name << "' has shape " << formatShape(info->shape)
           << " but config.json implies " << formatShape(shape);
  auto type = mlir::RankedTensorType::get(shape, elementType);
  return create<mlir::infer::WeightOp>(
      locFor(name), type, {},
      {builder.getNamedAttr("name", builder.getStringAttr(name))});
}

FailureOr<Value> ModelImporter::rmsNorm(Value x, const std::string &weightName,
                                        int64_t headDim) {
  FailureOr<Value> w =
      weight(weightName, {headDim ? headDim : config.hiddenSize});
  if (mlir::failed(w))
    return mlir::failure();
  StringRef module = StringRef(weightName).drop_back(strlen(".weight"));
  llvm::SmallVector<mlir::NamedAttribute> attrs = {builder.getNamedAttr(
      "epsilon", builder.getF64FloatAttr(config.rmsNormEps))};
  if (headDim)
    attrs.push_back(
        builder.getNamedAttr("head_dim", builder.getI64IntegerAttr(headDim)));
  if (config.architecture->gemma)
    attrs.push_back(
        builder.getNamedAttr("weight_offset", builder.getF64FloatAttr(1.0)));
  return create<mlir::infer::RMSNormOp>(locFor(module), x.getType(), {x, *w},
                                        attrs);
}

FailureOr<Value> ModelImporter::linear(Value x, const std::string &module,
                                       int64_t outFeatures, int64_t inFeatures,
                                       bool bias,
                                       mlir::infer::ParallelStyle style) {
  return linearOp(x, module, outFeatures, inFeatures, bias,
                  mlir::infer::ParallelAttr::get(&context, style,
                                                 mlir::DenseI64ArrayAttr(),
                                                 mlir::DenseBoolArrayAttr()));
}

FailureOr<Value> ModelImporter::linearOp(Value x, const std::string &module,
                                         int64_t outFeatures,
                                         int64_t inFeatures, bool bias,
                                         mlir::infer::ParallelAttr parallel) {
  FailureOr<Value> w = weight(module + ".weight", {outFeatures, inFeatures});
  if (mlir::failed(w))
    return mlir::failure();
  Value b;
  if (bias) {
    FailureOr<Value> loaded = weight(module + ".bias", {outFeatures});
    if (mlir::failed(loaded))
      return mlir::failure();
    b = *loaded;
  }
  return builder
      .create<mlir::infer::LinearOp>(
          locFor(module), activationType(outFeatures), x, *w, b, parallel)
      .getResult();
}

FailureOr<llvm::SmallVector<Value>>
ModelImporter::fusedLinear(Value x, const std::string &module,
                           llvm::ArrayRef<int64_t> parts,
                           llvm::ArrayRef<bool> kvParts, int64_t inFeatures) {
  int64_t outFeatures = 0;
  for (int64_t part : parts)
    outFeatures += part;
  auto parallel = mlir::infer::ParallelAttr::get(
      &context, mlir::infer::ParallelStyle::Column,
      mlir::DenseI64ArrayAttr::get(&context, parts),
      mlir::DenseBoolArrayAttr::get(&context, kvParts));
  FailureOr<Value> fused =
      linearOp(x, module, outFeatures, inFeatures, false, parallel);
  if (mlir::failed(fused))
    return mlir::failure();
  llvm::SmallVector<mlir::Type> types;
  for (int64_t part : parts)
    types.push_back(activationType(part));
  auto split = builder.create<mlir::infer::SplitOp>(locFor(module + ".split"),
                                                    types, *fused);
  return llvm::SmallVector<Value>(split.getResults().begin(),
                                  split.getResults().end());
}

FailureOr<Value> ModelImporter::attentionBlock(Value h, int64_t layer) {
  std::string prefix = llvm::formatv("model.layers.{0}", layer).str();
  std::string attn = prefix + ".self_attn";
  int64_t hidden = config.hiddenSize;
  int64_t qWidth = config.numHeads * config.headDim;
  int64_t kvWidth = config.numKVHeads * config.headDim;

  FailureOr<Value> x = rmsNorm(h, prefix + ".input_layernorm.weight");
  if (mlir::failed(x))
    return mlir::failure();
  FailureOr<Value> q, k, v;
  if (config.architecture->fusedProjections) {
    FailureOr<llvm::SmallVector<Value>> parts =
        fusedLinear(*x, attn + ".qkv_proj", {qWidth, kvWidth, kvWidth},
                    {false, true, true}, hidden);
    if (mlir::failed(parts))
      return mlir::failure();
    q = (*parts)[0];
    k = (*parts)[1];
    v = (*parts)[2];
  } else {
    q = linear(*x, attn + ".q_proj", qWidth, hidden, config.qkvBias,
               ParallelStyle::Column);
    if (mlir::failed(q))
      return mlir::failure();
    k = linear(*x, attn + ".k_proj", kvWidth, hidden, config.qkvBias,
               ParallelStyle::KVColumn);
    if (mlir::failed(k))
      return mlir::failure();
    v = linear(*x, attn + ".v_proj", kvWidth, hidden, config.qkvBias,
               ParallelStyle::KVColumn);
    if (mlir::failed(v))
      return mlir::failure();
  }

  if (config.architecture->qkNorm) {
    q = rmsNorm(*q, attn + ".q_norm.weight", config.headDim);
    if (mlir::failed(q))
      return mlir::failure();
    k = rmsNorm(*k, attn + ".k_norm.weight", config.headDim);
    if (mlir::failed(k))
      return mlir::failure();
  }

  const bool sliding = config.slidingWindows[layer] != 0;
  const RopeConfig &rope =
      sliding && config.slidingRope ? *config.slidingRope : config.rope;
  auto ropeAttr = mlir::infer::RopeAttr::get(
      &context, rope.theta, toScalingKind(rope.kind), rope.factor,
      rope.lowFreqFactor, rope.highFreqFactor,
      rope.originalMaxPositionEmbeddings, rope.betaFast, rope.betaSlow,
      rope.shortFactor, rope.longFactor);
  llvm::SmallVector<mlir::NamedAttribute> ropeAttrs = {
      builder.getNamedAttr("head_dim",
                           builder.getI64IntegerAttr(config.headDim)),
      builder.getNamedAttr("rotary_dim",
                           builder.getI64IntegerAttr(config.rotaryDim)),
      builder.getNamedAttr("rope", ropeAttr)};
  mlir::Location ropeLoc = locFor(attn + ".rotary_emb");
  // A dynamic NTK rope reads each sequence's length from the batch.
  llvm::SmallVector<Value, 3> qOperands = {*q, positions},
                              kOperands = {*k, positions};
  if (rope.kind == RopeKind::kDynamic) {
    qOperands.push_back(queryStartLoc);
    kOperands.push_back(queryStartLoc);
  }
  Value qRot =
      create<mlir::infer::RopeOp>(ropeLoc, q->getType(), qOperands, ropeAttrs);
  Value kRot =
      create<mlir::infer::RopeOp>(ropeLoc, k->getType(), kOperands, ropeAttrs);

  // YaRN and LongRoPE scale the cosines and sines, so both q and k, by
  // their attention factor: the same as scaling the scores by its square.
  // Gemma scales the queries by query_pre_attn_scalar^-1/2, not head_dim's.
  double scaleBase = config.queryPreAttnScalar > 0
                         ? config.queryPreAttnScalar
                         : static_cast<double>(config.headDim);
  double scale =
      rope.attentionFactor * rope.attentionFactor / std::sqrt(scaleBase);
  llvm::SmallVector<mlir::NamedAttribute> attentionAttrs = {
      builder.getNamedAttr("layer", builder.getI64IntegerAttr(layer)),
      builder.getNamedAttr("num_heads",
                           builder.getI64IntegerAttr(config.numHeads)),
      builder.getNamedAttr("num_kv_heads",
                           builder.getI64IntegerAttr(config.numKVHeads)),
      builder.getNamedAttr("head_dim",
                           builder.getI64IntegerAttr(config.headDim)),
      builder.getNamedAttr("scale", builder.getF64FloatAttr(scale)),
      builder.getNamedAttr(
          "sliding_window",
          builder.getI64IntegerAttr(config.slidingWindows[layer]))};
  if (config.attnLogitSoftcap > 0)
    attentionAttrs.push_back(builder.getNamedAttr(
        "logit_softcap", builder.getF64FloatAttr(config.attnLogitSoftcap)));
  Value attended = create<mlir::infer::AttentionOp>(
      locFor(attn), qRot.getType(), {qRot, kRot, *v, queryStartLoc},
      attentionAttrs);
  FailureOr<Value> projected =
      linear(attended, attn + ".o_proj", hidden, qWidth, config.outputBias,
             ParallelStyle::Row);
  if (mlir::failed(projected))
    return mlir::failure();
  if (config.architecture->gemma) {
    projected =
        rmsNorm(*projected, prefix + ".post_attention_layernorm.weight");
    if (mlir::failed(projected))
      return mlir::failure();
  }
  return create<mlir::infer::AddOp>(locFor(prefix + ".residual_attn"),
                                    h.getType(), {h, *projected});
}

Value ModelImporter::activation(Value x, mlir::Location loc) {
  switch (config.hiddenAct) {
  case Activation::kSilu:
    return create<mlir::infer::SiluOp>(loc, x.getType(), {x});
  case Activation::kGeluExact:
  case Activation::kGeluTanh: {
    StringRef approximate =
        config.hiddenAct == Activation::kGeluTanh ? "tanh" : "none";
    return create<mlir::infer::GeluOp>(
        loc, x.getType(), {x},
        {builder.getNamedAttr("approximate",
                              builder.getStringAttr(approximate))});
  }
  }
  llvm_unreachable("unknown activation");
}

FailureOr<Value> ModelImporter::mlpBlock(Value h, int64_t layer) {
  std::string prefix = llvm::formatv("model.layers.{0}", layer).str();
  std::string mlp = prefix + ".mlp";
  int64_t hidden = config.hiddenSize;
  int64_t inner = config.intermediateSize;

  // Gemma's post_attention_layernorm closes the attention block; its MLP
  // reads pre_feedforward_layernorm.
  FailureOr<Value> x =
      rmsNorm(h, prefix + (config.architecture->gemma
                               ? ".pre_feedforward_layernorm.weight"
                               : ".post_attention_layernorm.weight"));
  if (mlir::failed(x))
    return mlir::failure();
  FailureOr<Value> gate, up;
  if (config.architecture->fusedProjections) {
    FailureOr<llvm::SmallVector<Value>> parts = fusedLinear(
        *x, mlp + ".gate_up_proj", {inner, inner}, {false, false}, hidden);
    if (mlir::failed(parts))
      return mlir::failure();
    gate = (*parts)[0];
    up = (*parts)[1];
  } else {
    gate = linear(*x, mlp + ".gate_proj", inner, hidden, config.mlpBias,
                  ParallelStyle::Column);
    if (mlir::failed(gate))
      return mlir::failure();
    up = linear(*x, mlp + ".up_proj", inner, hidden, config.mlpBias,
                ParallelStyle::Column);
    if (mlir::failed(up))
      return mlir::failure();
  }
  Value activated = activation(*gate, locFor(mlp + ".act_fn"));
  Value gated =
      create<mlir::infer::MulOp>(locFor(mlp), up->getType(), {activated, *up});
  FailureOr<Value> down = linear(gated, mlp + ".down_proj", hidden, inner,
                                 config.mlpBias, ParallelStyle::Row);
  if (mlir::failed(down))
    return mlir::failure();
  if (config.architecture->gemma) {
    down = rmsNorm(*down, prefix + ".post_feedforward_layernorm.weight");
    if (mlir::failed(down))
      return mlir::failure();
  }
  return create<mlir::infer::AddOp>(locFor(prefix + ".residual_mlp"),
                                    h.getType(), {h, *down});
}

mlir::DictionaryAttr ModelImporter::modelAttr() {
  llvm::SmallVector<mlir::NamedAttribute> entries;
  auto addInt = [&](StringRef key, int64_t value) {
    entries.push_back(
        builder.getNamedAttr(key, builder.getI64IntegerAttr(value)));
  };
  entries.push_back(builder.getNamedAttr(
      "architecture", builder.getStringAttr(config.architecture->name)));
  addInt("vocab_size", config.vocabSize);
  addInt("hidden_size", config.hiddenSize);
  addInt("num_layers", config.numLayers);
  addInt("num_heads", config.numHeads);
  addInt("num_kv_heads", config.numKVHeads);
  addInt("head_dim", config.headDim);
  // The context the artifact serves (0: no limit). A dynamic NTK rope exists
  // to run past the trained length, and Hugging Face sets no limit to it;
  // the rope keeps the trained length where its base starts to grow.
  addInt("max_position_embeddings", config.rope.kind == RopeKind::kDynamic
                                        ? 0
                                        : config.maxPositionEmbeddings);
  if (config.bosTokenId)
    addInt("bos_token_id", *config.bosTokenId);
  llvm::SmallVector<mlir::Attribute> eos;
  for (int64_t id : config.eosTokenIds)
    eos.push_back(builder.getI64IntegerAttr(id));
  entries.push_back(
      builder.getNamedAttr("eos_token_ids", builder.getArrayAttr(eos)));
  if (config.padTokenId)
    addInt("pad_token_id", *config.padTokenId);
  return builder.getDictionaryAttr(entries);
}

mlir::OwningOpRef<mlir::ModuleOp> ModelImporter::import() {
  mlir::Location loc = locFor(config.architecture->name);
  mlir::OwningOpRef<mlir::ModuleOp> module = mlir::ModuleOp::create(loc);
  (*module)->setAttr(mlir::infer::InferDialect::kModelAttrName, modelAttr());

  auto i32 = builder.getI32Type();
  auto i64 = builder.getI64Type();
  int64_t dyn = mlir::ShapedType::kDynamic;
  auto vectorI32 = mlir::RankedTensorType::get({dyn}, i32);
  struct Input {
    StringRef name;
    mlir::Type type;
  };
  const Input inputs[] = {
      {"token_ids", vectorI32},
      {"positions", vectorI32},
      {"query_start_loc", vectorI32},
      {"context_lens", vectorI32},
      {"block_tables", mlir::RankedTensorType::get({dyn, dyn}, i32)},
      {"slot_mapping", mlir::RankedTensorType::get({dyn}, i64)},
      {"logits_indices", vectorI32},
  };
  llvm::SmallVector<mlir::Type> argTypes;
  for (const Input &input : inputs)
    argTypes.push_back(input.type);
  auto logitsType = activationType(config.vocabSize);

  builder.setInsertionPointToEnd(module->getBody());
  auto func = builder.create<mlir::func::FuncOp>(
      loc, "forward", builder.getFunctionType(argTypes, {logitsType}));
  mlir::Block *entry = func.addEntryBlock();
  for (auto [index, input] : llvm::enumerate(inputs))
    func.setArgAttr(index, mlir::infer::InferDialect::kInputAttrName,
                    builder.getStringAttr(input.name));
  builder.setInsertionPointToStart(entry);
  Value tokenIds = entry->getArgument(0);
  positions = entry->getArgument(1);
  queryStartLoc = entry->getArgument(2);
  Value logitsIndices = entry->getArgument(6);

  FailureOr<Value> table = weight("model.embed_tokens.weight",
                                  {config.vocabSize, config.hiddenSize});
  if (mlir::failed(table))
    return nullptr;
  llvm::SmallVector<mlir::NamedAttribute> embeddingAttrs;
  if (config.architecture->gemma)
    embeddingAttrs.push_back(builder.getNamedAttr(
        "scale", builder.getF64FloatAttr(
                     std::sqrt(static_cast<double>(config.hiddenSize)))));
  Value h = create<mlir::infer::EmbeddingOp>(
      locFor("model.embed_tokens"), activationType(config.hiddenSize),
      {*table, tokenIds}, embeddingAttrs);

  for (int64_t layer = 0; layer < config.numLayers; ++layer) {
    FailureOr<Value> attended = attentionBlock(h, layer);
    if (mlir::failed(attended))
      return nullptr;
    FailureOr<Value> mixed = mlpBlock(*attended, layer);
    if (mlir::failed(mixed))
      return nullptr;
    h = *mixed;
  }

  Value rows = create<mlir::infer::GatherRowsOp>(
      locFor("logits_indices"), h.getType(), {h, logitsIndices});
  FailureOr<Value> normed = rmsNorm(rows, "model.norm.weight");
  if (mlir::failed(normed))
    return nullptr;

  Value head = *table;
  if (!config.tieWordEmbeddings) {
    if (!weights.contains("lm_head.weight")) {
      mlir::InFlightDiagnostic diag =
          mlir::emitError(weights.anyFileLoc())
          << "tensor 'lm_head.weight' is missing from the checkpoint ("
          << weights.fileList() << ")";
      diag.attachNote() << "config.json has tie_word_embeddings = false";
      return nullptr;
    }
    FailureOr<Value> lmHead =
        weight("lm_head.weight", {config.vocabSize, config.hiddenSize});
    if (mlir::failed(lmHead))
      return nullptr;
    head = *lmHead;
  }
  llvm::SmallVector<mlir::NamedAttribute> logitsAttrs;
  if (config.finalLogitSoftcap > 0)
    logitsAttrs.push_back(builder.getNamedAttr(
        "softcap", builder.getF64FloatAttr(config.finalLogitSoftcap)));
  Value logits = create<mlir::infer::LogitsOp>(locFor("lm_head"), logitsType,
                                               {*normed, head}, logitsAttrs);
  builder.create<mlir::func::ReturnOp>(loc, logits);

  if (mlir::failed(mlir::verify(*module)))
    return nullptr;
  return module;
}

} // namespace

mlir::OwningOpRef<mlir::ModuleOp> importHFModel(StringRef modelDir,
                                                mlir::MLIRContext &context) {
  context.loadDialect<mlir::infer::InferDialect, mlir::func::FuncDialect>();
  std::optional<ModelConfig> config = parseModelConfig(modelDir, context);
  if (!config)
    return nullptr;
  std::optional<WeightCatalog> weights = WeightCatalog::load(modelDir, context);
  if (!weights)
    return nullptr;
  return ModelImporter(*config, *weights, context).import();
}

} // namespace infer::frontend
