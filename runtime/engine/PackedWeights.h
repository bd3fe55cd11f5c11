//===- PackedWeights.h - Per-rank weight files of an artifact ---*- C++ -*-===//
//
// An artifact references its source checkpoint and transforms each param at
// load (slice, concat, fp8 quantization). Packing runs that same loader
// (forEachParam) once and writes each rank's params as they come out into
// the artifact, so that loading is a mapping and a copy:
//
//   ARTIFACT/weights/rank0.safetensors
//     [8-byte header length][JSON header, padded with spaces][data section]
//                                                    ^ file offset % 4096 == 0
//     data section: one tensor per distinct param, each at an offset that is
//     a multiple of 256 (gaps are "__padding__.N" U8 tensors, so the file
//     stays a valid, hole-free safetensors file):
//       "model.embed_tokens.weight"        BF16 [V, H]
//       "model.layers.0.self_attn.qkv..."  F8_E4M3 [N, K]   fp8 codes
//       "model.layers.0.self_attn.qkv....row_scales"  F32 [N]
//     __metadata__: {"format": "infer-packed-weights", "rank": "0"}
//
// The manifest lists each file with its size and content hash
// (plan::PackedWeightFile). At load the file is mapped read-only; each
// HostTensor views its bytes (no host copy, no conversion), so the mapped
// pages count as file cache, not as the process's anonymous memory.
//
//===----------------------------------------------------------------------===//

#ifndef INFER_RUNTIME_ENGINE_PACKEDWEIGHTS_H
#define INFER_RUNTIME_ENGINE_PACKEDWEIGHTS_H

#include "runtime/engine/Artifact.h"

#include <map>
#include <string>
#include <string_view>

namespace infer {

/// Offset alignment of tensors inside a packed file's data section.
inline constexpr uint64_t kPackedTensorAlignment = 256;
/// The data section starts at a multiple of this file offset.
inline constexpr uint64_t kPackedDataAlignment = 4096;

/// How params are read when a backend is made.
struct WeightLoadOptions {
  /// `--weights DIR`: read the source checkpoint from DIR and transform it,
  /// even when the artifact has packed weights.
  std::string weightsDirOverride;
  /// Check each packed file's content hash; `--skip-weight-check` clears it
  /// for trusted storage (the size, the header and every param's dtype and
  /// shape are checked regardless).
  bool verifyHash = true;
  /// Show the progress of loading on stderr (runtime/engine/Progress.h).
  bool showProgress = false;
  /// Unpacked: return deferred params (loadDeferredParams) for a backend
  /// that gathers and transforms them while uploading (cuda), instead of
  /// transformed host copies.
  bool deferTransforms = false;
};

/// The params of `rank`: from the rank's packed file when the artifact has
/// packed weights and no override is given, else read from the source
/// checkpoint and transformed (loadParams), or deferred to the backend
/// (options.deferTransforms: loadDeferredParams).
StatusOr<ParamTable> loadRankParams(const Artifact &artifact, int rank,
                                    const WeightLoadOptions &options);

/// Maps the rank's packed file, checks it against the manifest (size, hash
/// unless !verifyHash) and the plan (rank, every param's dtype and shape),
/// and returns tensors viewing the mapping. Every error names the file.
StatusOr<ParamTable> loadPackedParams(const Artifact &artifact, int rank,
                                      bool verifyHash);

/// The name of each param value's tensor in a packed file: the value's
/// name, or name@id when another param of that name loads differently (a
/// tied table loaded plain and quantized). Values that load the same tensor
/// (paramLoadKey) share a name.
std::map<int, std::string> packedTensorNames(const plan::RankPlan &rank);

struct PackOptions {
  /// The source checkpoint; empty: the manifest's weights_dir.
  std::string weightsDir;
  bool showProgress = false;
  /// How each param is made (forEachParam); empty: on the host.
  ParamMaterializer materialize;
};

/// `infer pack` and `infer compile --pack-weights`: transforms every rank's
/// params (forEachParam, the loader's code), writes ARTIFACT/weights/
/// rank<R>.safetensors and rewrites manifest.json with packed_weights.
Status packArtifact(const std::string &artifactDir, const PackOptions &options);

/// plan::PackedWeightFile::hash of a file's bytes ("xxh3-64/64MiB:<hex>").
std::string packedFileHash(std::string_view bytes);

/// Replaces ARTIFACT/manifest.json by `manifest` (written to a temporary
/// file, then renamed: a reader never sees half a manifest).
Status rewriteManifest(const std::string &artifactDir,
                       const plan::Manifest &manifest);

} // namespace infer

#endif // INFER_RUNTIME_ENGINE_PACKEDWEIGHTS_H
