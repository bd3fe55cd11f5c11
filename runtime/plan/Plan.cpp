//===- Plan.cpp - plan.json and manifest.json reading and writing ---------===//
//
// plan.json:
//   {"format_version": 2, "num_ranks": 1,
//    "kv_cache": {"layout": ..., "num_layers": 8, "num_kv_heads": 2,
//                 "head_dim": 64, "block_size": 16, "dtype": "f32"},
//    "ranks": [{"rank": 0,
//               "values": [{"id": 0, "kind": "input", "name": "token_ids",
//                           "dtype": "i32", "shape": ["T"]},
//                          {"id": 8, "kind": "param", "name": ..., "dtype":
//                           "bf16", "shape": [4096, 384], "source_file":
//                           "model.safetensors", "source_tensor": ...,
//                           "transforms": [{"kind": ..., "attrs": {...}}]}],
//               "steps": [{"op": "embedding", "operands": [8, 0],
//                          "results": [9], "attrs": {}}],
//               "outputs": [42]}]}
//
// Attributes are JSON integers, floats, strings or homogeneous arrays of
// integers or floats. An empty array reads back as an integer list.
//
//===----------------------------------------------------------------------===//

#include "runtime/plan/Plan.h"
#include "runtime/plan/StepAttrs.h"
#include "runtime/support/InputLimits.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <set>
#include <sstream>
#include <tuple>

namespace infer::plan {

using nlohmann::json;

//===----------------------------------------------------------------------===//
// Enums and small helpers
//===----------------------------------------------------------------------===//

std::string_view dtypeName(DType dtype) {
  switch (dtype) {
  case DType::kF32:
    return "f32";
  case DType::kF16:
    return "f16";
  case DType::kBF16:
    return "bf16";
  case DType::kI32:
    return "i32";
  case DType::kI64:
    return "i64";
  case DType::kF8E4M3:
    return "f8e4m3";
  case DType::kF8E5M2:
    return "f8e5m2";
  }
  return "?";
}

std::optional<DType> parseDType(std::string_view name) {
  for (DType d : {DType::kF32, DType::kF16, DType::kBF16, DType::kI32,
                  DType::kI64, DType::kF8E4M3, DType::kF8E5M2})
    if (dtypeName(d) == name)
      return d;
  return std::nullopt;
}

int64_t dtypeSize(DType dtype) {
  switch (dtype) {
  case DType::kF32:
  case DType::kI32:
    return 4;
  case DType::kF16:
  case DType::kBF16:
    return 2;
  case DType::kI64:
    return 8;
  case DType::kF8E4M3:
  case DType::kF8E5M2:
    return 1;
  }
  return 0;
}

std::string_view valueKindName(ValueKind kind) {
  switch (kind) {
  case ValueKind::kInput:
    return "input";
  case ValueKind::kParam:
    return "param";
  case ValueKind::kActivation:
    return "activation";
  case ValueKind::kKVCache:
    return "kv_cache";
  }
  return "?";
}

static std::optional<ValueKind> parseValueKind(std::string_view name) {
  for (ValueKind k : {ValueKind::kInput, ValueKind::kParam,
                      ValueKind::kActivation, ValueKind::kKVCache})
    if (valueKindName(k) == name)
      return k;
  return std::nullopt;
}

bool Value::operator==(const Value &o) const {
  return id == o.id && kind == o.kind && name == o.name && dtype == o.dtype &&
         shape == o.shape && sourceFile == o.sourceFile &&
         sourceTensor == o.sourceTensor && transforms == o.transforms &&
         workspaceOffset == o.workspaceOffset;
}

bool ModelInfo::operator==(const ModelInfo &o) const {
  return architecture == o.architecture && vocabSize == o.vocabSize &&
         hiddenSize == o.hiddenSize && numLayers == o.numLayers &&
         numHeads == o.numHeads && numKVHeads == o.numKVHeads &&
         headDim == o.headDim &&
         maxPositionEmbeddings == o.maxPositionEmbeddings &&
         bosTokenId == o.bosTokenId && eosTokenIds == o.eosTokenIds &&
         padTokenId == o.padTokenId;
}

bool Manifest::operator==(const Manifest &o) const {
  return formatVersion == o.formatVersion && inferVersion == o.inferVersion &&
         model == o.model && compileOptions == o.compileOptions &&
         targets == o.targets && kvCache == o.kvCache &&
         weightsDir == o.weightsDir && weightFiles == o.weightFiles &&
         tokenizerFile == o.tokenizerFile &&
         tokenizerConfigFile == o.tokenizerConfigFile &&
         programFile == o.programFile && planFile == o.planFile &&
         numRanks == o.numRanks && kernels == o.kernels &&
         packedWeights == o.packedWeights && deployConfig == o.deployConfig;
}

std::string fingerprint(std::string_view bytes) {
  uint64_t hash = 0xcbf29ce484222325ULL;
  for (unsigned char c : bytes) {
    hash ^= c;
    hash *= 0x100000001b3ULL;
  }
  char buf[17];
  std::snprintf(buf, sizeof(buf), "%016llx",
                static_cast<unsigned long long>(hash));
  return buf;
}

//===----------------------------------------------------------------------===//
// Step attributes
//===----------------------------------------------------------------------===//

static Status attrError(const Step &step, const std::string &name,
                        const std::string &what) {
  return invalidArgument("step '" + step.op + "': attribute '" + name + "' " +
                         what);
}

StatusOr<int64_t> Step::getInt(const std::string &name) const {
  auto it = attrs.find(name);
  if (it == attrs.end())
    return attrError(*this, name, "is missing");
  if (const auto *v = std::get_if<int64_t>(&it->second))
    return *v;
  return attrError(*this, name, "is not an integer");
}

StatusOr<double> Step::getFloat(const std::string &name) const {
  auto it = attrs.find(name);
  if (it == attrs.end())
    return attrError(*this, name, "is missing");
  if (const auto *v = std::get_if<double>(&it->second))
    return *v;
  // Integral values written without a fraction are accepted as floats.
  if (const auto *v = std::get_if<int64_t>(&it->second))
    return static_cast<double>(*v);
  return attrError(*this, name, "is not a number");
}

StatusOr<std::string> Step::getString(const std::string &name) const {
  auto it = attrs.find(name);
  if (it == attrs.end())
    return attrError(*this, name, "is missing");
  if (const auto *v = std::get_if<std::string>(&it->second))
    return *v;
  return attrError(*this, name, "is not a string");
}

int64_t Step::getInt(const std::string &name, int64_t defaultValue) const {
  auto it = attrs.find(name);
  if (it == attrs.end())
    return defaultValue;
  if (const auto *v = std::get_if<int64_t>(&it->second))
    return *v;
  return defaultValue;
}

double Step::getFloat(const std::string &name, double defaultValue) const {
  StatusOr<double> v = getFloat(name);
  return v.isOk() ? *v : defaultValue;
}

std::string Step::getString(const std::string &name,
                            const std::string &defaultValue) const {
  StatusOr<std::string> v = getString(name);
  return v.isOk() ? *v : defaultValue;
}

StatusOr<std::vector<int64_t>> Step::getSplitSizes() const {
  auto it = attrs.find("sizes");
  const auto *sizes = it == attrs.end()
                          ? nullptr
                          : std::get_if<std::vector<int64_t>>(&it->second);
  if (!sizes || sizes->size() != results.size() ||
      std::any_of(sizes->begin(), sizes->end(),
                  [](int64_t size) { return size <= 0; }))
    return invalidArgument("attribute 'sizes' must hold one positive width "
                           "per result");
  return *sizes;
}

StatusOr<int64_t> Step::getGatherDim() const {
  INFER_ASSIGN_OR_RETURN(int64_t dim, getInt("dim"));
  if (dim != 0 && dim != 1)
    return invalidArgument("all_gather dim must be 0 or 1, got " +
                           std::to_string(dim));
  return dim;
}

//===----------------------------------------------------------------------===//
// JSON encoding
//===----------------------------------------------------------------------===//

static json attrToJson(const AttrValue &value) {
  return std::visit([](const auto &v) { return json(v); }, value);
}

static json attrsToJson(const AttrMap &attrs) {
  json j = json::object();
  for (const auto &[name, value] : attrs)
    j[name] = attrToJson(value);
  return j;
}

static json dimsToJson(const std::vector<Dim> &shape) {
  json j = json::array();
  for (const Dim &d : shape) {
    if (d.isDynamic())
      j.push_back(d.symbol);
    else
      j.push_back(d.size);
  }
  return j;
}

static json kvCacheToJson(const KVCacheLayout &kv) {
  json j{{"layout", kv.layout},
         {"num_layers", kv.numLayers},
         {"num_kv_heads", kv.numKVHeads},
         {"head_dim", kv.headDim},
         {"block_size", kv.blockSize},
         {"dtype", std::string(dtypeName(kv.dtype))}};
  if (kv.isStreaming()) {
    j["sink_tokens"] = kv.sinkTokens;
    j["window"] = kv.window;
  }
  return j;
}

static json valueToJson(const Value &v) {
  json j{{"id", v.id},
         {"kind", std::string(valueKindName(v.kind))},
         {"name", v.name},
         {"dtype", std::string(dtypeName(v.dtype))},
         {"shape", dimsToJson(v.shape)}};
  if (v.kind == ValueKind::kParam) {
    j["source_file"] = v.sourceFile;
    j["source_tensor"] = v.sourceTensor;
    json transforms = json::array();
    for (const WeightTransform &t : v.transforms)
      transforms.push_back(
          json{{"kind", t.kind}, {"attrs", attrsToJson(t.attrs)}});
    j["transforms"] = transforms;
  }
  if (v.workspaceOffset >= 0)
    j["workspace_offset"] = v.workspaceOffset;
  return j;
}

std::string planToJson(const Plan &plan) {
  json ranks = json::array();
  for (const RankPlan &rank : plan.ranks) {
    json values = json::array();
    for (const Value &v : rank.values)
      values.push_back(valueToJson(v));
    json steps = json::array();
    for (const Step &s : rank.steps)
      steps.push_back(json{{"op", s.op},
                           {"operands", s.operands},
                           {"results", s.results},
                           {"attrs", attrsToJson(s.attrs)}});
    json r{{"rank", rank.rank},
           {"values", values},
           {"steps", steps},
           {"outputs", rank.outputs}};
    if (rank.workspaceBytesPerRow > 0)
      r["workspace_bytes_per_row"] = rank.workspaceBytesPerRow;
    ranks.push_back(std::move(r));
  }
  json j{{"format_version", plan.formatVersion},
         {"num_ranks", plan.numRanks},
         {"kv_cache", kvCacheToJson(plan.kvCache)},
         {"ranks", ranks}};
  return j.dump(1) + "\n";
}

//===----------------------------------------------------------------------===//
// JSON decoding
//===----------------------------------------------------------------------===//

namespace {

/// Typed access to JSON members with errors that name the path
/// ("ranks[0].values[3].dtype").
class Reader {
public:
  Reader(const json &j, std::string path) : j_(j), path_(std::move(path)) {}

  const std::string &path() const { return path_; }
  const json &raw() const { return j_; }

  Status expectObject() const {
    if (!j_.is_object())
      return error("", "must be an object");
    return Status::ok();
  }

  bool has(const char *key) const { return j_.contains(key); }

  Reader child(const char *key) const {
    return Reader(j_.at(key), path_ + (path_.empty() ? "" : ".") + key);
  }

  StatusOr<Reader> member(const char *key) const {
    if (!j_.is_object() || !j_.contains(key))
      return error(key, "is missing");
    return child(key);
  }

  StatusOr<int64_t> getInt(const char *key) const {
    INFER_ASSIGN_OR_RETURN(Reader r, member(key));
    if (!r.j_.is_number_integer())
      return r.error("", "must be an integer");
    return r.j_.get<int64_t>();
  }

  StatusOr<std::string> getString(const char *key) const {
    INFER_ASSIGN_OR_RETURN(Reader r, member(key));
    if (!r.j_.is_string())
      return r.error("", "must be a string");
    return r.j_.get<std::string>();
  }

  /// An optional string member; absent or null reads as `fallback`.
  StatusOr<std::string> getString(const char *key,
                                  const std::string &fallback) const {
    if (!j_.contains(key) || j_.at(key).is_null())
      return fallback;
    return getString(key);
  }

  StatusOr<std::vector<int>> getIdList(const char *key) const {
    INFER_ASSIGN_OR_RETURN(Reader r, member(key));
    if (!r.j_.is_array())
      return r.error("", "must be an array of value ids");
    std::vector<int> ids;
    for (const json &e : r.j_) {
      if (!e.is_number_integer() || e.get<int64_t>() < INT32_MIN ||
          e.get<int64_t>() > INT32_MAX)
        return r.error("", "must be an array of value ids");
      ids.push_back(e.get<int>());
    }
    return ids;
  }

  StatusOr<std::vector<Reader>> getArray(const char *key) const {
    INFER_ASSIGN_OR_RETURN(Reader r, member(key));
    if (!r.j_.is_array())
      return r.error("", "must be an array");
    std::vector<Reader> items;
    for (size_t i = 0; i < r.j_.size(); ++i)
      items.emplace_back(r.j_[i], r.path_ + "[" + std::to_string(i) + "]");
    return items;
  }

  Status error(const std::string &key, const std::string &what) const {
    std::string where = path_;
    if (!key.empty())
      where += (where.empty() ? "" : ".") + key;
    return invalidArgument(
        (where.empty() ? std::string("document") : "'" + where + "'") + " " +
        what);
  }

private:
  const json &j_;
  std::string path_;
};

} // namespace

static StatusOr<DType> readDType(const Reader &r, const char *key) {
  INFER_ASSIGN_OR_RETURN(std::string name, r.getString(key));
  std::optional<DType> dtype = parseDType(name);
  if (!dtype)
    return r.error(key, "has unknown dtype '" + name +
                            "' (expected f32, f16, bf16, i32 or i64)");
  return *dtype;
}

static StatusOr<AttrValue> readAttr(const Reader &r) {
  const json &j = r.raw();
  if (j.is_number_integer())
    return AttrValue(j.get<int64_t>());
  if (j.is_number_float())
    return AttrValue(j.get<double>());
  if (j.is_string())
    return AttrValue(j.get<std::string>());
  if (j.is_array()) {
    bool allInt = true, allNumber = true;
    for (const json &e : j) {
      allInt &= e.is_number_integer();
      allNumber &= e.is_number();
    }
    if (allInt) {
      std::vector<int64_t> v;
      for (const json &e : j)
        v.push_back(e.get<int64_t>());
      return AttrValue(v);
    }
    if (allNumber) {
      std::vector<double> v;
      for (const json &e : j)
        v.push_back(e.get<double>());
      return AttrValue(v);
    }
  }
  return r.error("", "must be a number, a string or an array of numbers");
}

static StatusOr<AttrMap> readAttrs(const Reader &parent, const char *key) {
  AttrMap attrs;
  if (!parent.has(key))
    return attrs;
  Reader r = parent.child(key);
  INFER_RETURN_IF_ERROR(r.expectObject());
  for (const auto &[name, value] : r.raw().items()) {
    INFER_ASSIGN_OR_RETURN(AttrValue v,
                           readAttr(Reader(value, r.path() + "." + name)));
    attrs.emplace(name, std::move(v));
  }
  return attrs;
}

static StatusOr<std::vector<Dim>> readShape(const Reader &parent) {
  INFER_ASSIGN_OR_RETURN(std::vector<Reader> dims, parent.getArray("shape"));
  std::vector<Dim> shape;
  for (const Reader &d : dims) {
    const json &j = d.raw();
    if (j.is_number_integer() && j.get<int64_t>() >= 0) {
      shape.push_back(Dim::fixed(j.get<int64_t>()));
    } else if (j.is_string()) {
      // Symbols are names for people and for the backend's checks ("T",
      // "B", "S", "M", or an expression such as "B+1"); any non-empty one is
      // accepted so the compiler can name new dimensions.
      std::string sym = j.get<std::string>();
      if (sym.empty())
        return d.error("", "is an empty dimension symbol");
      shape.push_back(Dim::dynamic(sym));
    } else {
      return d.error("", "must be a size >= 0 or a symbol");
    }
  }
  return shape;
}

static StatusOr<KVCacheLayout> readKVCache(const Reader &r) {
  INFER_RETURN_IF_ERROR(r.expectObject());
  KVCacheLayout kv;
  INFER_ASSIGN_OR_RETURN(kv.layout, r.getString("layout"));
  INFER_ASSIGN_OR_RETURN(kv.numLayers, r.getInt("num_layers"));
  INFER_ASSIGN_OR_RETURN(kv.numKVHeads, r.getInt("num_kv_heads"));
  INFER_ASSIGN_OR_RETURN(kv.headDim, r.getInt("head_dim"));
  INFER_ASSIGN_OR_RETURN(kv.blockSize, r.getInt("block_size"));
  INFER_ASSIGN_OR_RETURN(kv.dtype, readDType(r, "dtype"));
  if (kv.layout != "block_layer_kv_slot_head_dim")
    return r.error("layout", "is unknown: '" + kv.layout + "'");
  if (kv.numLayers <= 0 || kv.numKVHeads <= 0 || kv.headDim <= 0 ||
      kv.blockSize <= 0)
    return r.error("", "needs num_layers, num_kv_heads, head_dim and "
                       "block_size > 0");
  if (kv.dtype == DType::kI32 || kv.dtype == DType::kI64)
    return r.error("dtype", "must be a float type (f32, f16, bf16, f8e5m2 "
                            "or f8e4m3), got " +
                                std::string(dtypeName(kv.dtype)));
  if (r.has("window")) {
    INFER_ASSIGN_OR_RETURN(kv.window, r.getInt("window"));
    INFER_ASSIGN_OR_RETURN(kv.sinkTokens, r.getInt("sink_tokens"));
    if (kv.window <= 0 || kv.sinkTokens < 0)
      return r.error("", "needs window > 0 and sink_tokens >= 0 (streaming)");
  }
  return kv;
}

/// An f8e4m3 param is exactly one whose last transform is a valid
/// quantize_fp8_e4m3 (granularity, and per-tensor `parts` that add up to the
/// rows); no other value is fp8 (the KV cache's dtype is the layout's).
static Status checkFp8(const Reader &r, const Value &v) {
  const bool fp8 = v.dtype == DType::kF8E4M3 || v.dtype == DType::kF8E5M2;
  if (v.kind != ValueKind::kParam)
    return fp8 && v.kind != ValueKind::kKVCache
               ? r.error("dtype", "fp8 is only for params (and the KV "
                                  "cache's layout), not a " +
                                      std::string(valueKindName(v.kind)))
               : Status::ok();
  const char *quantize = "quantize_fp8_e4m3";
  for (size_t i = 0; i + 1 < v.transforms.size(); ++i)
    if (v.transforms[i].kind == quantize)
      return r.error("transforms", "has quantize_fp8_e4m3 before another "
                                   "transform (it must be the last)");
  const bool quantized =
      !v.transforms.empty() && v.transforms.back().kind == quantize;
  if (v.dtype == DType::kF8E5M2)
    return r.error("dtype", "f8e5m2 is not a param dtype (fp8 weights are "
                            "f8e4m3)");
  if (quantized != (v.dtype == DType::kF8E4M3))
    return r.error("dtype", quantized ? "must be f8e4m3 for a param "
                                        "quantized by quantize_fp8_e4m3"
                                      : "f8e4m3 needs a quantize_fp8_e4m3 "
                                        "transform");
  if (!quantized)
    return Status::ok();
  if (v.shape.size() != 2)
    return r.error("shape", "of an fp8 param must be 2-D [rows, columns]");
  const AttrMap &attrs = v.transforms.back().attrs;
  auto granularity = attrs.find("granularity");
  const std::string *g = granularity == attrs.end()
                             ? nullptr
                             : std::get_if<std::string>(&granularity->second);
  if (!g || (*g != "per-tensor" && *g != "per-channel"))
    return r.error("transforms", "quantize_fp8_e4m3 needs granularity "
                                 "\"per-tensor\" or \"per-channel\"");
  auto parts = attrs.find("parts");
  if (parts == attrs.end())
    return Status::ok();
  const auto *rows = std::get_if<std::vector<int64_t>>(&parts->second);
  bool positive = rows != nullptr;
  int64_t total = 0;
  for (int64_t n : rows ? *rows : std::vector<int64_t>{}) {
    positive = positive && n > 0;
    total += n;
  }
  if (*g != "per-tensor" || !positive || total != v.shape[0].size)
    return r.error("transforms", "quantize_fp8_e4m3 parts must be positive "
                                 "row counts adding up to the param's rows "
                                 "(per-tensor only)");
  return Status::ok();
}

/// The slice attributes `dim`, `begin`, `size` (named with `prefix`) of a
/// transform: all three or, where `optional`, none; integers that name a
/// dimension of the param and a non-empty range from a non-negative begin.
static Status checkSliceAttrs(const Reader &r, const Value &v,
                              const WeightTransform &t,
                              const std::string &prefix, bool optional) {
  int present = 0;
  std::vector<int64_t> ints;
  for (const char *name : {"dim", "begin", "size"}) {
    auto it = t.attrs.find(prefix + name);
    if (it == t.attrs.end())
      continue;
    ++present;
    if (const auto *n = std::get_if<int64_t>(&it->second))
      ints.push_back(*n);
  }
  if (optional && present == 0)
    return Status::ok();
  // Extents beyond 2^40 (the largest param) would overflow begin + size.
  const int64_t kMaxExtent = int64_t(1) << 40;
  if (ints.size() != 3 || ints[0] < 0 ||
      ints[0] >= static_cast<int64_t>(v.shape.size()) || ints[1] < 0 ||
      ints[2] <= 0 || ints[1] > kMaxExtent || ints[2] > kMaxExtent)
    return r.error("transforms", t.kind + " needs integer " + prefix +
                                     "dim (a dimension " + "of the param), " +
                                     prefix + "begin in [0, 2^40] and " +
                                     prefix + "size in [1, 2^40]" +
                                     (optional ? ", or none" : ""));
  return Status::ok();
}

/// The attributes of `slice` and `concat` transforms; a `concat` may slice
/// its tensor (a tensor-parallel part of a merged projection).
static Status checkTransforms(const Reader &r, const Value &v) {
  for (const WeightTransform &t : v.transforms) {
    if (t.kind == "slice")
      INFER_RETURN_IF_ERROR(checkSliceAttrs(r, v, t, "", /*optional=*/false));
    if (t.kind != "concat")
      continue;
    auto axis = t.attrs.find("axis");
    auto file = t.attrs.find("source_file");
    auto tensor = t.attrs.find("source_tensor");
    auto nonEmpty = [&](auto it) {
      const auto *text =
          it == t.attrs.end() ? nullptr : std::get_if<std::string>(&it->second);
      return text && !text->empty();
    };
    if (axis == t.attrs.end() ||
        !std::holds_alternative<int64_t>(axis->second) || !nonEmpty(file) ||
        !nonEmpty(tensor))
      return r.error("transforms", "concat needs an integer axis and "
                                   "non-empty source_file and source_tensor");
    INFER_RETURN_IF_ERROR(
        checkSliceAttrs(r, v, t, "slice_", /*optional=*/true));
  }
  return Status::ok();
}

static StatusOr<Value> readValue(const Reader &r) {
  INFER_RETURN_IF_ERROR(r.expectObject());
  Value v;
  INFER_ASSIGN_OR_RETURN(int64_t id, r.getInt("id"));
  if (id < 0 || id > INT32_MAX)
    return r.error("id", "must be in [0, 2^31)");
  v.id = static_cast<int>(id);
  INFER_ASSIGN_OR_RETURN(std::string kind, r.getString("kind"));
  std::optional<ValueKind> k = parseValueKind(kind);
  if (!k)
    return r.error("kind", "is unknown: '" + kind +
                               "' (expected input, param, activation or "
                               "kv_cache)");
  v.kind = *k;
  INFER_ASSIGN_OR_RETURN(v.name, r.getString("name", ""));
  INFER_ASSIGN_OR_RETURN(v.dtype, readDType(r, "dtype"));
  INFER_ASSIGN_OR_RETURN(v.shape, readShape(r));
  if (r.has("workspace_offset")) {
    INFER_ASSIGN_OR_RETURN(v.workspaceOffset, r.getInt("workspace_offset"));
    if (v.kind != ValueKind::kActivation || v.workspaceOffset < 0)
      return r.error("workspace_offset",
                     "must be a non-negative offset of an activation");
  }
  if (v.kind == ValueKind::kParam) {
    INFER_ASSIGN_OR_RETURN(v.sourceFile, r.getString("source_file"));
    INFER_ASSIGN_OR_RETURN(v.sourceTensor, r.getString("source_tensor"));
    if (v.sourceFile.empty() || v.sourceTensor.empty())
      return r.error("", "is a param without a source file and tensor");
    for (const Dim &d : v.shape)
      if (d.isDynamic())
        return r.error("shape", "of a param must be static");
    if (r.has("transforms")) {
      INFER_ASSIGN_OR_RETURN(std::vector<Reader> ts, r.getArray("transforms"));
      for (const Reader &t : ts) {
        INFER_RETURN_IF_ERROR(t.expectObject());
        WeightTransform wt;
        INFER_ASSIGN_OR_RETURN(wt.kind, t.getString("kind"));
        INFER_ASSIGN_OR_RETURN(wt.attrs, readAttrs(t, "attrs"));
        v.transforms.push_back(std::move(wt));
      }
    }
  }
  INFER_RETURN_IF_ERROR(checkTransforms(r, v));
  INFER_RETURN_IF_ERROR(checkFp8(r, v));
  return v;
}

static StatusOr<Step> readStep(const Reader &r) {
  INFER_RETURN_IF_ERROR(r.expectObject());
  Step s;
  INFER_ASSIGN_OR_RETURN(s.op, r.getString("op"));
  INFER_ASSIGN_OR_RETURN(s.operands, r.getIdList("operands"));
  if (r.has("results")) {
    INFER_ASSIGN_OR_RETURN(s.results, r.getIdList("results"));
  }
  INFER_ASSIGN_OR_RETURN(s.attrs, readAttrs(r, "attrs"));
  return s;
}

//===----------------------------------------------------------------------===//
// Verification
//===----------------------------------------------------------------------===//

namespace {

bool isFloat(DType d) {
  return d == DType::kF32 || d == DType::kF16 || d == DType::kBF16;
}

/// The most workspace one token row may take (real models take well under
/// a MiB): a plan cannot make a backend allocate without bound.
constexpr int64_t kMaxWorkspaceBytesPerRow = int64_t(1) << 31;

/// The dtype and rank a batch-contract input has (Backend.h's Batch).
struct InputSpec {
  std::string_view name;
  DType dtype;
  size_t rank;
};
constexpr InputSpec kInputs[] = {
    {"token_ids", DType::kI32, 1},       {"positions", DType::kI32, 1},
    {"query_start_loc", DType::kI32, 1}, {"context_lens", DType::kI32, 1},
    {"block_tables", DType::kI32, 2},    {"slot_mapping", DType::kI64, 1},
    {"logits_indices", DType::kI32, 1},
};

/// Checks the values and steps of one rank; `where` prefixes every error.
class RankVerifier {
public:
  RankVerifier(const RankPlan &rank, const Plan &plan, std::string where)
      : rank_(rank), plan_(plan), where_(std::move(where)) {}

  Status verify();

private:
  Status error(const std::string &what) const {
    return invalidArgument(where_ + ": " + what);
  }
  std::string name(int id) const {
    const Value &v = *byId_[id];
    return "value " + std::to_string(id) +
           (v.name.empty() ? "" : " ('" + v.name + "')");
  }
  /// The last dimension of an activation, or the element count of a param
  /// (their static widths); -1 where it is not static.
  int64_t width(int id) const;
  int64_t rows(int id) const {
    const Value &v = *byId_[id];
    return v.shape.size() == 2 && !v.shape[0].isDynamic() ? v.shape[0].size
                                                          : -1;
  }
  Status verifyValue(const Value &v);
  Status verifyOperand(const std::string &at, const StepOpInfo &info,
                       size_t index, int id);
  Status verifyShapes(const std::string &at, const DecodedStep &d);
  Status verifyWorkspaceLiveness() const;
  /// Whether two static widths disagree (a dynamic one agrees with anything).
  static bool differ(int64_t a, int64_t b) {
    return a >= 0 && b >= 0 && a != b;
  }

  const RankPlan &rank_;
  const Plan &plan_;
  std::string where_;
  std::vector<const Value *> byId_;
};

int64_t RankVerifier::width(int id) const {
  const Value &v = *byId_[id];
  if (v.kind == ValueKind::kParam) {
    int64_t n = 1;
    for (const Dim &d : v.shape)
      n *= d.size;
    return v.shape.size() == 1 ? n : v.shape.back().size;
  }
  if (v.shape.empty() || v.shape.back().isDynamic())
    return -1;
  return v.shape.back().size;
}

Status RankVerifier::verifyValue(const Value &v) {
  const std::string what = name(v.id);
  switch (v.kind) {
  case ValueKind::kInput: {
    const InputSpec *spec = nullptr;
    for (const InputSpec &s : kInputs)
      if (s.name == v.name)
        spec = &s;
    if (!spec)
      return error(what + " is not a batch-contract input");
    if (v.dtype != spec->dtype || v.shape.size() != spec->rank)
      return error(what + " must be " + std::to_string(spec->rank) + "-D " +
                   std::string(dtypeName(spec->dtype)));
    break;
  }
  case ValueKind::kParam: {
    if (!isFloat(v.dtype) && v.dtype != DType::kF8E4M3)
      return error(what + " has dtype " + std::string(dtypeName(v.dtype)) +
                   " (params are f32, f16, bf16 or f8e4m3)");
    if (v.shape.empty() || v.shape.size() > 2)
      return error(what + " must be 1-D or 2-D");
    // Element counts of up to 2^40 leave room for byte offsets in int64.
    int64_t elements = 1;
    for (const Dim &d : v.shape) {
      if (d.isDynamic() || d.size <= 0 || d.size > (int64_t(1) << 40))
        return error(what + " needs static sizes in [1, 2^40]");
      elements *= d.size;
      if (elements > (int64_t(1) << 40))
        return error(what + " has more than 2^40 elements");
    }
    if (v.sourceFile.empty() || v.sourceTensor.empty())
      return error(what + " has no source file and tensor");
    INFER_RETURN_IF_ERROR(checkRelativePath(v.sourceFile,
                                            what + ": source_file",
                                            "the weights directory")
                              .withContext(where_));
    for (const WeightTransform &t : v.transforms) {
      auto file = t.attrs.find("source_file");
      if (file != t.attrs.end())
        if (const auto *name = std::get_if<std::string>(&file->second))
          INFER_RETURN_IF_ERROR(
              checkRelativePath(*name, what + ": " + t.kind + " source_file",
                                "the weights directory")
                  .withContext(where_));
    }
    break;
  }
  case ValueKind::kActivation: {
    if (plan_.formatVersion == 1 && v.dtype != DType::kF32)
      return error(what + " is " + std::string(dtypeName(v.dtype)) +
                   ": format version 1 has f32 activations only");
    if (!isFloat(v.dtype))
      return error(what + " has dtype " + std::string(dtypeName(v.dtype)) +
                   " (activations are f32, f16 or bf16)");
    if (v.shape.size() != 2 || v.shape[1].isDynamic() || v.shape[1].size <= 0 ||
        v.shape[1].size > (int64_t(1) << 31))
      return error(what + " must be [rows, columns] with static columns in "
                          "[1, 2^31]");
    // Static rows are allocated as declared: bound them like params.
    if (!v.shape[0].isDynamic() &&
        (v.shape[0].size < 0 || v.shape[0].size > (int64_t(1) << 31) ||
         v.shape[0].size * v.shape[1].size > (int64_t(1) << 40)))
      return error(what + " has static rows outside [0, 2^31] or more than "
                          "2^40 elements");
    // Offset first: offset + width could overflow.
    if (v.workspaceOffset >= 0 &&
        (v.workspaceOffset > rank_.workspaceBytesPerRow ||
         v.workspaceOffset + v.shape[1].size * dtypeSize(v.dtype) >
             rank_.workspaceBytesPerRow))
      return error(what + " does not fit the workspace: offset " +
                   std::to_string(v.workspaceOffset) + " + " +
                   std::to_string(v.shape[1].size) + " x " +
                   std::to_string(dtypeSize(v.dtype)) + " bytes > " +
                   std::to_string(rank_.workspaceBytesPerRow) +
                   " bytes per row");
    break;
  }
  case ValueKind::kKVCache:
    break;
  }
  if (v.kind != ValueKind::kActivation && v.workspaceOffset >= 0)
    return error(what + " is placed in the workspace but is not an "
                        "activation");
  return Status::ok();
}

Status RankVerifier::verifyOperand(const std::string &at,
                                   const StepOpInfo &info, size_t index,
                                   int id) {
  const OperandRole role = index < info.operands.size() ? info.operands[index]
                                                        : info.operands.back();
  const Value &v = *byId_[id];
  const std::string what =
      at + ": operand " + std::to_string(index) + " (" + name(id) + ")";
  switch (role) {
  case OperandRole::kTensor:
  case OperandRole::kOptionalTensor:
  case OperandRole::kTensors:
  case OperandRole::kWeight: {
    const bool tensor =
        v.kind == ValueKind::kActivation || v.kind == ValueKind::kParam;
    const bool fp8Weight = role == OperandRole::kWeight &&
                           v.kind == ValueKind::kParam &&
                           v.dtype == DType::kF8E4M3;
    if (!tensor || (!isFloat(v.dtype) && !fp8Weight))
      return error(what + " must be a float activation or param" +
                   (v.dtype == DType::kF8E4M3
                        ? " (fp8 only as a linear or logits weight)"
                        : ""));
    return Status::ok();
  }
  case OperandRole::kKVCache:
    if (v.kind != ValueKind::kKVCache)
      return error(what + " must be the KV cache");
    return Status::ok();
  default:
    if (v.kind != ValueKind::kInput || v.name != inputNameOf(role))
      return error(what + " must be the input '" +
                   std::string(inputNameOf(role)) + "'");
    return Status::ok();
  }
}

Status RankVerifier::verifyShapes(const std::string &at, const DecodedStep &d) {
  auto in = [&](size_t i) { return d.operands[i]; };
  auto out = [&](size_t i) { return d.results[i]; };
  auto mismatch = [&](const std::string &what) {
    return error(at + ": " + what);
  };
  const KVCacheLayout &kv = plan_.kvCache;
  auto checkCache = [&](int64_t layer) -> Status {
    if (layer >= kv.numLayers)
      return mismatch("layer " + std::to_string(layer) +
                      " outside the KV "
                      "cache's " +
                      std::to_string(kv.numLayers) + " layers");
    return Status::ok();
  };
  // A GEMM's weight (operand 1): static and 2-D (backends size the result
  // by its rows), as wide as the input (operand 0). `shape`: how the error
  // names it.
  auto checkWeight = [&](const char *shape) -> Status {
    const Value &w = *byId_[in(1)];
    if (w.shape.size() != 2 || w.shape[0].isDynamic() || w.shape[1].isDynamic())
      return mismatch(std::string("the weight must be 2-D ") + shape);
    if (differ(width(in(1)), width(in(0))))
      return mismatch("weight [" + std::to_string(rows(in(1))) + ", " +
                      std::to_string(width(in(1))) +
                      "] does not match the input width " +
                      std::to_string(width(in(0))));
    return Status::ok();
  };
  switch (d.op) {
  case StepOp::kEmbedding: {
    const Value &table = *byId_[in(0)];
    if (table.shape.size() != 2)
      return mismatch("the table must be 2-D");
    if (differ(width(out(0)), width(in(0))))
      return mismatch("the result's width differs from the table's");
    if (d.vocabSize > 0 && rows(in(0)) >= 0 &&
        d.vocabOffset + rows(in(0)) > d.vocabSize)
      return mismatch("vocab_offset " + std::to_string(d.vocabOffset) + " + " +
                      std::to_string(rows(in(0))) +
                      " table rows exceed vocab_size " +
                      std::to_string(d.vocabSize));
    return Status::ok();
  }
  case StepOp::kRmsNorm:
    if (d.normHeadDim > 0) {
      if (differ(width(in(1)), d.normHeadDim) ||
          (width(in(0)) >= 0 && width(in(0)) % d.normHeadDim != 0) ||
          differ(width(out(0)), width(in(0))))
        return mismatch("head_dim " + std::to_string(d.normHeadDim) +
                        ": the weight must have head_dim entries and the "
                        "input and result a multiple of head_dim columns");
      return Status::ok();
    }
    if (differ(width(in(1)), width(in(0))) ||
        differ(width(out(0)), width(in(0))))
      return mismatch("the weight or result width differs from the input's");
    return Status::ok();
  case StepOp::kAddRmsNorm:
    if (differ(width(in(1)), width(in(0))) ||
        differ(width(in(2)), width(in(0))) ||
        differ(width(out(0)), width(in(0))) ||
        differ(width(out(1)), width(in(0))))
      return mismatch("the operands' or results' widths differ");
    return Status::ok();
  case StepOp::kLinearSwiGlu: {
    INFER_RETURN_IF_ERROR(checkWeight("[2I, K] with static I and K"));
    if (rows(in(1)) % 2 != 0 || differ(width(out(0)), rows(in(1)) / 2))
      return mismatch("the result width must be half the weight's rows "
                      "(gate rows, then as many up rows)");
    return Status::ok();
  }
  case StepOp::kLinear:
  case StepOp::kLinearResidual:
  case StepOp::kLogits: {
    // Backends size the result by the weight's rows: a dynamic N (an
    // activation as the weight) would make it differ from the declared width.
    INFER_RETURN_IF_ERROR(checkWeight("[N, K] with static N and K"));
    if (differ(width(out(0)), rows(in(1))))
      return mismatch("the result width differs from the weight's rows");
    // The bias: linear's third operand, linear_residual's fourth.
    const size_t bias = d.op == StepOp::kLinearResidual ? 3 : 2;
    if (d.operands.size() > bias && differ(width(in(bias)), rows(in(1))))
      return mismatch("the bias size differs from the weight's rows");
    if (d.op == StepOp::kLinearResidual) {
      const Value &residual = *byId_[in(2)];
      if (residual.shape.size() != 2 || differ(width(in(2)), width(out(0))))
        return mismatch("the residual must be 2-D [T, N] with the result's "
                        "width");
      if (residual.dtype != byId_[out(0)]->dtype)
        return mismatch("the residual's dtype (" +
                        std::string(dtypeName(residual.dtype)) +
                        ") differs from the result's (" +
                        std::string(dtypeName(byId_[out(0)]->dtype)) + ")");
    }
    if (d.op == StepOp::kLogits && byId_[out(0)]->dtype != DType::kF32)
      return mismatch("logits are f32");
    return Status::ok();
  }
  case StepOp::kRope:
    if ((width(in(0)) >= 0 && width(in(0)) % d.rope.headDim != 0) ||
        differ(width(out(0)), width(in(0))))
      return mismatch("the input width is not a multiple of head_dim or "
                      "differs from the result's");
    return Status::ok();
  case StepOp::kKVCacheWrite:
  case StepOp::kRopeKVCacheWrite:
    INFER_RETURN_IF_ERROR(checkCache(d.layer));
    if (differ(width(in(1)), kv.numKVHeads * kv.headDim) ||
        differ(width(in(2)), kv.numKVHeads * kv.headDim))
      return mismatch("keys and values must be num_kv_heads * head_dim = " +
                      std::to_string(kv.numKVHeads * kv.headDim) + " wide");
    if (d.op == StepOp::kRopeKVCacheWrite && d.rope.headDim != kv.headDim)
      return mismatch("head_dim differs from the KV cache's");
    return Status::ok();
  case StepOp::kRopeQKVCacheWrite:
    INFER_RETURN_IF_ERROR(checkCache(d.layer));
    if (differ(width(in(2)), kv.numKVHeads * kv.headDim) ||
        differ(width(in(3)), kv.numKVHeads * kv.headDim))
      return mismatch("keys and values must be num_kv_heads * head_dim = " +
                      std::to_string(kv.numKVHeads * kv.headDim) + " wide");
    if (d.rope.headDim != kv.headDim)
      return mismatch("head_dim differs from the KV cache's");
    if ((width(in(1)) >= 0 && width(in(1)) % d.rope.headDim != 0) ||
        differ(width(out(0)), width(in(1))))
      return mismatch("the query width is not a multiple of head_dim or "
                      "differs from the result's");
    if (byId_[in(1)]->dtype != byId_[in(2)]->dtype ||
        byId_[out(0)]->dtype != byId_[in(1)]->dtype)
      return mismatch("the query, the keys and the rotated query must have "
                      "one dtype");
    return Status::ok();
  case StepOp::kPagedAttention: {
    const AttentionAttrs &a = d.attention;
    INFER_RETURN_IF_ERROR(checkCache(a.layer));
    if (a.numKVHeads != kv.numKVHeads || a.headDim != kv.headDim)
      return mismatch("num_kv_heads / head_dim differ from the KV cache's");
    if (differ(width(in(0)), a.numHeads * a.headDim) ||
        differ(width(out(0)), a.numHeads * a.headDim))
      return mismatch("the query and result must be num_heads * head_dim = " +
                      std::to_string(a.numHeads * a.headDim) + " wide");
    return Status::ok();
  }
  case StepOp::kSilu:
  case StepOp::kGeluTanh:
  case StepOp::kGelu:
  case StepOp::kCast:
  case StepOp::kAllReduce:
  case StepOp::kGatherRows:
    if (differ(width(out(0)), width(in(0))))
      return mismatch("the result width differs from the input's");
    return Status::ok();
  case StepOp::kAdd:
  case StepOp::kMul:
  case StepOp::kSiluMul:
  case StepOp::kBiasAdd:
    if (differ(width(in(1)), width(in(0))) ||
        differ(width(out(0)), width(in(0))))
      return mismatch("the operands' or result's widths differ");
    return Status::ok();
  case StepOp::kSplit: {
    int64_t total = 0;
    for (size_t r = 0; r < d.results.size(); ++r) {
      total += d.splitSizes[r];
      if (differ(width(out(r)), d.splitSizes[r]))
        return mismatch("result " + std::to_string(r) +
                        " is not as wide as its size");
    }
    if (differ(total, width(in(0))))
      return mismatch("the sizes add up to " + std::to_string(total) +
                      ", the input is " + std::to_string(width(in(0))) +
                      " wide");
    return Status::ok();
  }
  case StepOp::kFused:
    for (int id : d.operands)
      if (differ(width(id), width(in(0))))
        return mismatch("the operands' widths differ");
    for (int id : d.results)
      if (differ(width(id), width(in(0))))
        return mismatch("the results' widths differ from the operands'");
    return Status::ok();
  case StepOp::kAllGather: {
    const int64_t factor = d.gatherDim == 1 ? plan_.numRanks : 1;
    if (width(in(0)) >= 0 && differ(width(out(0)), width(in(0)) * factor))
      return mismatch("the result width is not the gathered width");
    return Status::ok();
  }
  }
  return Status::ok();
}

/// Two activations placed in the workspace that are live at the same step
/// must not share bytes: a backend writes a step's results while it reads
/// the step's operands. Live is from the defining step to the last use,
/// both included, as infer-plan-memory plans them.
Status RankVerifier::verifyWorkspaceLiveness() const {
  struct Placed {
    int id;
    int64_t begin, end, first, last;
  };
  const size_t n = rank_.values.size();
  std::vector<int64_t> first(n, -1), last(n, -1);
  for (size_t i = 0; i < rank_.steps.size(); ++i) {
    for (int id : rank_.steps[i].operands)
      last[id] = static_cast<int64_t>(i);
    for (int id : rank_.steps[i].results)
      first[id] = last[id] = static_cast<int64_t>(i);
  }
  std::vector<Placed> placed;
  for (const Value &v : rank_.values)
    if (v.workspaceOffset >= 0 && first[v.id] >= 0)
      placed.push_back(
          {v.id, v.workspaceOffset,
           v.workspaceOffset + v.shape[1].size * dtypeSize(v.dtype),
           first[v.id], last[v.id]});
  std::sort(placed.begin(), placed.end(), [](const Placed &a, const Placed &b) {
    return std::tie(a.begin, a.id) < std::tie(b.begin, b.id);
  });
  for (size_t a = 0; a < placed.size(); ++a)
    for (size_t b = a + 1; b < placed.size() && placed[b].begin < placed[a].end;
         ++b)
      if (placed[a].first <= placed[b].last &&
          placed[b].first <= placed[a].last)
        return error(
            name(placed[a].id) + " and " + name(placed[b].id) +
            " overlap in the workspace while both are live (steps " +
            std::to_string(std::max(placed[a].first, placed[b].first)) +
            " to " + std::to_string(std::min(placed[a].last, placed[b].last)) +
            ")");
  return Status::ok();
}

Status RankVerifier::verify() {
  const int n = static_cast<int>(rank_.values.size());
  byId_.assign(n, nullptr);
  for (const Value &v : rank_.values) {
    if (v.id < 0 || v.id >= n)
      return error("value id " + std::to_string(v.id) + " out of range [0, " +
                   std::to_string(n) + ")");
    if (byId_[v.id])
      return error("value id " + std::to_string(v.id) + " defined twice");
    byId_[v.id] = &v;
  }
  // The backends allocate workspace_bytes_per_row for each token of a batch.
  if (rank_.workspaceBytesPerRow < 0 ||
      rank_.workspaceBytesPerRow > kMaxWorkspaceBytesPerRow)
    return error("workspace_bytes_per_row " +
                 std::to_string(rank_.workspaceBytesPerRow) +
                 " is outside [0, " + std::to_string(kMaxWorkspaceBytesPerRow) +
                 "]");
  bool hasCache = false;
  for (const Value &v : rank_.values) {
    INFER_RETURN_IF_ERROR(verifyValue(v));
    hasCache = hasCache || v.kind == ValueKind::kKVCache;
  }
  if (hasCache) {
    const KVCacheLayout &kv = plan_.kvCache;
    if (kv.numLayers <= 0 || kv.numKVHeads <= 0 || kv.headDim <= 0)
      return error("the KV cache needs num_layers, num_kv_heads and head_dim "
                   "> 0");
  }

  std::vector<bool> defined(n, false);
  for (const Value &v : rank_.values)
    defined[v.id] = v.kind != ValueKind::kActivation;
  for (size_t i = 0; i < rank_.steps.size(); ++i) {
    const Step &s = rank_.steps[i];
    const std::string at = "step " + std::to_string(i) + " ('" + s.op + "')";
    for (size_t k = 0; k < s.operands.size(); ++k) {
      const int id = s.operands[k];
      if (id < 0 || id >= n)
        return error(at + ": operand id " + std::to_string(id) +
                     " out of range");
      if (!defined[id])
        return error(at + ": operand " + name(id) +
                     " used before it is defined");
    }
    for (int id : s.results) {
      if (id < 0 || id >= n)
        return error(at + ": result id " + std::to_string(id) +
                     " out of range");
      if (byId_[id]->kind != ValueKind::kActivation)
        return error(at + ": result " + name(id) + " is not an activation");
      if (defined[id])
        return error(at + ": result " + name(id) + " defined twice");
      defined[id] = true;
    }
    StatusOr<DecodedStep> decoded = decodeStep(s);
    if (!decoded.isOk())
      return decoded.status().withContext(where_ + ": " + at);
    const StepOpInfo &info = stepOpInfo(decoded->op);
    for (size_t k = 0; k < s.operands.size(); ++k)
      INFER_RETURN_IF_ERROR(verifyOperand(at, info, k, s.operands[k]));
    INFER_RETURN_IF_ERROR(verifyShapes(at, *decoded));
  }
  INFER_RETURN_IF_ERROR(verifyWorkspaceLiveness());
  if (rank_.outputs.empty())
    return error("no outputs");
  for (int id : rank_.outputs) {
    if (id < 0 || id >= n)
      return error("output id " + std::to_string(id) + " out of range");
    if (!defined[id] || byId_[id]->kind != ValueKind::kActivation)
      return error("output " + name(id) + " is never defined by a step");
    if (byId_[id]->workspaceOffset >= 0)
      return error("output " + name(id) +
                   " is placed in the workspace (outputs own their memory)");
  }
  return Status::ok();
}

} // namespace

/// The operand of a collective step as its ranks exchange it: dtype and
/// shape (a dynamic dimension by its symbol).
static std::string collectiveOperand(const RankPlan &rank, const Step &step) {
  const Value &v = *std::find_if(
      rank.values.begin(), rank.values.end(),
      [&](const Value &value) { return value.id == step.operands[0]; });
  std::string text(dtypeName(v.dtype));
  for (const Dim &d : v.shape)
    text += " " + (d.isDynamic() ? d.symbol : std::to_string(d.size));
  return text;
}

/// SPMD: every rank runs the same collectives in the same order on
/// operands of the same shape, or a rank would wait forever or read past
/// another's buffer. Runs once every rank verified (operands exist).
static Status verifyCollectives(const Plan &plan) {
  auto collectives = [](const RankPlan &rank) {
    std::vector<std::string> list;
    for (const Step &s : rank.steps)
      if (s.op == "all_reduce" || s.op == "all_gather")
        list.push_back(s.op + " of " + collectiveOperand(rank, s) +
                       (s.op == "all_gather"
                            ? " dim " + std::to_string(s.getInt("dim", 0))
                            : ""));
    return list;
  };
  const std::vector<std::string> first = collectives(plan.ranks[0]);
  for (size_t r = 1; r < plan.ranks.size(); ++r) {
    const std::vector<std::string> other = collectives(plan.ranks[r]);
    for (size_t k = 0; k < std::max(first.size(), other.size()); ++k) {
      const std::string a = k < first.size() ? first[k] : "nothing";
      const std::string b = k < other.size() ? other[k] : "nothing";
      if (a != b)
        return invalidArgument("collective " + std::to_string(k) +
                               " differs between ranks: rank 0 runs " + a +
                               ", rank " + std::to_string(r) + " runs " + b);
    }
  }
  return Status::ok();
}

Status verifyPlan(const Plan &plan) {
  if (plan.formatVersion < kOldestPlanFormatVersion ||
      plan.formatVersion > kPlanFormatVersion)
    return invalidArgument("plan format_version " +
                           std::to_string(plan.formatVersion) +
                           " is not supported (this runtime reads versions " +
                           std::to_string(kOldestPlanFormatVersion) + " to " +
                           std::to_string(kPlanFormatVersion) + ")");
  if (plan.numRanks < 1 ||
      static_cast<int64_t>(plan.ranks.size()) != plan.numRanks)
    return invalidArgument("plan has " + std::to_string(plan.ranks.size()) +
                           " ranks but num_ranks is " +
                           std::to_string(plan.numRanks));
  const KVCacheLayout &kv = plan.kvCache;
  if (kv.layout != "block_layer_kv_slot_head_dim")
    return invalidArgument("unknown KV-cache layout '" + kv.layout + "'");
  if (kv.numLayers < 0 || kv.numKVHeads < 0 || kv.headDim < 0 ||
      kv.blockSize <= 0 || kv.sinkTokens < 0 || kv.window < 0)
    return invalidArgument("the KV-cache layout has a negative size or a "
                           "block_size <= 0");
  if (!isFloat(kv.dtype) && kv.dtype != DType::kF8E4M3 &&
      kv.dtype != DType::kF8E5M2)
    return invalidArgument("the KV cache's dtype must be a float type, got " +
                           std::string(dtypeName(kv.dtype)));
  for (size_t i = 0; i < plan.ranks.size(); ++i) {
    if (plan.ranks[i].rank != static_cast<int>(i))
      return invalidArgument("rank " + std::to_string(i) + " is numbered " +
                             std::to_string(plan.ranks[i].rank));
    INFER_RETURN_IF_ERROR(
        RankVerifier(plan.ranks[i], plan, "rank " + std::to_string(i))
            .verify());
  }
  return verifyCollectives(plan);
}

static StatusOr<json> parseJsonText(std::string_view text, const char *what) {
  INFER_RETURN_IF_ERROR(checkJsonDepth(text, what));
  json j = json::parse(text.begin(), text.end(), nullptr,
                       /*allow_exceptions=*/false);
  if (j.is_discarded())
    return invalidArgument(std::string(what) + " is not valid JSON");
  if (!j.is_object())
    return invalidArgument(std::string(what) + " must be a JSON object");
  return j;
}

StatusOr<Plan> parsePlanJson(std::string_view text) {
  INFER_ASSIGN_OR_RETURN(json j, parseJsonText(text, "plan"));
  Reader r(j, "");
  Plan plan;
  INFER_ASSIGN_OR_RETURN(int64_t version, r.getInt("format_version"));
  if (version < kOldestPlanFormatVersion || version > kPlanFormatVersion)
    return invalidArgument("plan format_version " + std::to_string(version) +
                           " is not supported (this runtime reads versions " +
                           std::to_string(kOldestPlanFormatVersion) + " to " +
                           std::to_string(kPlanFormatVersion) + ")");
  plan.formatVersion = static_cast<int>(version);
  INFER_ASSIGN_OR_RETURN(int64_t numRanks, r.getInt("num_ranks"));
  if (numRanks < 1)
    return r.error("num_ranks", "must be >= 1");
  plan.numRanks = static_cast<int>(numRanks);
  INFER_ASSIGN_OR_RETURN(Reader kv, r.member("kv_cache"));
  INFER_ASSIGN_OR_RETURN(plan.kvCache, readKVCache(kv));
  INFER_ASSIGN_OR_RETURN(std::vector<Reader> ranks, r.getArray("ranks"));
  if (static_cast<int64_t>(ranks.size()) != numRanks)
    return invalidArgument("plan has " + std::to_string(ranks.size()) +
                           " ranks but num_ranks is " +
                           std::to_string(numRanks));
  for (size_t i = 0; i < ranks.size(); ++i) {
    const Reader &rr = ranks[i];
    INFER_RETURN_IF_ERROR(rr.expectObject());
    RankPlan rank;
    INFER_ASSIGN_OR_RETURN(int64_t rankId, rr.getInt("rank"));
    if (rankId != static_cast<int64_t>(i))
      return rr.error("rank", "must be " + std::to_string(i));
    rank.rank = static_cast<int>(rankId);
    INFER_ASSIGN_OR_RETURN(std::vector<Reader> values, rr.getArray("values"));
    for (const Reader &vr : values) {
      INFER_ASSIGN_OR_RETURN(Value v, readValue(vr));
      rank.values.push_back(std::move(v));
    }
    INFER_ASSIGN_OR_RETURN(std::vector<Reader> steps, rr.getArray("steps"));
    for (const Reader &sr : steps) {
      INFER_ASSIGN_OR_RETURN(Step s, readStep(sr));
      rank.steps.push_back(std::move(s));
    }
    INFER_ASSIGN_OR_RETURN(rank.outputs, rr.getIdList("outputs"));
    if (rr.has("workspace_bytes_per_row")) {
      INFER_ASSIGN_OR_RETURN(rank.workspaceBytesPerRow,
                             rr.getInt("workspace_bytes_per_row"));
    }
    for (const Value &v : rank.values)
      if (v.workspaceOffset >= rank.workspaceBytesPerRow &&
          v.workspaceOffset >= 0)
        return rr.error("values",
                        "place value " + std::to_string(v.id) +
                            " at or past the end of the workspace "
                            "(workspace_bytes_per_row " +
                            std::to_string(rank.workspaceBytesPerRow) + ")");
    plan.ranks.push_back(std::move(rank));
  }
  INFER_RETURN_IF_ERROR(verifyPlan(plan));
  return plan;
}

//===----------------------------------------------------------------------===//
// Files
//===----------------------------------------------------------------------===//

static Status writeText(const std::string &text, const std::string &path) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out)
    return notFound("cannot open '" + path + "' for writing");
  out << text;
  out.close();
  if (!out)
    return dataLoss("failed to write '" + path + "'");
  return Status::ok();
}

static StatusOr<std::string> readText(const std::string &path) {
  return readBoundedFile(path);
}

Status writePlanFile(const Plan &plan, const std::string &path) {
  return writeText(planToJson(plan), path);
}

StatusOr<Plan> readPlanFile(const std::string &path) {
  INFER_ASSIGN_OR_RETURN(std::string text, readText(path));
  StatusOr<Plan> plan = parsePlanJson(text);
  if (!plan.isOk())
    return plan.status().withContext(path);
  return plan;
}

//===----------------------------------------------------------------------===//
// manifest.json
//===----------------------------------------------------------------------===//

static json optionalInt(const std::optional<int64_t> &v) {
  return v ? json(*v) : json(nullptr);
}

std::string manifestToJson(const Manifest &m) {
  const ModelInfo &mi = m.model;
  json model{{"architecture", mi.architecture},
             {"vocab_size", mi.vocabSize},
             {"hidden_size", mi.hiddenSize},
             {"num_layers", mi.numLayers},
             {"num_heads", mi.numHeads},
             {"num_kv_heads", mi.numKVHeads},
             {"head_dim", mi.headDim},
             {"max_position_embeddings", mi.maxPositionEmbeddings},
             {"bos_token_id", optionalInt(mi.bosTokenId)},
             {"eos_token_ids", mi.eosTokenIds},
             {"pad_token_id", optionalInt(mi.padTokenId)}};
  json files = json::array();
  for (const WeightFile &f : m.weightFiles)
    files.push_back(json{{"name", f.name},
                         {"size", f.size},
                         {"header_fingerprint", f.headerFingerprint}});
  json j{{"format_version", m.formatVersion},
         {"infer_version", m.inferVersion},
         {"model", model},
         {"compile_options", m.compileOptions},
         {"targets", m.targets},
         {"kv_cache", kvCacheToJson(m.kvCache)},
         {"weights_dir", m.weightsDir},
         {"weight_files", files},
         {"tokenizer_file", m.tokenizerFile},
         {"tokenizer_config_file", m.tokenizerConfigFile},
         {"program_file", m.programFile},
         {"plan_file", m.planFile},
         {"num_ranks", m.numRanks}};
  if (!m.kernels.empty())
    j["kernels"] = json{{"source", m.kernels.source},
                        {"cubins", m.kernels.cubins},
                        {"ptx", m.kernels.ptx},
                        {"ptx_arch", m.kernels.ptxArch}};
  if (!m.packedWeights.empty()) {
    json packed = json::array();
    for (const PackedWeightFile &f : m.packedWeights)
      packed.push_back(json{{"rank", f.rank},
                            {"file", f.file},
                            {"size", f.size},
                            {"hash", f.hash}});
    j["packed_weights"] = packed;
  }
  if (!m.deployConfig.empty())
    j["deploy_config"] = json::parse(m.deployConfig, nullptr,
                                     /*allow_exceptions=*/false);
  return j.dump(1) + "\n";
}

static StatusOr<std::optional<int64_t>> readOptionalInt(const Reader &r,
                                                        const char *key) {
  if (!r.has(key) || r.raw().at(key).is_null())
    return std::optional<int64_t>();
  INFER_ASSIGN_OR_RETURN(int64_t v, r.getInt(key));
  return std::optional<int64_t>(v);
}

static StatusOr<std::vector<std::string>> readStringList(const Reader &r,
                                                         const char *key) {
  std::vector<std::string> out;
  if (!r.has(key))
    return out;
  INFER_ASSIGN_OR_RETURN(std::vector<Reader> items, r.getArray(key));
  for (const Reader &item : items) {
    if (!item.raw().is_string())
      return item.error("", "must be a string");
    out.push_back(item.raw().get<std::string>());
  }
  return out;
}

static StatusOr<ModelInfo> readModelInfo(const Reader &r) {
  INFER_RETURN_IF_ERROR(r.expectObject());
  ModelInfo mi;
  INFER_ASSIGN_OR_RETURN(mi.architecture, r.getString("architecture"));
  INFER_ASSIGN_OR_RETURN(mi.vocabSize, r.getInt("vocab_size"));
  INFER_ASSIGN_OR_RETURN(mi.hiddenSize, r.getInt("hidden_size"));
  INFER_ASSIGN_OR_RETURN(mi.numLayers, r.getInt("num_layers"));
  INFER_ASSIGN_OR_RETURN(mi.numHeads, r.getInt("num_heads"));
  INFER_ASSIGN_OR_RETURN(mi.numKVHeads, r.getInt("num_kv_heads"));
  INFER_ASSIGN_OR_RETURN(mi.headDim, r.getInt("head_dim"));
  INFER_ASSIGN_OR_RETURN(mi.maxPositionEmbeddings,
                         r.getInt("max_position_embeddings"));
  INFER_ASSIGN_OR_RETURN(mi.bosTokenId, readOptionalInt(r, "bos_token_id"));
  INFER_ASSIGN_OR_RETURN(mi.padTokenId, readOptionalInt(r, "pad_token_id"));
  if (r.has("eos_token_ids")) {
    INFER_ASSIGN_OR_RETURN(std::vector<Reader> ids,
                           r.getArray("eos_token_ids"));
    for (const Reader &id : ids) {
      if (!id.raw().is_number_integer())
        return id.error("", "must be an integer");
      mi.eosTokenIds.push_back(id.raw().get<int64_t>());
    }
  }
  return mi;
}

/// Every file the manifest names lies inside the artifact (or, for weight
/// files, the weights directory): a manifest cannot make the runtime read
/// /etc/hostname or a file next to the model.
static Status checkManifestPaths(const Manifest &m) {
  std::vector<std::pair<std::string, const std::string *>> files = {
      {"plan_file", &m.planFile}, {"program_file", &m.programFile}};
  if (!m.tokenizerFile.empty())
    files.push_back({"tokenizer_file", &m.tokenizerFile});
  if (!m.tokenizerConfigFile.empty())
    files.push_back({"tokenizer_config_file", &m.tokenizerConfigFile});
  if (!m.kernels.source.empty())
    files.push_back({"kernels.source", &m.kernels.source});
  if (!m.kernels.ptx.empty())
    files.push_back({"kernels.ptx", &m.kernels.ptx});
  for (const auto &[arch, cubin] : m.kernels.cubins)
    files.push_back({"kernels.cubins." + arch, &cubin});
  for (const auto &[key, name] : files)
    INFER_RETURN_IF_ERROR(
        checkRelativePath(*name, "the manifest's " + key, "the artifact"));
  for (const WeightFile &f : m.weightFiles)
    INFER_RETURN_IF_ERROR(checkRelativePath(
        f.name, "the manifest's weight file", "the weights directory"));
  for (const PackedWeightFile &f : m.packedWeights)
    INFER_RETURN_IF_ERROR(checkRelativePath(
        f.file, "the manifest's packed weight file", "the artifact"));
  return Status::ok();
}

StatusOr<Manifest> parseManifestJson(std::string_view text) {
  INFER_ASSIGN_OR_RETURN(json j, parseJsonText(text, "manifest"));
  Reader r(j, "");
  Manifest m;
  INFER_ASSIGN_OR_RETURN(int64_t version, r.getInt("format_version"));
  if (version != kManifestFormatVersion)
    return invalidArgument("manifest format_version " +
                           std::to_string(version) +
                           " is not supported (this runtime reads version " +
                           std::to_string(kManifestFormatVersion) + ")");
  m.formatVersion = static_cast<int>(version);
  INFER_ASSIGN_OR_RETURN(m.inferVersion, r.getString("infer_version", ""));
  INFER_ASSIGN_OR_RETURN(Reader model, r.member("model"));
  INFER_ASSIGN_OR_RETURN(m.model, readModelInfo(model));
  if (r.has("compile_options")) {
    Reader opts = r.child("compile_options");
    INFER_RETURN_IF_ERROR(opts.expectObject());
    for (const auto &[key, value] : opts.raw().items()) {
      if (!value.is_string())
        return opts.error(key, "must be a string");
      m.compileOptions[key] = value.get<std::string>();
    }
  }
  INFER_ASSIGN_OR_RETURN(m.targets, readStringList(r, "targets"));
  INFER_ASSIGN_OR_RETURN(Reader kv, r.member("kv_cache"));
  INFER_ASSIGN_OR_RETURN(m.kvCache, readKVCache(kv));
  INFER_ASSIGN_OR_RETURN(m.weightsDir, r.getString("weights_dir", ""));
  if (r.has("weight_files")) {
    INFER_ASSIGN_OR_RETURN(std::vector<Reader> files,
                           r.getArray("weight_files"));
    for (const Reader &f : files) {
      INFER_RETURN_IF_ERROR(f.expectObject());
      WeightFile wf;
      INFER_ASSIGN_OR_RETURN(wf.name, f.getString("name"));
      INFER_ASSIGN_OR_RETURN(int64_t size, f.getInt("size"));
      if (size < 0)
        return f.error("size", "must be >= 0");
      wf.size = static_cast<uint64_t>(size);
      INFER_ASSIGN_OR_RETURN(wf.headerFingerprint,
                             f.getString("header_fingerprint", ""));
      m.weightFiles.push_back(std::move(wf));
    }
  }
  INFER_ASSIGN_OR_RETURN(m.tokenizerFile, r.getString("tokenizer_file", ""));
  INFER_ASSIGN_OR_RETURN(m.tokenizerConfigFile,
                         r.getString("tokenizer_config_file", ""));
  INFER_ASSIGN_OR_RETURN(m.programFile,
                         r.getString("program_file", "program.mlir"));
  INFER_ASSIGN_OR_RETURN(m.planFile, r.getString("plan_file", "plan.json"));
  if (r.has("num_ranks")) {
    INFER_ASSIGN_OR_RETURN(int64_t numRanks, r.getInt("num_ranks"));
    if (numRanks < 1)
      return r.error("num_ranks", "must be >= 1");
    m.numRanks = static_cast<int>(numRanks);
  }
  if (r.has("kernels")) {
    Reader k = r.child("kernels");
    INFER_RETURN_IF_ERROR(k.expectObject());
    INFER_ASSIGN_OR_RETURN(m.kernels.source, k.getString("source", ""));
    INFER_ASSIGN_OR_RETURN(m.kernels.ptx, k.getString("ptx", ""));
    INFER_ASSIGN_OR_RETURN(m.kernels.ptxArch, k.getString("ptx_arch", ""));
    if (k.has("cubins")) {
      Reader cubins = k.child("cubins");
      INFER_RETURN_IF_ERROR(cubins.expectObject());
      for (const auto &[arch, file] : cubins.raw().items()) {
        if (!file.is_string())
          return cubins.error(arch, "must be a string");
        m.kernels.cubins[arch] = file.get<std::string>();
      }
    }
    if (!m.kernels.ptx.empty() && m.kernels.ptxArch.empty())
      return k.error("ptx_arch", "is missing");
  }
  if (r.has("packed_weights")) {
    INFER_ASSIGN_OR_RETURN(std::vector<Reader> files,
                           r.getArray("packed_weights"));
    for (const Reader &f : files) {
      INFER_RETURN_IF_ERROR(f.expectObject());
      PackedWeightFile pf;
      INFER_ASSIGN_OR_RETURN(int64_t rank, f.getInt("rank"));
      if (rank < 0 || rank >= m.numRanks)
        return f.error("rank", "is not a rank of the plan");
      pf.rank = static_cast<int>(rank);
      INFER_ASSIGN_OR_RETURN(pf.file, f.getString("file"));
      INFER_ASSIGN_OR_RETURN(int64_t size, f.getInt("size"));
      if (size < 0)
        return f.error("size", "must be >= 0");
      pf.size = static_cast<uint64_t>(size);
      INFER_ASSIGN_OR_RETURN(pf.hash, f.getString("hash"));
      m.packedWeights.push_back(std::move(pf));
    }
  }
  if (r.has("deploy_config")) {
    Reader config = r.child("deploy_config");
    INFER_RETURN_IF_ERROR(config.expectObject());
    m.deployConfig = config.raw().dump();
  }
  INFER_RETURN_IF_ERROR(checkManifestPaths(m));
  return m;
}

Status writeManifestFile(const Manifest &manifest, const std::string &path) {
  return writeText(manifestToJson(manifest), path);
}

StatusOr<Manifest> readManifestFile(const std::string &path) {
  INFER_ASSIGN_OR_RETURN(std::string text, readText(path));
  StatusOr<Manifest> m = parseManifestJson(text);
  if (!m.isOk())
    return m.status().withContext(path);
  return m;
}

} // namespace infer::plan
