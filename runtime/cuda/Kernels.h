//===- Kernels.h - Launchers of the CUDA kernels ----------------*- C++ -*-===//
//
// Host functions that launch the kernels of kernels/*.cu on a stream and
// return the launch's cudaError_t (wrap them in INFER_CUDA_RETURN_IF_ERROR).
// Activations are dense row-major fp32, bf16 or f16 (ElementType); matrices
// read by GEMMs are bf16 or fp8, the KV pool bf16 or fp8 (KVCachePool),
// arithmetic fp32. Each kernel computes the function of the CPU backend's
// kernel of the same name (runtime/cpu/Kernels.h).
//
//===----------------------------------------------------------------------===//

#ifndef INFER_RUNTIME_CUDA_KERNELS_H
#define INFER_RUNTIME_CUDA_KERNELS_H

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>

namespace infer::cuda {

/// Sizes of the paged pool (plan::KVCacheLayout):
///
///   pool = [num_blocks][num_layers][2 (k, v)][block_size][kv_heads][head_dim]
struct CacheDims {
  int numLayers = 0;
  int numKVHeads = 0;
  int headDim = 0;
  int blockSize = 0;
};

/// The element type of the pool (plan::KVCacheLayout dtype).
enum class KVCacheDtype : int8_t { kBf16, kF8E5M2, kF8E4M3 };

inline int kvCacheElementBytes(KVCacheDtype dtype) {
  return dtype == KVCacheDtype::kBf16 ? 2 : 1;
}

/// The storage of the pool laid out as CacheDims says: bf16 values, or one
/// fp8 code per element with, for E4M3, one fp32 scale per head vector:
///
///   data   [num_blocks][num_layers][2][block_size][kv_heads][head_dim]
///   scales [num_blocks][num_layers][2][block_size][kv_heads]   (E4M3)
///
/// so the scale of the head vector at element offset o is scales[o / d].
/// The codes and scales are the CPU backend's (cpu::KVPool::storeHead):
/// E5M2 codes of the values, E4M3 codes of value / scale with scale =
/// amax / 448 of the head vector (0 and all-zero codes for a zero vector),
/// both rounded to nearest even with saturation (runtime/support/Fp8.h).
struct KVCachePool {
  void *data = nullptr;
  float *scales = nullptr;
  KVCacheDtype dtype = KVCacheDtype::kBf16;

  KVCachePool() = default;
  /// A bf16 pool: the kernels take a bf16 pointer where they take a pool.
  KVCachePool(__nv_bfloat16 *values) : data(values) {}
  KVCachePool(uint8_t *codes, float *scales, KVCacheDtype dtype)
      : data(codes), scales(scales), dtype(dtype) {}
};

struct AttentionDims {
  int layer = 0;
  int numHeads = 0;
  int numKVHeads = 0;
  int headDim = 0;
  float scale = 1.0f;
  /// 0: none; else a query at position p sees keys in (p - window, p].
  int slidingWindow = 0;
  /// 0: none; else each scaled score s becomes logitSoftcap *
  /// tanh(s / logitSoftcap) before the softmax (Gemma 2's
  /// attn_logit_softcapping, as HF's eager attention applies it).
  float logitSoftcap = 0.0f;
  /// > 0: the cache holds unrotated keys, and key j of a sequence is
  /// rotated at position j, its index in the sequence's cache
  /// (StreamingLLM's position shift), as launchRope rotates with these
  /// keyRotaryDim / 2 inverse frequencies (on the device).
  int keyRotaryDim = 0;
  const float *keyRopeInvFreq = nullptr;
};

/// Whether `attention` has no key rope (keyRotaryDim 0) or one the attention
/// kernels take: an even keyRotaryDim <= headDim and its inverse frequencies.
inline bool validKeyRope(const AttentionDims &attention) {
  return attention.keyRotaryDim == 0 ||
         (attention.keyRotaryDim > 0 && attention.keyRotaryDim % 2 == 0 &&
          attention.keyRotaryDim <= attention.headDim &&
          attention.keyRopeInvFreq);
}

/// Whether `attention` has no logit soft-cap (logitSoftcap 0) or a finite
/// positive one.
inline bool validSoftcap(const AttentionDims &attention) {
  return attention.logitSoftcap == 0.0f ||
         (attention.logitSoftcap > 0.0f &&
          std::isfinite(attention.logitSoftcap));
}

/// Whether the split-KV decode and tensor-core prefill kernels take the
/// score options of `attention`: a valid key rope or soft-cap, not both (the
/// fp32 kernel takes every combination; no supported family streams with a
/// soft-cap).
inline bool specializedScoreOptions(const AttentionDims &attention) {
  return validKeyRope(attention) && validSoftcap(attention) &&
         !(attention.keyRotaryDim > 0 && attention.logitSoftcap > 0.0f);
}

/// Largest head_dim the attention kernel supports.
inline constexpr int kMaxHeadDim = 256;

//===----------------------------------------------------------------------===//
// Activation kernels
//===----------------------------------------------------------------------===//
//
// Templates on T, the element type of the activations they read and write:
// float, __nv_bfloat16 or __half (instantiated in kernels/*.cu). P, the type
// of a norm weight or a bias, is T or float. Each kernel loads its operands
// as fp32, computes in fp32 what the CPU kernel of the same name computes on
// those values, and rounds each element it stores once to nearest even
// (fp32: no rounding). Outputs may not overlap inputs unless a launcher
// says so; pointers are any alignment (16-byte aligned rows take vector
// loads).

/// The element types of activations (plan::DType f32, bf16, f16).
enum class ElementType : int8_t { kF32, kBf16, kF16 };

/// T, in a parameter from which T is not deduced (a null bias binds to
/// `const NonDeduced<T> *`; T comes from the output).
template <typename T> struct TypeIdentity { using type = T; };
template <typename T> using NonDeduced = typename TypeIdentity<T>::type;

/// y[t, :] = table[ids[t] - vocabOffset, :], or zeros where that row is
/// outside the table's `rows` (another rank's vocabulary slice); ids are
/// checked against the full vocabulary by the caller.
/// With `scale` (Gemma) every row is multiplied by scale rounded to T.
template <typename T>
cudaError_t launchEmbedding(const __nv_bfloat16 *table, int64_t rows,
                            int64_t hidden, int64_t vocabOffset,
                            const int32_t *ids, int64_t t, T *y,
                            cudaStream_t stream, float scale = 1.0f);
/// y[i] = cap * tanh(y[i] / cap), in place (Gemma 2's final logit
/// soft-capping); cap > 0.
cudaError_t launchSoftcap(float *y, int64_t n, float cap, cudaStream_t stream);
/// y = x / sqrt(mean(x^2) + eps) * w, per row of h: the mean of squares
/// summed in fp32, y = (weightOffset + w) * (x * inv) rounded once (the
/// offset added in fp32: Gemma's 1 + w).
template <typename T, typename P>
cudaError_t launchRmsNorm(const T *x, const P *w, T *y, int64_t rows, int64_t h,
                          float epsilon, cudaStream_t stream,
                          float weightOffset = 0.0f);
template <typename T>
cudaError_t launchSilu(const T *x, T *y, int64_t n, cudaStream_t stream);
template <typename T>
cudaError_t launchGeluTanh(const T *x, T *y, int64_t n, cudaStream_t stream);
/// Exact GELU (HF "gelu"): 0.5 x (1 + erf(x / sqrt 2)) in fp32.
template <typename T>
cudaError_t launchGelu(const T *x, T *y, int64_t n, cudaStream_t stream);
template <typename T>
cudaError_t launchAdd(const T *a, const T *b, T *y, int64_t n,
                      cudaStream_t stream);
template <typename T>
cudaError_t launchMul(const T *a, const T *b, T *y, int64_t n,
                      cudaStream_t stream);
/// y[i, :] = x[indices[i], :]; indices are checked by the caller.
template <typename T>
cudaError_t launchGatherRows(const T *x, int64_t cols, const int32_t *indices,
                             int64_t count, T *y, cudaStream_t stream);
/// cast: y[i] = x[i] rounded to nearest even (exact where To holds every
/// From value); From and To are two different activation types.
template <typename From, typename To>
cudaError_t launchCast(const From *x, To *y, int64_t n, cudaStream_t stream);
/// The GEMM operand of an fp32 activation.
inline cudaError_t launchToBf16(const float *x, __nv_bfloat16 *y, int64_t n,
                                cudaStream_t stream) {
  return launchCast(x, y, n, stream);
}
/// bias_add: y[r, :] = x[r, :] + bias[:] for x [rows, cols]; y may be x.
template <typename T, typename P>
cudaError_t launchBiasAdd(const T *x, const P *bias, T *y, int64_t rows,
                          int64_t cols, cudaStream_t stream);
/// y[r, :] += bias[:].
template <typename T, typename P>
cudaError_t launchAddBias(T *y, const P *bias, int64_t rows, int64_t cols,
                          cudaStream_t stream) {
  return launchBiasAdd(y, bias, y, rows, cols, stream);
}

/// split: y[r, :] = x[r, column .. column + width) of x[rows, cols].
template <typename T>
cudaError_t launchSplitColumns(const T *x, int64_t rows, int64_t cols,
                               int64_t column, int64_t width, T *y,
                               cudaStream_t stream);
/// add_rms_norm: sum = a + b, y = rmsNorm(a + b, w), one block per row; the
/// norm reads the fp32 sums (not `sum` rounded to T), so y is rounded once.
/// `sum` may not be `a` or `b` (cudaErrorInvalidValue); `y` may.
template <typename T, typename P>
cudaError_t launchAddRmsNorm(const T *a, const T *b, const P *w, T *sum, T *y,
                             int64_t rows, int64_t h, float epsilon,
                             cudaStream_t stream, float weightOffset = 0.0f);
/// silu_mul: y[rows, cols] = silu(gate) * up, where row r of gate starts
/// at gate + r * gateLd and of up at up + r * upLd (a split's column views
/// of gate_up, CudaBackend; cols for contiguous operands).
template <typename T>
cudaError_t launchSiluMul(const T *gate, int64_t gateLd, const T *up,
                          int64_t upLd, T *y, int64_t rows, int64_t cols,
                          cudaStream_t stream);

/// launchSiluMul of fp32 gate and up rows into bf16 y: linear_swiglu's GEMM
/// and silu_mul path, which keeps the products in fp32 as the SwiGLU
/// epilogue does (one rounding, whichever path a batch takes).
cudaError_t launchSiluMulF32(const float *gate, int64_t gateLd, const float *up,
                             int64_t upLd, __nv_bfloat16 *y, int64_t rows,
                             int64_t cols, cudaStream_t stream);

/// The ops of a `fused` step's register program (plan::ElementwiseOp).
enum class FusedOp : int8_t { kAdd, kMul, kSilu, kGeluTanh, kSiluMul, kGelu };

inline constexpr int kMaxFusedInputs = 8;
inline constexpr int kMaxFusedInstructions = 32;
inline constexpr int kMaxFusedOutputs = 4;

/// A `fused` step's body (runtime/plan/FusedBody.h) and its tensors, passed
/// by value as the kernel's parameter: registers 0 .. numInputs-1 are the
/// inputs, instruction i defines register numInputs + i, output r stores
/// register yields[r]. Every tensor has the same n elements; each has its
/// own element type (fp32 unless set), registers are fp32.
struct FusedProgram {
  int numInputs = 0;
  int numInstructions = 0;
  int numOutputs = 0;
  FusedOp op[kMaxFusedInstructions] = {};
  int8_t arg0[kMaxFusedInstructions] = {};
  int8_t arg1[kMaxFusedInstructions] = {};
  int8_t yields[kMaxFusedOutputs] = {};
  const void *inputs[kMaxFusedInputs] = {};
  void *outputs[kMaxFusedOutputs] = {};
  ElementType inputTypes[kMaxFusedInputs] = {};
  ElementType outputTypes[kMaxFusedOutputs] = {};
};

/// fused: one generic kernel that interprets the register program for each
/// element (one thread per element, registers in thread-local memory).
/// Each op computes in fp32 what its standalone kernel computes; only the
/// outputs are rounded (once each). Artifacts compiled with --target cuda
/// carry one generated kernel per body instead (GeneratedKernels.h); this
/// runs the fused steps of the others.
cudaError_t launchFused(const FusedProgram &program, int64_t n,
                        cudaStream_t stream);

/// A dynamic NTK rope (plan::RopeConfig scaling "dynamic"): the inverse
/// frequencies of a token are those of its sequence's length after the
/// step (the sequence's last position in the batch + 1), computed on the
/// device as plan::dynamicRopeInverseFrequencies computes them. A null
/// queryStartLoc ([numSeqs + 1] on the device) means no dynamic rope.
struct DynamicRope {
  const int32_t *queryStartLoc = nullptr;
  int64_t numSeqs = 0;
  float theta = 0.0f;
  float factor = 1.0f;
  int originalMaxPositionEmbeddings = 0;
};

/// HF rotate_half rotary embedding of x[t, heads*headDim] into y
/// (contiguous), with the rotaryDim/2 inverse frequencies on the device.
/// Row r of x starts at x + r * xLd (0: heads * headDim, contiguous).
/// longFrom > 0 (longrope): invFreq holds two tables and tokens at
/// positions >= longFrom use the second (plan::RopeConfig::longFrom).
/// With a dynamic rope, invFreq is not read.
template <typename T>
cudaError_t launchRope(const T *x, T *y, int64_t t, int64_t heads, int headDim,
                       int rotaryDim, const int32_t *positions,
                       const float *invFreq, cudaStream_t stream,
                       int64_t xLd = 0, int longFrom = 0,
                       DynamicRope dynamic = {});

/// Room for the partial results of split-KV decode attention (normalized
/// output, max and sum per decode row, query head and split): allocated
/// once, so captured graphs point into it. A launch splits a sequence's
/// keys only as far as the room allows (splitKVWorkspaceBytes is enough for
/// any batch).
struct SplitKVWorkspace {
  float *data = nullptr;
  size_t bytes = 0;
};

/// A forward call's new keys and values as an fp8 pool decodes them: row r
/// of the flat batch (token r of the call), kv head h, element e of its
/// keys at data[((0 * planeRows() + r) * kvh + h) * head_dim + e], of its
/// values at kv 1 in place of 0, each the bf16 rounding of code x scale
/// (E4M3) or of the code (E5M2) that the cache write stored in the pool: the
/// values the Hopper prefill's staging computes from the pool, so reading
/// these instead gives the same bits. The cache writes store rows [0, rows)
/// beside an fp8 pool; launchPrefillAttentionSm90 reads the keys of
/// sequences with nothing cached before the call from them (plain TMA of
/// bf16, no staging). rows is the call's token count.
///
/// Rows [rows, rows + contextRows) are context rows: launchPrefillAttention-
/// Sm90 fills them, in the same decoding, with the whole cached context of
/// sequences that have keys cached before the call and enough new tokens
/// to repay the copy (freshContextRows; a chunked prompt's later chunks),
/// in order while they fit, and reads those sequences' keys from them too.
struct FreshKV {
  __nv_bfloat16 *data = nullptr;
  int64_t rows = 0;
  int64_t contextRows = 0;

  /// The rows of a k or v plane.
  int64_t planeRows() const { return rows + contextRows; }
};

/// Query rows (new tokens x group) from which a sequence with cached keys
/// reads them as context rows. Copying its context moves 6 bytes per key
/// element pair (an fp8 code read, a bf16 value written, keys and values);
/// by the H200's rates (the prefill at 413 TFLOP/s from bf16 against 254
/// from an E4M3 pool, ~3 TB/s for the copy) that is repaid from ~330 query
/// rows, an estimate: 512 leaves a margin.
constexpr int64_t kFreshContextMinRows = 512;

/// The context rows a call's FreshKV needs for every sequence that reads
/// its keys from context rows (host copies of the batch's query_start_loc
/// and context_lens; group = query heads per kv head): the sum of the
/// context lengths of the sequences with keys cached before the call and
/// at least kFreshContextMinRows query rows (new tokens x group).
int64_t freshContextRows(const int32_t *queryStartLoc,
                         const int32_t *contextLens, int64_t numSeqs,
                         int group);

/// Writes k and v rows [t, kvh*d] of `layer` to their slots; slot -1 skips.
/// An fp8 pool stores codes (and E4M3 scales) as KVCachePool says; one warp
/// per (token, kv head) finds the head vector's amax. Row r of k starts at
/// k + r * kLd, of v at v + r * vLd (0: kvh * d, contiguous).
cudaError_t launchKVCacheWrite(KVCachePool pool, CacheDims dims, int layer,
                               const float *k, const float *v,
                               const int64_t *slots, int64_t t,
                               cudaStream_t stream, int64_t kLd = 0,
                               int64_t vLd = 0);

/// rope_kv_cache_write: launchRope of the keys (head_dim = dims.headDim)
/// and launchKVCacheWrite of the rotated keys and v, in one pass that never
/// stores the rotated keys in fp32.
cudaError_t launchRopeKVCacheWrite(KVCachePool pool, CacheDims dims, int layer,
                                   const float *k, const float *v,
                                   const int64_t *slots,
                                   const int32_t *positions, int64_t t,
                                   int rotaryDim, const float *invFreq,
                                   cudaStream_t stream, int64_t kLd = 0,
                                   int64_t vLd = 0);

/// Causal attention of q[t, h*d] over the cached keys and values of each
/// sequence (query i of sequence s at position
/// context_lens[s] - new_tokens(s) + i; every sequence has at least one new
/// token); writes out[t, h*d]. q and out are fp32 or bf16 (contiguous; the
/// arithmetic is fp32 either way). An fp8 pool is dequantized as it is read.
/// The rows go to these kernels, each reading the batch on the device:
/// - sequences with one new token (decode rows): launchSplitKVDecode where
///   it supports the shape, splitting long contexts as far as `workspace`
///   allows (none: one split);
/// - sequences with two or more new tokens: launchPrefillAttentionSm90 on a
///   Hopper GPU where it supports the shape and INFER_ATTENTION_KERNEL is not
///   "fallback", else launchPrefillAttention where it supports the shape
///   (both bf16 q, K, V and probabilities, ~1e-3 relative error);
/// - the rest: an fp32 kernel of one block of 16 warps per (row, head).
/// `fresh` goes to launchPrefillAttentionSm90.
/// All of them rotate keys (keyRotaryDim > 0) as they read them, in the same
/// fp32 arithmetic (the tensor-core kernels before rounding them to bf16),
/// and soft-cap the scaled scores (logitSoftcap > 0) with tanhf before the
/// softmax; a plan with both runs on the fp32 kernel
/// (specializedScoreOptions).
cudaError_t launchPagedAttention(const float *q, KVCachePool pool,
                                 CacheDims dims, AttentionDims attention,
                                 const int32_t *blockTables,
                                 int64_t maxBlocksPerSeq,
                                 const int32_t *contextLens,
                                 const int32_t *queryStartLoc, int64_t numSeqs,
                                 int64_t t, float *out, cudaStream_t stream,
                                 SplitKVWorkspace workspace = {});
cudaError_t
launchPagedAttention(const __nv_bfloat16 *q, KVCachePool pool, CacheDims dims,
                     AttentionDims attention, const int32_t *blockTables,
                     int64_t maxBlocksPerSeq, const int32_t *contextLens,
                     const int32_t *queryStartLoc, int64_t numSeqs, int64_t t,
                     __nv_bfloat16 *out, cudaStream_t stream,
                     SplitKVWorkspace workspace = {}, FreshKV fresh = {});

/// The bf16 operands the tensor-core decode makes of `count` fp8 codes of
/// `dtype` (count a multiple of 8, 16-byte aligned): each code's unscaled
/// value, which bf16 holds exactly (codes of NaN and infinity, which the
/// cache writes never store, excepted). Its tests' hook.
cudaError_t launchDecodeOperandBf16(const uint8_t *codes, int64_t count,
                                    KVCacheDtype dtype, __nv_bfloat16 *out,
                                    cudaStream_t stream);

/// Whether launchSplitKVDecode takes this shape: head_dim 64, 128 or 256
/// (the cache's), whole groups of query heads per kv head, a key rope or a
/// soft-cap or neither (specializedScoreOptions).
bool splitKVDecodeSupports(const AttentionDims &attention,
                           const CacheDims &dims);

/// launchPagedAttention's function for the rows of the sequences with one
/// new token (the others' rows are left unwritten): one block per
/// (sequence, kv head, tile of up to 8 query heads, split) reads each key
/// and value once for the heads of its tile, several keys per lane group in
/// flight; the keys of a sequence are split over splitKVSplits(...) blocks
/// whose partial results a second kernel merges. Keys are rotated
/// (keyRotaryDim > 0) as they are loaded. With bf16 q, launches that fill
/// the GPU go to a tensor-core kernel instead (decodeKernelOf).
cudaError_t
launchSplitKVDecode(const float *q, KVCachePool pool, CacheDims dims,
                    AttentionDims attention, const int32_t *blockTables,
                    int64_t maxBlocksPerSeq, const int32_t *contextLens,
                    const int32_t *queryStartLoc, int64_t numSeqs, float *out,
                    SplitKVWorkspace workspace, cudaStream_t stream);
cudaError_t launchSplitKVDecode(const __nv_bfloat16 *q, KVCachePool pool,
                                CacheDims dims, AttentionDims attention,
                                const int32_t *blockTables,
                                int64_t maxBlocksPerSeq,
                                const int32_t *contextLens,
                                const int32_t *queryStartLoc, int64_t numSeqs,
                                __nv_bfloat16 *out, SplitKVWorkspace workspace,
                                cudaStream_t stream);

/// The splits launchSplitKVDecode gives each sequence's keys: as many
/// blocks as the SMs hold at once (3 a SM, 2 for tiles of 8 query heads;
/// rounded down, so they run in one wave), at least 64 keys per split of the
/// longest context the block tables hold (maxBlocksPerSeq * blockSize, or the
/// sliding window), at most 256, and no more than `workspaceBytes` holds. It
/// depends on the launch's shape only, so a captured graph replays it.
int splitKVSplits(const AttentionDims &attention, int blockSize,
                  int64_t maxBlocksPerSeq, int64_t numSeqs,
                  size_t workspaceBytes);

/// Bytes of a SplitKVWorkspace with which every batch on the current device
/// gets the splits it would get with unlimited room, for head_dim up to
/// `headDim` (a few MiB: splitting stops once the blocks fill the GPU).
size_t splitKVWorkspaceBytes(int headDim);

/// The kernels behind launchSplitKVDecode.
enum class DecodeKernel {
  kAuto,    ///< decodeKernelOf's choice (setDecodeKernel only)
  kSplitKV, ///< CUDA cores, split-KV: every shape splitKVDecodeSupports takes
  kMma,     ///< tensor cores, one warp per (sequence, kv head, split)
};

/// Whether the tensor-core decode (DecodeAttentionMma.cuh) takes this
/// launch: bf16 q, any pool (fp8 keys and values rounded to bf16 as they
/// are used), no key rope, head_dim 64 or 128 (the cache's), whole groups
/// of at most 16 query heads per kv head.
bool mmaDecodeSupports(const AttentionDims &attention, const CacheDims &dims,
                       KVCacheDtype dtype, bool bf16Queries);

/// The kernel launchSplitKVDecode runs for a launch of this shape: the
/// tensor-core one where it supports the launch, its warps, (sequence,
/// kv head) units times the splits mmaDecodeSplits gives them with room
/// enough, are at least 2 per SM (fewer: its serial steps are bare latency)
/// and those splits at most 64 (more: one long sequence, which the split-KV
/// kernel's fewer, longer splits read faster); else split-KV. setDecodeKernel
/// overrides the choice where the kernel supports the launch. It depends on the
/// launch's shape only, so a captured graph replays it.
DecodeKernel decodeKernelOf(const AttentionDims &attention,
                            const CacheDims &dims, KVCacheDtype dtype,
                            bool bf16Queries, int64_t maxBlocksPerSeq,
                            int64_t numSeqs);

/// The splits the tensor-core decode gives each sequence's keys: as many
/// warps as the SMs hold at once, at least 128 keys per split of the
/// longest context the block tables hold (or the sliding window), at most
/// 256, and no more than `workspaceBytes` holds (splitKVSplits' rules).
int mmaDecodeSplits(const AttentionDims &attention, int blockSize,
                    int64_t maxBlocksPerSeq, int64_t numSeqs,
                    size_t workspaceBytes);

/// Makes decodeKernelOf choose `kernel` (kAuto: its own choice) for tests
/// and benchmarks. The environment variable INFER_DECODE_KERNEL ("split" or
/// "mma") sets it at start.
void setDecodeKernel(DecodeKernel kernel);

/// Which pools' tensor-core decode launches (one tile of query heads, no
/// soft-cap) load a step's keys and values one step ahead, holding two
/// steps in registers (half the warps an SM): a warp then always has loads
/// in flight, and its serial steps stop waiting for them.
enum class DecodePrefetch {
  kNone,
  kBf16, ///< bf16 pools (the default): 4-12% faster on an H100
  kAll,  ///< fp8 pools too
};

/// Sets the prefetch choice for later launches (tests and benchmarks); the
/// environment variable INFER_DECODE_PREFETCH ("0", "bf16" or "all") sets it
/// at start.
void setDecodePrefetch(DecodePrefetch prefetch);
DecodePrefetch decodePrefetch();

/// Whether launchPrefillAttention takes this shape on the current device:
/// head_dim 64 or 128, whole groups of heads per kv head, a key rope or a
/// soft-cap or neither (specializedScoreOptions), sm_80 or newer.
bool prefillAttentionSupports(const AttentionDims &attention);

/// launchPagedAttention's function on tensor cores (FlashAttention-2,
/// mma.sync bf16, fp32 softmax) for the rows of the sequences with two or
/// more new tokens; the rows of other sequences are left unwritten. fp8
/// keys and values are dequantized to bf16 as they are staged in shared
/// memory; keys are rotated (keyRotaryDim > 0) in fp32 on that way, before
/// the rounding to bf16. The fallback of launchPrefillAttentionSm90.
cudaError_t
launchPrefillAttention(const float *q, KVCachePool pool, CacheDims dims,
                       AttentionDims attention, const int32_t *blockTables,
                       int64_t maxBlocksPerSeq, const int32_t *contextLens,
                       const int32_t *queryStartLoc, int64_t numSeqs, int64_t t,
                       float *out, cudaStream_t stream);
cudaError_t
launchPrefillAttention(const __nv_bfloat16 *q, KVCachePool pool, CacheDims dims,
                       AttentionDims attention, const int32_t *blockTables,
                       int64_t maxBlocksPerSeq, const int32_t *contextLens,
                       const int32_t *queryStartLoc, int64_t numSeqs, int64_t t,
                       __nv_bfloat16 *out, cudaStream_t stream);

/// False when the environment variable INFER_ATTENTION_KERNEL is "fallback":
/// launchPagedAttention then never takes launchPrefillAttentionSm90 (read
/// once per process).
bool prefillAttentionSm90Enabled();

/// Whether launchPrefillAttentionSm90 takes this shape and pool: a GPU of
/// compute capability 9.0 and a build with sm_90a code, head_dim 64 or 128
/// (the cache's), whole groups of heads per kv head, a positive scale,
/// block size a power of two from 8 to 128 or a multiple of 128, a key rope
/// or a soft-cap or neither (specializedScoreOptions; rotated keys with a
/// bf16 pool only).
bool prefillAttentionSm90Supports(const AttentionDims &attention,
                                  const CacheDims &dims, KVCacheDtype dtype);

/// The CTAs of launchPrefillAttentionSm90's persistent launches, which
/// work through the (row tile, kv head) items: `ctas` > 0 that many, 0 one
/// CTA per item (not persistent), < 0 the default: the device's SM count,
/// or INFER_SM90_PERSISTENT's value where it is set (0 turning persistence
/// off). For tests and comparisons; launches read it as they are made.
void setPrefillAttentionSm90Ctas(int ctas);

/// Whether the small kernels of a decode step (GEMV, norms, rope and cache
/// writes, decode attention, silu_mul, row copies, sampling) are
/// programmatic dependent launches (kernels/DependentLaunch.cuh): a device
/// of compute capability 9.0 or newer and INFER_PDL not "0" (read once per
/// process), or setDependentLaunches' override.
bool dependentLaunchesOn();
/// Overrides dependentLaunchesOn for the launches that follow: 0 off, 1 on
/// (where the device has them), < 0 back to the default. For tests and
/// comparisons.
void setDependentLaunches(int mode);

/// launchPrefillAttention's function on Hopper (PrefillAttentionSm90.cu):
/// wgmma tensor cores fed by TMA through the block tables, a producer
/// warpgroup and two consumer warpgroups; bf16 q, K, V and probabilities,
/// fp32 softmax and accumulation. With a workspace (launchPagedAttention
/// lends its split-KV one: the decode kernel runs after), a first launch
/// lists the tiles of the sequences with two or more new tokens and the
/// CTAs work through those alone, where a batch of many decode rows would
/// leave most tiles of the flat batch empty; the same results either way.
///
/// With bf16 q (fp32 q: `fresh` is not read), an fp8 pool without key rope
/// and `fresh` (FreshKV, rows = t), the sequences with nothing cached
/// before this call read their keys and values from `fresh` instead, in a
/// launch of the bf16 pool's kernel, and the others from the pool in a
/// second launch; each launch has its own tile map, so the workspace must
/// hold two and a row base per sequence (else `fresh` is not read). With
/// context rows, a first kernel copies the contexts of the sequences that
/// take them (FreshKV) there, and those join the first launch. The same
/// bits as without `fresh`: the staging would compute the same bf16 values
/// from the pool.
cudaError_t
launchPrefillAttentionSm90(const float *q, KVCachePool pool, CacheDims dims,
                           AttentionDims attention, const int32_t *blockTables,
                           int64_t maxBlocksPerSeq, const int32_t *contextLens,
                           const int32_t *queryStartLoc, int64_t numSeqs,
                           int64_t t, float *out, cudaStream_t stream,
                           SplitKVWorkspace workspace = {}, FreshKV fresh = {});
cudaError_t
launchPrefillAttentionSm90(const __nv_bfloat16 *q, KVCachePool pool,
                           CacheDims dims, AttentionDims attention,
                           const int32_t *blockTables, int64_t maxBlocksPerSeq,
                           const int32_t *contextLens,
                           const int32_t *queryStartLoc, int64_t numSeqs,
                           int64_t t, __nv_bfloat16 *out, cudaStream_t stream,
                           SplitKVWorkspace workspace = {}, FreshKV fresh = {});

/// Whether launchPrefillAttentionSm90 reads FreshKV: on unless
/// INFER_SM90_FRESH_KV is 0 (read once; for comparisons), or
/// setFreshKVReads' override (0 off, 1 on, < 0 the default).
bool freshKVReadsOn();
void setFreshKVReads(int mode);
/// Whether the backend gives FreshKV context rows (freshContextRows): on
/// unless INFER_SM90_FRESH_CONTEXT is 0 (read once; for comparisons).
bool freshContextRowsOn();

} // namespace infer::cuda

#endif // INFER_RUNTIME_CUDA_KERNELS_H
