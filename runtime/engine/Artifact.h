//===- Artifact.h - Loading a compiled artifact directory -------*- C++ -*-===//
//
//   artifact/ manifest.json   what was compiled, the KV-cache layout, the
//             plan.json       weight files and their header fingerprints
//             program.mlir    (for people)
//             tokenizer.json  (copied from the model directory)
//   weights/  the source safetensors files the plan's params name, found in
//             manifest.weights_dir (relative paths are relative to the
//             artifact) unless the caller overrides the directory.
//
//===----------------------------------------------------------------------===//

#ifndef INFER_RUNTIME_ENGINE_ARTIFACT_H
#define INFER_RUNTIME_ENGINE_ARTIFACT_H

#include "runtime/backend/Backend.h"
#include "runtime/backend/ParamSource.h"
#include "runtime/plan/Plan.h"

#include <functional>
#include <string>

namespace infer {

struct Artifact {
  std::string dir;
  plan::Manifest manifest;
  plan::Plan plan;

  /// Path of a file the manifest names, relative to the artifact ("" when
  /// the manifest names none).
  std::string path(const std::string &file) const;
};

/// Whether `dir` holds a manifest.json.
bool isArtifactDir(const std::string &dir);

/// Reads and validates manifest.json and the plan it names; checks that the
/// plan's KV-cache layout is the manifest's.
StatusOr<Artifact> loadArtifact(const std::string &dir);

/// The directory weights are read from: `override` if set, else the
/// manifest's weights_dir.
std::string weightsDirOf(const Artifact &artifact, const std::string &override);

/// Checks every weight file the manifest lists (size and header
/// fingerprint), then reads the rank's params from the source checkpoint,
/// applying their transforms (16-bit tensors stay 16-bit; fp32 where a
/// transform needs it), each as its plan dtype. Values naming the same
/// source tensor through the same transforms share one buffer. A packed
/// artifact's files are read by loadRankParams (PackedWeights.h).
StatusOr<ParamTable> loadParams(const Artifact &artifact, int rank,
                                const std::string &weightsDir,
                                bool showProgress = false);

/// What tells params apart at load: the source file and tensor, the dtype
/// and the transforms. Values with the same key share one tensor.
std::string paramLoadKey(const plan::Value &v);

/// Makes a param's host tensor from its source. The loader's own gathers,
/// then casts or quantizes on the host; `infer pack` on a GPU host passes
/// one that quantizes fp8 weights on the device (cuda/ParamUpload.h).
using ParamMaterializer = std::function<StatusOr<HostTensor>(
    const plan::Value &, const ParamSource &)>;

/// The loader of loadParams, one param at a time: checks the weight files,
/// then calls `fn` with each distinct param of the rank (the first value of
/// each paramLoadKey, in plan order) read and transformed (by `materialize`
/// when given), so a caller can consume a tensor before the next is read
/// (packing).
Status
forEachParam(const Artifact &artifact, int rank, const std::string &weightsDir,
             const std::function<Status(const plan::Value &, HostTensor)> &fn,
             const ParamMaterializer &materialize = nullptr);

/// The rank's params as deferred tensors (HostTensor::source): each
/// param's transforms checked and turned into views of the mapped
/// checkpoint, no element read. A backend that transforms while uploading
/// (the CUDA backend) materializes them; values that load the same tensor
/// (paramLoadKey) share one.
StatusOr<ParamTable> loadDeferredParams(const Artifact &artifact, int rank,
                                        const std::string &weightsDir);

/// Applies a `quantize_fp8_e4m3` weight transform (granularity per-tensor
/// or per-channel, optional `parts`) to a 2-D fp32 tensor: its data becomes
/// E4M3 codes with one scale per row (amax / 448 of the row's group), as
/// loadParams does last. Large tensors are quantized on several threads.
Status applyQuantizeFp8(const plan::WeightTransform &transform,
                        HostTensor &tensor);

} // namespace infer

#endif // INFER_RUNTIME_ENGINE_ARTIFACT_H
