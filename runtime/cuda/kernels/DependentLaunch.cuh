//===- DependentLaunch.cuh - Programmatic dependent launches ----*- CUDA
//-*-===//
//
// Hopper's programmatic dependent launch for the small kernels of a decode
// step (GEMV, norms, rope and cache writes, decode attention, silu_mul): a
// kernel launched by launchDependent may start while the kernel before it
// in the stream is still running, once every block of that one has begun
// (allowDependentGrids) or ended. Each such kernel calls
// waitForPriorGrids() before it touches memory the previous kernels write
// or read, then allowDependentGrids(), so at most two grids overlap: the
// next one's blocks are placed, run their prologue (index arithmetic) and
// wait while this one drains, in place of the launch latency between them.
// Since each waits before it allows the next, only the kernel just before a
// waiting one may still be running; so a kernel may read, before it waits,
// what that kernel does not write (the decode attention kernels load the
// first keys of earlier forward calls that way, DecodeAttentionMma.cuh). In
// a captured graph the edges become programmatic ones. A kernel launched without
// the attribute (and every cuBLASLt kernel) waits as before; the device calls
// are no-ops there. INFER_PDL=0 turns the attribute off (read once; for
// comparisons).
//
//===----------------------------------------------------------------------===//

#ifndef INFER_RUNTIME_CUDA_KERNELS_DEPENDENTLAUNCH_CUH
#define INFER_RUNTIME_CUDA_KERNELS_DEPENDENTLAUNCH_CUH

#include "runtime/cuda/Kernels.h"

#include <cuda_runtime.h>

namespace infer::cuda {

/// Blocks until the grids this one depends on have completed and their
/// memory is visible (griddepcontrol.wait; returns at once when the launch
/// was not programmatic).
__device__ __forceinline__ void waitForPriorGrids() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

/// Lets the next programmatic launch begin once every block of this grid
/// has called it (or exited).
__device__ __forceinline__ void allowDependentGrids() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

/// kernel<<<grid, block, sharedBytes, stream>>>(args...) as a programmatic
/// dependent launch where dependentLaunchesOn(); the kernel must call
/// waitForPriorGrids() before its first access to memory of earlier work.
template <typename... Params, typename... Args>
cudaError_t launchDependent(void (*kernel)(Params...), dim3 grid, dim3 block,
                            size_t sharedBytes, cudaStream_t stream,
                            Args &&...args) {
  cudaLaunchAttribute attribute;
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = sharedBytes;
  config.stream = stream;
  config.attrs = &attribute;
  config.numAttrs = dependentLaunchesOn() ? 1 : 0;
  return cudaLaunchKernelEx(&config, kernel, static_cast<Params>(args)...);
}

} // namespace infer::cuda

#endif // INFER_RUNTIME_CUDA_KERNELS_DEPENDENTLAUNCH_CUH
