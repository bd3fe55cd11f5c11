//===- GeneratedKernels.cpp - An artifact's generated kernels -------------===//

#include "runtime/cuda/GeneratedKernels.h"

#include <algorithm>
#include <fstream>
#include <optional>
#include <sstream>

namespace infer::cuda {
namespace {

StatusOr<std::string> readBytes(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    return notFound("cannot open generated kernels " + path);
  std::ostringstream bytes;
  bytes << in.rdbuf();
  if (in.bad())
    return dataLoss("error reading " + path);
  return bytes.str();
}

std::string joinPath(const std::string &dir, const std::string &file) {
  if (dir.empty() || file.front() == '/')
    return file;
  return dir.back() == '/' ? dir + file : dir + "/" + file;
}

/// "sm_90a" / "compute_90": version 90, architecture-specific or not.
struct Arch {
  int version = 0;
  bool specific = false;
};

std::optional<Arch> parseArch(const std::string &name,
                              const std::string &prefix) {
  if (name.rfind(prefix, 0) != 0)
    return std::nullopt;
  std::string digits = name.substr(prefix.size());
  Arch arch;
  if (!digits.empty() && (digits.back() == 'a' || digits.back() == 'f')) {
    arch.specific = true;
    digits.pop_back();
  }
  if (digits.size() < 2 || digits.size() > 3 ||
      !std::all_of(digits.begin(), digits.end(),
                   [](char c) { return c >= '0' && c <= '9'; }))
    return std::nullopt;
  arch.version = std::stoi(digits);
  return arch;
}

/// Whether code for `arch` runs on a device of compute capability `device`
/// (major * 10 + minor).
bool runsOn(const Arch &arch, int device, bool real) {
  if (arch.specific)
    return arch.version == device;
  // A cubin runs within its major version; PTX on anything at least as new.
  return real ? arch.version / 10 == device / 10 && arch.version <= device
              : arch.version <= device;
}

} // namespace

StatusOr<KernelImages> readKernelImages(const std::string &artifactDir,
                                        const plan::KernelFiles &files) {
  KernelImages images;
  for (const auto &[arch, file] : files.cubins) {
    INFER_ASSIGN_OR_RETURN(images.cubins[arch],
                           readBytes(joinPath(artifactDir, file)));
  }
  if (!files.ptx.empty()) {
    INFER_ASSIGN_OR_RETURN(images.ptx,
                           readBytes(joinPath(artifactDir, files.ptx)));
    images.ptxArch = files.ptxArch;
  }
  return images;
}

std::unique_ptr<GeneratedKernels>
GeneratedKernels::load(const KernelImages &images,
                       const std::vector<std::string> &names, int device,
                       std::string *why) {
  int major = 0, minor = 0;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor,
                             device) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor,
                             device) != cudaSuccess) {
    cudaGetLastError();
    *why = "cannot read the device's compute capability";
    return nullptr;
  }
  const int capability = major * 10 + minor;
  const std::string deviceName = "compute capability " + std::to_string(major) +
                                 "." + std::to_string(minor);

  struct Candidate {
    std::string origin;
    const std::string *code;
  };
  std::vector<Candidate> candidates;
  std::vector<std::string> skipped;
  for (const auto &[name, cubin] : images.cubins) {
    std::optional<Arch> arch = parseArch(name, "sm_");
    if (arch && runsOn(*arch, capability, /*real=*/true))
      candidates.push_back({"cubin " + name, &cubin});
    else
      skipped.push_back("cubin " + name);
  }
  // Exact matches first: sm_90a before sm_90, a newer minor before an older.
  std::stable_sort(candidates.begin(), candidates.end(),
                   [](const Candidate &a, const Candidate &b) {
                     return a.origin > b.origin;
                   });
  if (!images.ptx.empty()) {
    std::optional<Arch> arch = parseArch(images.ptxArch, "compute_");
    if (arch && runsOn(*arch, capability, /*real=*/false))
      candidates.push_back({"ptx " + images.ptxArch + " (JIT)", &images.ptx});
    else
      skipped.push_back("ptx " + images.ptxArch);
  }

  std::string reasons;
  for (const std::string &s : skipped)
    reasons += (reasons.empty() ? "" : "; ") + s + ": not for " + deviceName;
  for (const Candidate &candidate : candidates) {
    std::unique_ptr<GeneratedKernels> loaded(new GeneratedKernels());
    loaded->origin_ = candidate.origin;
    // PTX must be NUL-terminated; std::string's data() is.
    cudaError_t error =
        cudaLibraryLoadData(&loaded->library_, candidate.code->c_str(), nullptr,
                            nullptr, 0, nullptr, nullptr, 0);
    for (const std::string &name : names) {
      if (error != cudaSuccess)
        break;
      cudaKernel_t kernel = nullptr;
      error = cudaLibraryGetKernel(&kernel, loaded->library_, name.c_str());
      // Loading is lazy by default: asking for the attributes loads the
      // kernel on this device now, so a bad image fails here, not in a
      // launch.
      cudaFuncAttributes attributes;
      if (error == cudaSuccess)
        error = cudaFuncGetAttributes(&attributes,
                                      reinterpret_cast<const void *>(kernel));
      loaded->kernels_[name] = kernel;
    }
    if (error == cudaSuccess)
      return loaded;
    cudaGetLastError();
    reasons += (reasons.empty() ? "" : "; ") + candidate.origin + ": " +
               cudaGetErrorString(error);
  }
  *why = reasons.empty() ? "the artifact has no generated kernels" : reasons;
  return nullptr;
}

GeneratedKernels::~GeneratedKernels() {
  if (library_)
    cudaLibraryUnload(library_);
}

cudaKernel_t GeneratedKernels::kernel(const std::string &name) const {
  auto it = kernels_.find(name);
  return it == kernels_.end() ? nullptr : it->second;
}

cudaError_t launchGeneratedKernel(cudaKernel_t kernel,
                                  const std::vector<const void *> &inputs,
                                  const std::vector<void *> &outputs, int64_t n,
                                  cudaStream_t stream) {
  if (!kernel)
    return cudaErrorInvalidValue;
  if (n <= 0)
    return cudaSuccess;
  std::vector<const void *> pointers;
  for (const void *p : inputs)
    pointers.push_back(p);
  for (void *p : outputs)
    pointers.push_back(p);
  long long count = n;
  std::vector<void *> args;
  for (const void *&p : pointers)
    args.push_back(&p);
  args.push_back(&count);
  // Four elements per thread on the float4 path; grid-stride beyond that.
  const int64_t threads = (n + 3) / 4;
  const int64_t blocks = std::min<int64_t>(
      (threads + kGeneratedKernelThreads - 1) / kGeneratedKernelThreads,
      65535 * 8);
  return cudaLaunchKernel(reinterpret_cast<const void *>(kernel),
                          dim3(static_cast<unsigned>(blocks)),
                          dim3(kGeneratedKernelThreads), args.data(), 0,
                          stream);
}

} // namespace infer::cuda
