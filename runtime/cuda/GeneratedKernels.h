//===- GeneratedKernels.h - An artifact's generated kernels -----*- C++ -*-===//
//
// `infer compile --target cuda` writes kernels/ into the artifact: one
// extern "C" kernel per distinct `fused` body (codegen/cuda/CudaEmitter.h),
// as a cubin per real architecture and as PTX (plan::KernelFiles). At load
// the CUDA backend takes, for its device, the first image that loads:
//
//   1. a cubin for the device: sm_XY runs on compute capability X.Z for
//      Z >= Y; the architecture-specific sm_XYa only on X.Y exactly;
//   2. the PTX, JIT-compiled by the driver when its virtual architecture is
//      at most the device's (and its ISA not newer than the driver);
//   3. none: the fused steps run the interpreter kernel (launchFused), as
//      for artifacts compiled with --target cpu.
//
// Through the CUDA runtime's library API (cudaLibraryLoadData,
// cudaLibraryGetKernel, cudaLaunchKernel), which reaches the driver the
// runtime already loads: no NVRTC, and no link against libcuda, so binaries
// still start on machines without a GPU driver (CI). Launches are ordinary
// stream launches and are captured into CUDA graphs like any other.
//
//===----------------------------------------------------------------------===//

#ifndef INFER_RUNTIME_CUDA_GENERATEDKERNELS_H
#define INFER_RUNTIME_CUDA_GENERATEDKERNELS_H

#include "runtime/plan/Plan.h"
#include "runtime/support/Status.h"

#include <cuda_runtime_api.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

namespace infer::cuda {

/// The bytes of an artifact's kernels/ files.
struct KernelImages {
  /// Real architecture ("sm_90a") -> cubin.
  std::map<std::string, std::string> cubins;
  std::string ptx;
  std::string ptxArch; ///< "compute_90"

  bool empty() const { return cubins.empty() && ptx.empty(); }
};

/// Reads the files `files` names, relative to `artifactDir`; empty images
/// for an artifact without kernels.
StatusOr<KernelImages> readKernelImages(const std::string &artifactDir,
                                        const plan::KernelFiles &files);

/// The generated kernels loaded for one device.
class GeneratedKernels {
public:
  /// Loads the first image of `images` that fits `device` (the current
  /// device) and provides every kernel of `names`. Null, with the reasons in
  /// `why`, when none does.
  static std::unique_ptr<GeneratedKernels>
  load(const KernelImages &images, const std::vector<std::string> &names,
       int device, std::string *why);
  ~GeneratedKernels();
  GeneratedKernels(const GeneratedKernels &) = delete;
  GeneratedKernels &operator=(const GeneratedKernels &) = delete;

  /// "cubin sm_90a" or "ptx compute_90 (JIT)".
  const std::string &origin() const { return origin_; }
  /// A kernel of `names` passed to load.
  cudaKernel_t kernel(const std::string &name) const;

private:
  GeneratedKernels() = default;

  cudaLibrary_t library_ = nullptr;
  std::string origin_;
  std::map<std::string, cudaKernel_t> kernels_;
};

/// Threads per block of the generated kernels (Plan.h, `fused`).
inline constexpr int kGeneratedKernelThreads = 256;

/// Launches a generated `fused` kernel: (inputs..., outputs..., n).
cudaError_t launchGeneratedKernel(cudaKernel_t kernel,
                                  const std::vector<const void *> &inputs,
                                  const std::vector<void *> &outputs, int64_t n,
                                  cudaStream_t stream);

} // namespace infer::cuda

#endif // INFER_RUNTIME_CUDA_GENERATEDKERNELS_H
