//===- Gemm.h - Matrix products of the CUDA backend -------------*- C++ -*-===//
//
// y[T,N] = x[T,K] * w[N,K]^T (+ bias) (+ residual), fp32 accumulation, w
// bf16 or FP8 E4M3 codes with an fp32 scale per row. Two entry points:
//
//   linear(bf16 x)          y bf16 (activations) or fp32 (logits), rounded
//                           once from the fp32 result, the bias in y's type
//                           (plans of bf16 activations)
//   linear(fp32 x, bf16 x)  y fp32 (plans of fp32 activations; the bf16 copy
//                           of x feeds cuBLASLt)
//
// Both route by T (path()):
//
//   bf16, T <= 2        the CUDA-core skinny kernel (GemvKernels.h): x as it
//                       is, the weights streamed once (decode)
//   bf16, T > 2         cuBLASLt (from T = 4 it beats both skinny kernels:
//                       infer-cuda-bench --gemms on an H100, Llama-3-8B
//                       shapes, fp32 x); bf16 x: the bias added in its
//                       epilogue (CUBLASLT_EPILOGUE_BIAS) before the one
//                       rounding of y; fp32 x: by a kernel after it.
//                       With setSkinnyCandidates, a bf16 y of T <= 256
//                       takes the Hopper skinny kernel where tuning times
//                       it fastest (off by default).
//                       A bf16 y + bias with N % 8 != 0 (rows not 16-byte
//                       multiples) takes the skinny kernels in blocks of 8
//                       rows: cuBLASLt's kernels for such rows round the
//                       product before the bias, i.e. twice
//   fp8, T = 1          the CUDA-core skinny kernel
//   fp8, 2 <= T <= 8    the tensor-core skinny kernel (mma.sync, codes
//                       decoded to bf16 in registers, x bf16) where
//                       K % 64 == 0, else the CUDA-core one
//   fp8, T > 8          cuBLASLt on the FP8 tensor cores: x quantized per
//                       token to E4M3 (kernels/QuantizeFp8.cu: scale =
//                       amax / 448) into the scratch, in chunks of rows
//                       that fit it; the weights' row scales and the
//                       tokens' scales applied in cuBLASLt's epilogue
//                       (outer-vector scaling; on an H100 with CUDA 13 the
//                       heuristic has it for every shape tried), and a bf16
//                       y's bias with them. The tensor cores keep the
//                       partial sums (fast accumulation: no periodic
//                       promotion to fp32 registers), as vLLM's CUTLASS
//                       FP8FastAccum kernels do: 5-7% off Llama-3-8B's
//                       fp8 steps on an H100, for
//                       2e-3 to 5e-3 of max |y| against the product of the
//                       quantized operands in fp32 (K 4096-14336,
//                       CudaFp8GemmTest), a tenth of what quantizing x
//                       costs (2e-2 to 4e-2 against fp32 x);
//                       INFER_FP8_FAST_ACCUM=0 promotes. fp32 y: the
//                       bias (fp8 cuBLASLt takes only a bf16 one) and,
//                       where the heuristic
//                       has no outer-vector algorithm, the scales are
//                       applied by a kernel after it; bf16 y: such a chunk
//                       runs the skinny kernels below instead. Needs
//                       K % 16 == 0, 16-byte rows of y (N % 4 == 0 fp32,
//                       N % 8 == 0 bf16) and 16-byte aligned codes.
//                       Elsewhere: bf16 y, the skinny kernels in blocks of
//                       8 rows at any T (no fp32 pass over y, which would
//                       round twice; no model of whole 16-element K and N
//                       goes there); fp32 y, the tensor-core skinny kernel
//                       in blocks of 8 rows up to T = 24, beyond that the
//                       codes decoded to bf16 (exact) in chunks of rows
//                       that fill the scratch, bf16 cuBLASLt per chunk,
//                       then y[:, j] = y[:, j] * rowScales[j] (+ bias)
//
// Quantization fused into x's producer: where a bf16 x of T rows takes fp8
// cuBLASLt in one chunk (no chunking: the scratch holds T rows),
// fp8Operand() says where in the scratch that chunk's codes and scales go;
// the step that produces x (the CUDA backend's rms_norm and silu_mul,
// launchRmsNormFp8 / launchSiluMulFp8) writes them there bit for bit as
// launchQuantizeRowsFp8 would, and linearQuantized() runs the rest of the
// path unchanged (same shape key, algorithm, scales, epilogue), skipping
// the quantize launch and its two reads of x. Whether the heuristic has an
// outer-vector algorithm does not matter: the fp32 y's scale kernel reads
// the same scales, a bf16 y's skinny kernels read x itself. Nothing else
// may use the scratch between the producer and the GEMM.
//
// A residual r[T,N] (y's layout and type; infer.linear's residual, the
// decoder layer's residual stream) joins every path before the one
// rounding of a bf16 y: the skinny kernels add it where they add the bias;
// bf16 cuBLASLt and fp8 cuBLASLt with a bf16 y read it as C with beta = 1
// (D = alpha * scales * (w x) + beta * C + bias: cuBLASLt's outer-vector
// scales multiply the product only, C is added unscaled), on algorithms
// that support C != D (it never aliases y: tune runs the product several
// times, and each run in place would add r again). It takes the skinny
// kernels where a bias would (bf16 y, N % 8 != 0). An fp32 y of the other
// paths (scale kernel, dequantization, fp32 x) adds it after, in fp32.
//
// The thresholds were measured with fp32 x, whose cuBLASLt and fp8 paths
// paid an fp32 -> bf16 conversion or quantized fp32 rows; with bf16 x they
// need measuring again (kCudaCoreBf16MaxRows, kFp8SkinnyMaxRows,
// kFp8MmaMaxRows).
//
// In cuBLAS's column-major terms y^T[N,T] = op_T(w as [K,N]) * x^T[K,T]. The
// heuristic's algorithm is chosen once per ShapeKey (operand and output
// types, epilogue, residual or not, scaling, N, T, K, ldy) and cached; fp8
// cuBLASLt needs that TN layout (A = w transposed).
//
//===----------------------------------------------------------------------===//

#ifndef INFER_RUNTIME_CUDA_GEMM_H
#define INFER_RUNTIME_CUDA_GEMM_H

#include "runtime/cuda/GemvKernels.h"
#include "runtime/support/Status.h"

#include <cstdint>
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <functional>

#include <map>
#include <memory>
#include <optional>
#include <tuple>
#include <vector>

namespace infer::cuda {

/// A weight matrix [N, K] on the device: bf16, or E4M3 codes and row scales.
struct GemmWeight {
  const __nv_bfloat16 *bf16 = nullptr;
  const uint8_t *fp8 = nullptr;
  const float *rowScales = nullptr;
};

class Gemm {
public:
  /// A cuBLASLt handle, a `workspaceBytes` device workspace and a
  /// `scratchBytes` scratch for fp8 weights at large T (0: no fp8 weights):
  /// the tokens' E4M3 codes and scales, or dequantized weight rows.
  static StatusOr<std::unique_ptr<Gemm>> create(size_t workspaceBytes,
                                                size_t scratchBytes = 0);
  ~Gemm();
  Gemm(const Gemm &) = delete;
  Gemm &operator=(const Gemm &) = delete;

  enum class Path {
    kGemv,
    kGemvMma,
    kCublasLt,
    kFp8CublasLt,
    kDequantCublasLt
  };
  /// What linear() runs for T rows, N outputs, width K, `w`, y elements
  /// of `yBytes` (4: fp32, 2: bf16), a bias or not and a residual or not,
  /// with 16-byte aligned operands (a misaligned x takes kGemv instead of
  /// kGemvMma).
  static Path path(int64_t t, int64_t n, int64_t k, const GemmWeight &w,
                   int64_t yBytes = 4, bool bias = false,
                   bool residual = false);
  static const char *pathName(Path path);
  /// Whether that path reads the bf16 copy of x (fp32 x).
  static bool needsBf16Input(int64_t t, int64_t n, int64_t k,
                             const GemmWeight &w) {
    const Path p = path(t, n, k, w);
    return p == Path::kCublasLt || p == Path::kDequantCublasLt;
  }
  /// Whether fp8 cuBLASLt accumulates in the tensor cores alone
  /// (CUBLASLT_MATMUL_DESC_FAST_ACCUM; see the file comment): on unless
  /// INFER_FP8_FAST_ACCUM is 0 (read once).
  static bool fp8FastAccumulation();

  /// Whether fp8 cuBLASLt takes [N, K] codes at `codes` with y elements of
  /// `yBytes`: K % 16 == 0 (its operands' leading dimension), 16-byte rows
  /// of y (N * yBytes % 16 == 0), codes 16-byte aligned.
  static bool fp8CublasLtSupports(int64_t n, int64_t k, const uint8_t *codes,
                                  int64_t yBytes = 4);

  /// y[T,N] = x[T,K] * w^T (+ bias, may be null) (+ residual [T,N], may be
  /// null), routed as above: x bf16, y, bias and residual bf16 or fp32 (Y),
  /// each element of y rounded once from the fp32 sum (times the fp8
  /// scales) plus the bias plus the residual. Operands 16-byte aligned, the
  /// bias and residual too (cuBLASLt's epilogue reads them); the residual
  /// must not overlap y. Graph-capturable once the shape has run outside a
  /// capture (cuBLASLt's heuristic query and tuning).
  template <typename Y>
  Status linear(const __nv_bfloat16 *x, const GemmWeight &w,
                const NonDeduced<Y> *bias, Y *y, int64_t t, int64_t n,
                int64_t k, cudaStream_t stream,
                const NonDeduced<Y> *residual = nullptr);

  /// Where a bf16 x's E4M3 codes ([T, K] rows, 16-byte aligned) and scales
  /// ([T]) go in the scratch.
  struct Fp8Operand {
    uint8_t *codes = nullptr;
    float *scales = nullptr;
  };
  /// Where linear<Y>(bf16 x, w, bias, y, T, N, K, ..., residual) with y
  /// elements of `yBytes` quantizes x when it takes fp8 cuBLASLt in one
  /// chunk of rows; nullopt where it takes another path or several chunks.
  std::optional<Fp8Operand> fp8Operand(int64_t t, int64_t n, int64_t k,
                                       const GemmWeight &w, int64_t yBytes,
                                       bool bias, bool residual) const;
  /// Whether linearQuantized<bf16 y> of this shape reads only the codes and
  /// scales, not x: fp8 cuBLASLt with outer-vector scales has an algorithm
  /// for it (without one, the rows go to the skinny kernels, which read x).
  /// A producer that quantizes for the product may then leave x unstored.
  /// Resolves the shape as its first product would (a heuristic query).
  StatusOr<bool> fp8OperandSuffices(int64_t t, int64_t n, int64_t k,
                                    const GemmWeight &w,
                                    const __nv_bfloat16 *bias, bool residual);
  /// linear<Y> of a bf16 x whose codes and scales are already where
  /// fp8Operand() with these arguments says (written after the last product
  /// that used the scratch): the same path without the quantize launch. An
  /// error where fp8Operand() is nullopt.
  template <typename Y>
  Status linearQuantized(const __nv_bfloat16 *x, const GemmWeight &w,
                         const NonDeduced<Y> *bias, Y *y, int64_t t, int64_t n,
                         int64_t k, cudaStream_t stream,
                         const NonDeduced<Y> *residual = nullptr);

  /// y[T,N] = x[T,K] * w^T (+ bias, may be null) (+ residual, may be null,
  /// not overlapping y), routed as above. `x` is the fp32 activation;
  /// `xBf16` the same rounded to bf16 where needsBf16Input (else it may be
  /// null). Graph-capturable once the shape has run outside a capture
  /// (cuBLASLt's heuristic query).
  Status linear(const float *x, const __nv_bfloat16 *xBf16, const GemmWeight &w,
                const float *bias, float *y, int64_t t, int64_t n, int64_t k,
                cudaStream_t stream, const float *residual = nullptr);

  /// cuBLASLt alone: y = x * w^T, both bf16 (no routing).
  Status run(const __nv_bfloat16 *x, const __nv_bfloat16 *w, float *y,
             int64_t t, int64_t n, int64_t k, cudaStream_t stream);
  /// fp8 cuBLASLt alone (Path::kFp8CublasLt at any T): y = quantize(x) *
  /// w^T (+ bias), the fp32 x quantized per token into the scratch; y
  /// 16-byte aligned. Graph-capturable once each chunk's shape has run.
  Status runFp8(const float *x, const GemmWeight &w, const float *bias,
                float *y, int64_t t, int64_t n, int64_t k, cudaStream_t stream);

  /// Where fp8 cuBLASLt applies the scales of a T x N x K product that has
  /// run (T at most one chunk of rows) with a y of `yType` (CUDA_R_32F or
  /// CUDA_R_16BF) and a bias in its epilogue or not (`epilogueBias`: a bf16
  /// y's bias): "outer-vector epilogue" (cuBLASLt's
  /// CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F); where the heuristic had no
  /// outer-vector algorithm, "scale kernel" (fp32 y: unscaled cuBLASLt, then
  /// launchScaleRowsColumns) or "skinny kernels" (bf16 y); null for a shape
  /// that has not run. `residual`: a bf16 y's residual read as C.
  const char *fp8Scaling(int64_t t, int64_t n, int64_t k,
                         cudaDataType_t yType = CUDA_R_32F,
                         bool epilogueBias = false,
                         bool residual = false) const;
  /// Which of the heuristic's candidates (0: its first choice) the bf16 or
  /// fp8 (`fp8`) cuBLASLt product T x N x K with y of `yType` and a bias in
  /// its epilogue or not (bf16 x with a bias: bf16 weights, or fp8 weights
  /// and a bf16 y) and a residual as C or not runs after tuning; -1 for a
  /// shape that has not run or was not tuned (T > kTuneMaxRows, a capture).
  int tunedRank(bool fp8, int64_t t, int64_t n, int64_t k,
                cudaDataType_t yType = CUDA_R_32F, bool epilogueBias = false,
                bool residual = false) const;

  /// Whether a cuBLASLt shape of at most kTuneMaxRows rows that has not
  /// been tuned is tuned by this call (default on). Off, it runs the
  /// heuristic's first choice and is tuned by a later call with tuning on.
  /// The CUDA backend tunes in decode-only forward calls, whose row counts
  /// recur (padded to graph buckets); a mixed batch's row counts (a new
  /// number of sequences nearly every step) would each pay a tuning of
  /// 8 candidates x 3 runs after an L2 flush: 4.3 ms per forward call of
  /// Llama-3-8B's 81 ms in `infer bench --input-len 2048 --output-len 128`,
  /// almost all of it the logits of every new row count.
  void setTuneNewShapes(bool tune) { tuneNewShapes_ = tune; }

  /// Whether tuning a bf16 x, bf16 y product (T <= kTuneMaxRows, y rows of
  /// N) also times the Hopper skinny kernel (launchSkinnyGemmSm90, K split
  /// 1, 2 and skinnyGemmSm90Splits ways, in clusters of 1, 2 and 4 CTAs,
  /// its partial sums in the workspace) and runs it where it is fastest. Off
  /// unless INFER_SKINNY_GEMM=1 at create(): on an H100 with CUDA 13 it loses
  /// to cuBLASLt's first choice on every Llama-3-8B decode shape at T = 32-256
  /// (by 1-34%: infer-gemm-search, bench/RESULTS.md), so by default the
  /// tuner spends no time on it.
  void setSkinnyCandidates(bool on) { skinnyCandidates_ = on; }

private:
  /// bf16 rows the CUDA-core kernel takes (T = 2: 5.65 ms of GEMMs per
  /// Llama-3-8B token against cuBLASLt's 6.26 and the tensor-core kernel's
  /// 6.04; T = 4: cuBLASLt 5.67, tensor cores 5.92, CUDA cores 6.14; fp32
  /// x, cuBLASLt's times with the conversion of x to bf16).
  static constexpr int64_t kCudaCoreBf16MaxRows = 2;
  /// fp8 rows the skinny kernels take where fp8 cuBLASLt applies: one block
  /// of kGemvMaxRows. Llama-3-8B GEMMs per forward call on an H100
  /// (infer-cuda-bench --gemms, CUDA 13, fp32 x): T = 8 tensor-core kernel
  /// 3.74 ms against fp8 cuBLASLt's 5.10 (quantization included); T = 16
  /// two row blocks 7.62 ms against 5.02; T = 24 11.25 against 4.95.
  static constexpr int64_t kFp8SkinnyMaxRows = kGemvMaxRows;
  /// fp8 rows the tensor-core kernel takes in blocks of kGemvMaxRows where
  /// fp8 cuBLASLt does not apply (fp32 y): three blocks (3 x 3.74 ms per
  /// token at T = 8) still beat dequantization (15.1 ms at T = 16).
  static constexpr int64_t kFp8MmaMaxRows = 24;

  /// Rows up to which the first call of a cuBLASLt shape times the
  /// heuristic's candidates (tune): the decode and graph batch sizes, whose
  /// shapes recur every step. Larger T (prefill, mixed batches: a new T
  /// nearly every step) keeps the heuristic's first choice. The choice
  /// rests on timings, so two processes may run different algorithms for a
  /// shape: the same product to fp32 rounding, not bit for bit.
  static constexpr int64_t kTuneMaxRows = 256;
  /// What tune writes between timed runs so that each reads its weights
  /// from HBM (larger than the H100's and H200's 50 MiB L2).
  static constexpr size_t kFlushBytes = size_t(64) << 20;

  /// How cuBLASLt scales the product: not at all, or by the outer vectors
  /// of fp8 operands (the weights' row scales, the tokens' scales).
  enum class Scaling : int8_t { kNone, kOuterVectors };
  /// What a cuBLASLt call's descriptors and algorithm depend on.
  struct ShapeKey {
    bool fp8 = false;              ///< E4M3 operands, else bf16
    cudaDataType_t y = CUDA_R_32F; ///< CUDA_R_32F or CUDA_R_16BF
    bool bias = false;             ///< CUBLASLT_EPILOGUE_BIAS, bias of y's type
    /// beta = 1 with C = the residual (C != D): candidates that support
    /// out-of-place results, timed with the C read.
    bool residual = false;
    Scaling scaling = Scaling::kNone;
    int64_t n = 0, t = 0, k = 0, ldy = 0;

    bool operator<(const ShapeKey &o) const {
      return std::tie(fp8, y, bias, residual, scaling, n, t, k, ldy) <
             std::tie(o.fp8, o.y, o.bias, o.residual, o.scaling, o.n, o.t, o.k,
                      o.ldy);
    }
  };
  /// The key of fp8 cuBLASLt with outer-vector scales over `t` rows (y
  /// contiguous, ldy = n).
  static ShapeKey fp8OuterKey(int64_t t, int64_t n, int64_t k, cudaDataType_t y,
                              bool bias, bool residual);

  Gemm() = default;
  struct Shape;
  /// The descriptors of `key`, made on first use with this call's bias and
  /// scale pointers (the heuristic reads their alignment); a shape the
  /// heuristic has no algorithm for is cached with no candidates.
  StatusOr<Shape *> shape(const ShapeKey &key, const void *bias,
                          const float *wScales, const float *xScales);
  const Shape *findShape(const ShapeKey &key) const;
  /// A launch of the Hopper skinny kernel with `splits` K splits in
  /// clusters of `cluster` CTAs on the call's operands, timed beside the
  /// heuristic's candidates.
  struct SkinnyCandidate {
    int64_t splits, cluster;
    std::function<cudaError_t()> launch;
  };
  /// Times `launch` (the shape's product on this call's operands) with each
  /// heuristic candidate, and each of `skinny`, 3 runs each after an L2
  /// flush, and keeps the fastest: s.algo, or s.skinnySplits for a skinny
  /// launch; nothing is timed inside a stream capture. The operands'
  /// output is overwritten by every run (the caller's run after it writes
  /// the result).
  Status tune(
      Shape &s,
      const std::function<cublasStatus_t(const cublasLtMatmulAlgo_t &)> &launch,
      cudaStream_t stream, const std::vector<SkinnyCandidate> &skinny = {});
  /// The skinny kernels in blocks of kGemvMaxRows rows (tensor cores where
  /// `mma` and the operands are 16-byte aligned).
  template <typename X, typename Y>
  Status runSkinny(const X *x, const GemmWeight &w, const Y *bias, Y *y,
                   int64_t t, int64_t n, int64_t k, bool mma,
                   cudaStream_t stream, const Y *residual = nullptr);
  /// bf16 cuBLASLt: y (leading dimension ldy: a column block of a wider
  /// output) = x * w^T (+ bias in the epilogue) (+ residual, y's layout, as
  /// C with beta = 1).
  template <typename Y>
  Status runBf16(const __nv_bfloat16 *x, const __nv_bfloat16 *w, const Y *bias,
                 Y *y, int64_t t, int64_t n, int64_t k, int64_t ldy,
                 cudaStream_t stream, const Y *residual = nullptr);
  /// Rows of one fp8 cuBLASLt chunk of T rows of width K (T where the
  /// scratch holds them all; 0 where it holds none).
  int64_t fp8ChunkRows(int64_t t, int64_t k) const;
  /// The scratch places of a chunk of `chunk` rows: [scales | pad to 256 |
  /// codes, chunk x K].
  Fp8Operand fp8ChunkOperand(int64_t chunk) const;
  /// fp8 cuBLASLt over chunks of rows, as the file comment says;
  /// `xQuantized`: one chunk whose codes and scales are in the scratch.
  template <typename X, typename Y>
  Status runFp8Chunks(const X *x, const GemmWeight &w, const Y *bias, Y *y,
                      int64_t t, int64_t n, int64_t k, cudaStream_t stream,
                      const Y *residual = nullptr, bool xQuantized = false);
  Status runDequantized(const __nv_bfloat16 *xBf16, const GemmWeight &w,
                        const float *bias, float *y, int64_t t, int64_t n,
                        int64_t k, cudaStream_t stream);

  cublasLtHandle_t handle_ = nullptr;
  void *workspace_ = nullptr;
  size_t workspaceBytes_ = 0;
  uint8_t *scratch_ = nullptr;
  size_t scratchBytes_ = 0;
  /// kFlushBytes for tune, allocated at its first use (null where that
  /// failed: flushFailed_, and tune times with warm caches).
  void *flush_ = nullptr;
  bool flushFailed_ = false;
  bool tuneNewShapes_ = true;
  bool skinnyCandidates_ = false;
  std::map<ShapeKey, std::unique_ptr<Shape>> shapes_;
};

} // namespace infer::cuda

#endif // INFER_RUNTIME_CUDA_GEMM_H
