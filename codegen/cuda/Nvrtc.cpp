//===- Nvrtc.cpp - Compiles generated CUDA C++ with NVRTC -----------------===//

#include "codegen/cuda/Nvrtc.h"

#ifdef INFER_HAS_NVRTC
#include <nvrtc.h>
#endif

#include <vector>

namespace infer::compiler {

#ifdef INFER_HAS_NVRTC

namespace {

Status nvrtcError(nvrtcResult result, const char *what) {
  return internalError(std::string("NVRTC: ") + what + ": " +
                       nvrtcGetErrorString(result));
}

/// The CUDA toolkit's include directories CMake found (INFER_CUDA_INCLUDE_DIRS,
/// separated by ':').
std::vector<std::string> toolkitIncludeDirs() {
  std::vector<std::string> dirs;
  std::string list = INFER_CUDA_INCLUDE_DIRS;
  for (size_t begin = 0; begin <= list.size();) {
    size_t end = list.find(':', begin);
    if (end == std::string::npos)
      end = list.size();
    if (end > begin)
      dirs.push_back(list.substr(begin, end - begin));
    begin = end + 1;
  }
  return dirs;
}

/// One NVRTC compilation of `source` for `arch` ("sm_90a" or "compute_90").
class Program {
public:
  ~Program() {
    if (program_)
      nvrtcDestroyProgram(&program_);
  }

  Status compile(const std::string &source, const std::string &name,
                 const std::string &arch) {
    if (nvrtcResult r = nvrtcCreateProgram(&program_, source.c_str(),
                                           name.c_str(), 0, nullptr, nullptr);
        r != NVRTC_SUCCESS)
      return nvrtcError(r, "nvrtcCreateProgram");
    const std::string archOption = "--gpu-architecture=" + arch;
    // No --use_fast_math: expf/tanhf keep their fp32 accuracy (a few ulp),
    // as in the CUDA backend's own kernels.
    std::vector<std::string> options = {archOption, "--std=c++17",
                                        "--ftz=false", "--prec-div=true",
                                        "--prec-sqrt=true"};
    // Kernels of bf16 or f16 values include cuda_bf16.h / cuda_fp16.h,
    // which NVRTC finds in the toolkit it comes from.
    for (const std::string &dir : toolkitIncludeDirs())
      options.push_back("--include-path=" + dir);
    std::vector<const char *> optionPointers;
    for (const std::string &option : options)
      optionPointers.push_back(option.c_str());
    nvrtcResult r =
        nvrtcCompileProgram(program_, static_cast<int>(optionPointers.size()),
                            optionPointers.data());
    // A bad option is reported in the log too ("invalid value for
    // --gpu-architecture").
    if (r == NVRTC_ERROR_COMPILATION || r == NVRTC_ERROR_INVALID_OPTION)
      return invalidArgument("NVRTC could not compile " + name + " for " +
                             arch + " (" + nvrtcGetErrorString(r) + "):\n" +
                             log());
    if (r != NVRTC_SUCCESS)
      return nvrtcError(r, "nvrtcCompileProgram");
    return Status::ok();
  }

  StatusOr<std::string> cubin() const {
    size_t size = 0;
    if (nvrtcResult r = nvrtcGetCUBINSize(program_, &size); r != NVRTC_SUCCESS)
      return nvrtcError(r, "nvrtcGetCUBINSize");
    std::string bytes(size, '\0');
    if (nvrtcResult r = nvrtcGetCUBIN(program_, bytes.data());
        r != NVRTC_SUCCESS)
      return nvrtcError(r, "nvrtcGetCUBIN");
    return bytes;
  }

  StatusOr<std::string> ptx() const {
    size_t size = 0;
    if (nvrtcResult r = nvrtcGetPTXSize(program_, &size); r != NVRTC_SUCCESS)
      return nvrtcError(r, "nvrtcGetPTXSize");
    std::string text(size, '\0');
    if (nvrtcResult r = nvrtcGetPTX(program_, text.data()); r != NVRTC_SUCCESS)
      return nvrtcError(r, "nvrtcGetPTX");
    // The size counts the terminating NUL.
    while (!text.empty() && text.back() == '\0')
      text.pop_back();
    return text;
  }

private:
  std::string log() const {
    size_t size = 0;
    if (nvrtcGetProgramLogSize(program_, &size) != NVRTC_SUCCESS)
      return "(no log)";
    std::string text(size, '\0');
    if (nvrtcGetProgramLog(program_, text.data()) != NVRTC_SUCCESS)
      return "(no log)";
    while (!text.empty() && (text.back() == '\0' || text.back() == '\n'))
      text.pop_back();
    return text;
  }

  nvrtcProgram program_ = nullptr;
};

} // namespace

bool nvrtcAvailable(std::string *version) {
  int major = 0, minor = 0;
  if (nvrtcVersion(&major, &minor) != NVRTC_SUCCESS) {
    if (version)
      *version = "NVRTC did not report its version";
    return false;
  }
  if (version)
    *version = "NVRTC " + std::to_string(major) + "." + std::to_string(minor);
  return true;
}

StatusOr<CudaBinaries> compileCuda(const std::string &source,
                                   const std::string &name,
                                   const std::string &arch,
                                   const std::string &ptxArch) {
  if (arch.rfind("sm_", 0) != 0)
    return invalidArgument("CUDA architecture '" + arch +
                           "' is not a real one (expected sm_XY, e.g. sm_90a)");
  if (ptxArch.rfind("compute_", 0) != 0)
    return invalidArgument("PTX architecture '" + ptxArch +
                           "' is not a virtual one (expected compute_XY)");
  CudaBinaries out;
  Program real, virtualArch;
  INFER_RETURN_IF_ERROR(real.compile(source, name, arch));
  INFER_ASSIGN_OR_RETURN(out.cubin, real.cubin());
  INFER_RETURN_IF_ERROR(virtualArch.compile(source, name, ptxArch));
  INFER_ASSIGN_OR_RETURN(out.ptx, virtualArch.ptx());
  return out;
}

#else // !INFER_HAS_NVRTC

bool nvrtcAvailable(std::string *version) {
  if (version)
    *version = "infer was built without NVRTC (no CUDA toolkit found by "
               "CMake)";
  return false;
}

StatusOr<CudaBinaries> compileCuda(const std::string &, const std::string &,
                                   const std::string &, const std::string &) {
  std::string why;
  nvrtcAvailable(&why);
  return unimplemented("cannot compile CUDA kernels: " + why);
}

#endif // INFER_HAS_NVRTC

} // namespace infer::compiler
