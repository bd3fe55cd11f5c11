//===- Plan.h - The kernel plan, between compiler and runtime ---*- C++ -*-===//
//
// codegen/ lowers the final `infer` IR to a Plan and writes it as plan.json in
// the artifact; the runtime reads it back and executes it. Nothing here needs
// MLIR: the runtime is built and deployed without LLVM.
//
// A plan has, per rank, a table of values and an ordered list of steps:
//
//   values:  id  kind        dtype  shape       what
//            0   input       i32    [T]         token_ids (batch contract)
//            ...
//            7   kv_cache    f32    -           the rank's KV pool (in place)
//            8   param       bf16   [4096,384]  model.embed_tokens.weight
//            9   activation  f32    [T,384]     %h0
//   steps:   embedding(8, 0) -> 9 ; rms_norm(9, 10) -> 11 ; ...
//
// Shapes are fixed sizes or symbols bound per forward call: T (tokens in the
// flat batch), B (sequences), S (rows that produce logits), M (max blocks per
// sequence). Activations are dense row-major.
//
// Step ops (operands -> results; attributes), declared once in StepOps.def
// (operand roles, result counts, attribute names and types):
//   embedding        (table[V,H], ids[T]) -> [T,H]; vocab_offset, vocab_size
//                    (optional, vocabulary-parallel: the table holds rows
//                    vocab_offset .. vocab_offset+V of a vocabulary of
//                    vocab_size; other ids in range give zero rows)
//   rms_norm         (x[T,H], w[H]) -> [T,H]; epsilon (double)
//   linear           (x[T,K], w[N,K], bias[N]?) -> [T,N]      x * w^T (+ bias)
//   rope             (x[T,heads*head_dim], positions[T], query_start_loc?)
//                    -> same shape; head_dim, rotary_dim, theta, scaling
//                    ("default" | "linear" | "llama3" | "yarn" | "longrope" |
//                    "dynamic"), factor, low_freq_factor, high_freq_factor,
//                    original_max_position_embeddings, ... HF rotate_half
//                    style. query_start_loc exactly with "dynamic": a
//                    sequence's frequencies follow its length after the
//                    step (its last position in the batch + 1).
//   kv_cache_write   (cache, k[T,kvh*d], v[T,kvh*d], slot_mapping[T]) -> ();
//                    layer. Writes in place into the cache value.
//   paged_attention  (q[T,h*d], cache, block_tables[B,M], context_lens[B],
//                    query_start_loc[B+1]) -> [T,h*d]; layer, num_heads,
//                    num_kv_heads, head_dim, scale (double), sliding_window
//                    (0: none). Causal: query i of a sequence sits at position
//                    context_len - num_new_tokens + i. With key_rotary_dim
//                    (> 0) and the rope attributes (theta, scaling, ...) the
//                    cache holds unrotated keys and key j of a sequence is
//                    rotated at position j, its index in the sequence's
//                    cache (StreamingLLM, see "Streaming" below).
//   silu, gelu_tanh  (x) -> same shape
//   gelu             (x) -> same shape: exact gelu, x * (1 + erf(x / sqrt 2)) /
//   2 add, mul         (a, b) -> same shape cast             (x) -> same shape
//   in the result value's dtype (round
//                    to nearest even)
//   gather_rows      (x[T,H], indices[S]) -> [S,H]
//   logits           (x[S,H], w[V,H]) -> [S,V] f32
//   all_reduce       (x) -> same shape: the elementwise sum over all ranks
//   bias_add         (x[T,N], bias[N]) -> [T,N]: x[t, :] + bias, the bias
//                    of a row-parallel linear added once after all_reduce
//   all_gather       (x) -> x with dimension dim times num_ranks; dim. The
//                    ranks' tensors concatenated along dim in rank order.
// and the fused ops `infer-fuse` produces:
//   linear_residual  (x[T,K], w[N,K], r[T,N], bias[N]?) -> [T,N]: x * w^T
//                    (+ bias) + r in fp32, rounded once to the result's
//                    dtype (r has it); infer.linear with a residual
//   split            (x[T,N0+N1+...]) -> [T,N0], [T,N1], ...; sizes (ints):
//                    consecutive column blocks (the parts of a merged GEMM)
//   add_rms_norm     (a[T,H], b[T,H], w[H]) -> sum[T,H], y[T,H]; epsilon:
//                    sum = a + b, y = rms_norm(sum, w)
//   silu_mul         (gate, up) -> same shape: silu(gate) * up
//   linear_swiglu    (x[T,K], w[2I,K]) -> [T,I]: silu(x * w_gate^T) *
//                    (x * w_up^T) in fp32, rounded once, where w_gate is
//                    w's first I rows and w_up the rest (a gate/up
//                    concat_weights); linear, split and silu_mul in one
//   rope_kv_cache_write (cache, k, v, slot_mapping[T], positions[T],
//                    query_start_loc?) -> ();
//                    the attributes of rope and kv_cache_write: writes
//                    rope(k) and v into the cache
//   rope_qkv_cache_write (cache, q, k, v, slot_mapping[T], positions[T],
//                    query_start_loc?) -> q'[T, h*d]; the attributes of
//                    rope_kv_cache_write: q' = rope(q) and the cache write
//                    of rope_kv_cache_write(cache, k, v, ...), one rope for
//                    both (q, k and q' of one dtype)
//   fused            (x0, x1, ...) -> y0, ...; body (string), yields (ints):
//                    an elementwise register program over same-shaped
//                    operands and results (runtime/plan/FusedBody.h);
//                    kernel (string, optional): the extern "C" kernel of
//                    the artifact's generated code (Manifest::kernels)
//                    that computes it, with parameters (const float *x0,
//                    ..., float *y0, ..., long long n), launched with 256
//                    threads per block and any grid (grid-stride loop)
//
// Precision (format version 2): each value's dtype is what the backends
// store, and every backend executes it as written. A step reads its float
// operands (f32, f16, bf16), computes in fp32 (accumulation, norm
// statistics, softmax, rotations) and rounds each result once to its
// value's dtype; `logits` rounds to f32. A param is loaded as its dtype (the
// checkpoint tensor converted, round to nearest even) or as fp8 codes. The
// KV cache stores the layout's dtype. Version 1 plans are version 2 plans
// whose activations are all f32.
//
// Workspace (infer-plan-memory): an activation with a workspace_offset lives
// in the rank's one workspace of workspace_bytes_per_row * T bytes for a
// batch of T tokens, at byte workspace_offset * T; its rows (at most T) take
// bytes_per_element * columns each. Offsets are planned per token row so
// that one plan serves every T; activations alive at the same step never
// overlap. Activations without an offset (the outputs) own their memory.
//
//   workspace, T = 4:  [ %1: 4 rows @ 0 | %3: 4 rows @ 512*4 | ... ]
//
// Param transforms, applied in order to the source tensor at load:
//   concat           axis (0), source_file, source_tensor: appends that
//                    tensor along `axis` (merged q/k/v or gate/up weights);
//                    slice_dim, slice_begin, slice_size (optional, all or
//                    none): slices the appended tensor first, like `slice`
//                    (a tensor-parallel merged projection: each part sliced
//                    for the rank; a `slice` before the first `concat`
//                    slices the source tensor):
//                      rank 1:  q: slice {0, 64, 64}, concat k {slice 0, 16,
//                               16}, concat v {slice 0, 16, 16}
//   slice            dim, begin, size: indices begin .. begin+size of
//                    dimension dim of the source tensor (a tensor-parallel
//                    shard; each rank's plan has its own begin).
//   quantize_fp8_e4m3 granularity ("per-tensor" | "per-channel"), parts
//                    (ints, optional): rounds the (sliced, concatenated)
//                    tensor to FP8 E4M3 codes with scale amax / 448 per row
//                    of dim 0 ("per-channel") or per tensor, computed at load
//                    (runtime/support/Fp8.h: CUDA's saturating conversion).
//                    `parts` (per-tensor only) gives the rows of each
//                    concatenated tensor, each with its own scale, so that
//                    merging q/k/v after quantizing them changes nothing.
//                    Always the last transform, and only of a param of dtype
//                    f8e4m3 (which needs it). The loaded param is 1-byte
//                    codes and one fp32 scale per row (a per-tensor scale
//                    repeated): element (i, j) = decode(code[i][j]) *
//                    scale[i]. Only linear and logits weights may be fp8.
//
// Tensor parallelism (num_ranks > 1) arrived within format version 1: the
// rank plans are the same program (SPMD) and differ only in their params'
// slice transforms (and concat slice_* attributes) and their embeddings'
// vocab_offset. A reader that predates it rejects such a plan with "unknown
// op 'all_reduce'" or "unknown weight transform 'slice'" rather than
// misreading it; one that predates concat's slice_* appends whole parts and
// rejects the param's shape.
//
// KV cache layout "block_layer_kv_slot_head_dim": one pool per rank,
//   [num_blocks][num_layers][2 (k, v)][block_size][num_kv_heads][head_dim]
// so a block holds every layer's keys and values of block_size tokens, and
// slot s lives in block s / block_size at offset s % block_size. Its dtype is
// the element's: f32 (4 bytes), bf16 or f16 (2 bytes: the value rounded to
// nearest even), or 1-byte FP8 codes (infer-quantize-fp8):
//   f8e5m2  E5M2 codes, no scale: value = decode(code);
//   f8e4m3  E4M3 codes, plus one fp32 scale per head vector in a second
//           array of the same layout without head_dim,
//             scales [num_blocks][num_layers][2][block_size][num_kv_heads],
//           value = decode(code) * scale. The cache write computes each
//           scale as amax / 448 over the head's head_dim keys (or values)
//           of the token, and 0 (codes 0) for an all-zero head.
//
// Streaming (StreamingLLM attention sinks, `infer-streaming-kv`): a layout
// with window > 0 (kv_cache "sink_tokens", "window"; absent: 0, off) keeps,
// per sequence, its first ceil(sink_tokens / block_size) blocks and at least
// its `window` most recent tokens; the runtime evicts the whole blocks
// between before each step. Positions, context_lens and slot_mapping are
// then indices in the sequence's cache (its block table without the evicted
// blocks), not in the sequence:
//
//   block_size 4, sink_tokens 2, window 8, 16 tokens computed, 1 new:
//   tokens   [t0..t3 | t4..t7 | t8..t11 | t12..t15 | t16 new]
//   table    [  b3   | evicted | b5     |   b1     |  b6 ]  -> [b3, b5, b1, b6]
//   positions [12], context_lens [13], slot_mapping [b6 * 4 + 0]
//
//===----------------------------------------------------------------------===//

#ifndef INFER_RUNTIME_PLAN_PLAN_H
#define INFER_RUNTIME_PLAN_PLAN_H

#include "runtime/plan/StepOps.h"
#include "runtime/support/Status.h"

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace infer::plan {

/// The version this runtime writes; it reads kOldestPlanFormatVersion and up.
inline constexpr int kPlanFormatVersion = 2;
inline constexpr int kOldestPlanFormatVersion = 1;

enum class DType { kF32, kF16, kBF16, kI32, kI64, kF8E4M3, kF8E5M2 };

/// "f32", "f16", "bf16", "i32", "i64", "f8e4m3", "f8e5m2".
std::string_view dtypeName(DType dtype);
std::optional<DType> parseDType(std::string_view name);
/// Bytes per element.
int64_t dtypeSize(DType dtype);

/// A fixed size, or a symbol ("T", "B", "S", "M") bound per forward call.
struct Dim {
  int64_t size = 0;
  std::string symbol;

  bool isDynamic() const { return !symbol.empty(); }
  static Dim fixed(int64_t size) { return Dim{size, ""}; }
  static Dim dynamic(std::string symbol) { return Dim{0, std::move(symbol)}; }
  bool operator==(const Dim &o) const {
    return size == o.size && symbol == o.symbol;
  }
};

using AttrValue = std::variant<int64_t, double, std::string,
                               std::vector<int64_t>, std::vector<double>>;
using AttrMap = std::map<std::string, AttrValue>;

enum class ValueKind { kInput, kParam, kActivation, kKVCache };
std::string_view valueKindName(ValueKind kind);

/// A load-time transform applied to a parameter's source tensor, in order
/// (slice for a tensor-parallel shard, concat for merged projections, ...).
struct WeightTransform {
  std::string kind;
  AttrMap attrs;
  bool operator==(const WeightTransform &o) const {
    return kind == o.kind && attrs == o.attrs;
  }
};

struct Value {
  int id = 0;
  ValueKind kind = ValueKind::kActivation;
  /// Input: the batch-contract name ("token_ids", ...). Param: the tensor's
  /// name in the checkpoint. Activation: the IR value's name, for people.
  std::string name;
  DType dtype = DType::kF32;
  std::vector<Dim> shape;
  /// Params only: safetensors file (relative to the weights directory) and
  /// tensor name inside it, and the transforms applied at load.
  std::string sourceFile;
  std::string sourceTensor;
  std::vector<WeightTransform> transforms;
  /// Activations only: byte offset per token row in the workspace, or -1.
  int64_t workspaceOffset = -1;

  bool operator==(const Value &o) const;
};

struct Step {
  std::string op;
  std::vector<int> operands;
  std::vector<int> results;
  AttrMap attrs;

  bool operator==(const Step &o) const {
    return op == o.op && operands == o.operands && results == o.results &&
           attrs == o.attrs;
  }

  /// Typed attribute access; an error names the step and attribute.
  StatusOr<int64_t> getInt(const std::string &name) const;
  StatusOr<double> getFloat(const std::string &name) const;
  StatusOr<std::string> getString(const std::string &name) const;
  int64_t getInt(const std::string &name, int64_t defaultValue) const;
  double getFloat(const std::string &name, double defaultValue) const;
  std::string getString(const std::string &name,
                        const std::string &defaultValue) const;
  /// A `split` step's "sizes": one positive width per result.
  StatusOr<std::vector<int64_t>> getSplitSizes() const;
  /// An `all_gather` step's "dim": 0 (rows) or 1 (columns).
  StatusOr<int64_t> getGatherDim() const;
};

struct KVCacheLayout {
  std::string layout = "block_layer_kv_slot_head_dim";
  int64_t numLayers = 0;
  int64_t numKVHeads = 0;
  int64_t headDim = 0;
  int64_t blockSize = 16;
  DType dtype = DType::kF32;
  /// StreamingLLM: attention-sink tokens and the rolling window of recent
  /// tokens each sequence keeps (window 0: the whole context is cached).
  int64_t sinkTokens = 0;
  int64_t window = 0;

  bool isStreaming() const { return window > 0; }

  /// Elements of one block (all layers, keys and values).
  int64_t blockElements() const {
    return numLayers * 2 * blockSize * numKVHeads * headDim;
  }
  /// fp32 scales of one block: one per head vector for f8e4m3, else none.
  int64_t blockScales() const {
    return dtype == DType::kF8E4M3 ? numLayers * 2 * blockSize * numKVHeads : 0;
  }
  bool operator==(const KVCacheLayout &o) const {
    return layout == o.layout && numLayers == o.numLayers &&
           numKVHeads == o.numKVHeads && headDim == o.headDim &&
           blockSize == o.blockSize && dtype == o.dtype &&
           sinkTokens == o.sinkTokens && window == o.window;
  }
};

struct RankPlan {
  int rank = 0;
  std::vector<Value> values;
  std::vector<Step> steps;
  /// Value ids of the function results (the logits).
  std::vector<int> outputs;
  /// Workspace bytes per token row; 0 when no activation is placed in it.
  int64_t workspaceBytesPerRow = 0;

  bool operator==(const RankPlan &o) const {
    return rank == o.rank && values == o.values && steps == o.steps &&
           outputs == o.outputs &&
           workspaceBytesPerRow == o.workspaceBytesPerRow;
  }
};

struct Plan {
  int formatVersion = kPlanFormatVersion;
  int numRanks = 1;
  KVCacheLayout kvCache;
  std::vector<RankPlan> ranks;

  bool operator==(const Plan &o) const {
    return formatVersion == o.formatVersion && numRanks == o.numRanks &&
           kvCache == o.kvCache && ranks == o.ranks;
  }
};

/// Checks a plan against the format: the version; the KV-cache layout
/// (positive sizes, a float dtype); per rank, SSA structure (ids 0..n-1,
/// every operand defined before use, results defined once), each value's
/// kind, dtype and shape (batch inputs by name, params and activations of
/// float dtypes, fp8 only where a step may read it), and each step against
/// the registry and decodeStep (operand roles, result counts, attributes)
/// and against the values it reads (static widths of norms, splits, biases
/// and GEMMs, the KV layout's layers, heads and head size). Backends and
/// tests call it on in-memory plans; parsePlanJson calls it on every plan it
/// reads. A plan it accepts cannot make a backend index out of the shapes
/// it declares; what depends on a batch (T, token ids, indices) the
/// backends check per forward call.
Status verifyPlan(const Plan &plan);

std::string planToJson(const Plan &plan);
/// Parses and verifies (verifyPlan).
StatusOr<Plan> parsePlanJson(std::string_view text);
Status writePlanFile(const Plan &plan, const std::string &path);
StatusOr<Plan> readPlanFile(const std::string &path);

//===----------------------------------------------------------------------===//
// manifest.json
//===----------------------------------------------------------------------===//

inline constexpr int kManifestFormatVersion = 1;

struct ModelInfo {
  std::string architecture;
  int64_t vocabSize = 0;
  int64_t hiddenSize = 0;
  int64_t numLayers = 0;
  int64_t numHeads = 0;
  int64_t numKVHeads = 0;
  int64_t headDim = 0;
  int64_t maxPositionEmbeddings = 0;
  std::optional<int64_t> bosTokenId;
  std::vector<int64_t> eosTokenIds;
  std::optional<int64_t> padTokenId;
  bool operator==(const ModelInfo &o) const;
};

/// A source safetensors file the parameters reference, with a fingerprint of
/// its header so a mismatched weights directory is caught at load.
struct WeightFile {
  std::string name;
  uint64_t size = 0;
  std::string headerFingerprint;
  bool operator==(const WeightFile &o) const {
    return name == o.name && size == o.size &&
           headerFingerprint == o.headerFingerprint;
  }
};

/// The generated CUDA kernels of the `fused` steps (`infer compile --target
/// cuda`), paths relative to the artifact; empty for other targets:
///
///   "kernels": {"source": "kernels/fused.cu",
///               "cubins": {"sm_90a": "kernels/fused.sm_90a.cubin"},
///               "ptx": "kernels/fused.ptx", "ptx_arch": "compute_90"}
struct KernelFiles {
  std::string source; ///< the CUDA C++ translation unit, for people
  /// Real GPU architecture -> cubin compiled for it.
  std::map<std::string, std::string> cubins;
  std::string ptx;     ///< the same unit as PTX, JIT-compiled at load
  std::string ptxArch; ///< the PTX's virtual architecture

  bool empty() const { return cubins.empty() && ptx.empty(); }
  bool operator==(const KernelFiles &o) const {
    return source == o.source && cubins == o.cubins && ptx == o.ptx &&
           ptxArch == o.ptxArch;
  }
};

/// One rank's params after their transforms, written by `infer compile
/// --pack-weights` or `infer pack` (runtime/engine/PackedWeights.h): a
/// safetensors file in the artifact holding each param as the backends take
/// it (f32, bf16 or f16 elements; fp8 codes and their fp32 row scales), so
/// the artifact runs without its source checkpoint.
///
///   "packed_weights": [{"rank": 0, "file": "weights/rank0.safetensors",
///                       "size": 31457280,
///                       "hash": "xxh3-64/64MiB:89ab...ef"}]
///
/// `hash` is XXH3-64 (xxHash) of each 64 MiB block of the file, then of
/// those hashes (little-endian u64s in order): blocks hash in parallel.
struct PackedWeightFile {
  int rank = 0;
  std::string file;
  uint64_t size = 0;
  std::string hash;
  bool operator==(const PackedWeightFile &o) const {
    return rank == o.rank && file == o.file && size == o.size && hash == o.hash;
  }
};

struct Manifest {
  int formatVersion = kManifestFormatVersion;
  std::string inferVersion;
  ModelInfo model;
  /// Options as given to `infer compile` ("target", "block_size", ...).
  std::map<std::string, std::string> compileOptions;
  std::vector<std::string> targets;
  KVCacheLayout kvCache;
  /// Directory the parameters are read from unless overridden at load.
  std::string weightsDir;
  std::vector<WeightFile> weightFiles;
  std::string tokenizerFile;       ///< "tokenizer.json", or empty
  std::string tokenizerConfigFile; ///< "tokenizer_config.json", or empty
  std::string programFile = "program.mlir";
  std::string planFile = "plan.json";
  /// Tensor-parallel ranks the plan runs on ("num_ranks"; absent reads 1).
  int numRanks = 1;
  /// "kernels"; absent reads empty.
  KernelFiles kernels;
  /// "packed_weights", one per rank, or none: the params are read from the
  /// source files (weightsDir) and transformed at load.
  std::vector<PackedWeightFile> packedWeights;
  /// "deploy_config": every option `infer compile` ran with (its --config
  /// file with the flags applied), a JSON object as text; empty when absent.
  std::string deployConfig;

  bool operator==(const Manifest &o) const;
};

std::string manifestToJson(const Manifest &manifest);
StatusOr<Manifest> parseManifestJson(std::string_view text);
Status writeManifestFile(const Manifest &manifest, const std::string &path);
StatusOr<Manifest> readManifestFile(const std::string &path);

/// 64-bit FNV-1a of bytes, as 16 hex digits (weight file fingerprints).
std::string fingerprint(std::string_view bytes);

} // namespace infer::plan

#endif // INFER_RUNTIME_PLAN_PLAN_H
