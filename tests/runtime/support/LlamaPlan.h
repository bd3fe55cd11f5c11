//===- LlamaPlan.h - Hand-built llama plans for tests -----------*- C++ -*-===//
//
// Builds, without the compiler, the plan the compiler is expected to produce
// for a Llama / Mistral / Qwen2 model directory, so the runtime can be
// checked against Hugging Face's logits on its own.
//
//===----------------------------------------------------------------------===//

#ifndef INFER_TESTS_RUNTIME_SUPPORT_LLAMAPLAN_H
#define INFER_TESTS_RUNTIME_SUPPORT_LLAMAPLAN_H

#include "runtime/backend/Backend.h"
#include "runtime/engine/Artifact.h"
#include "runtime/engine/Engine.h"

#include <memory>
#include <string>

namespace infer::testing {

/// A plan + manifest for `modelDir` whose weights_dir is `modelDir`, its
/// activations, float params and KV cache of `dtype` (withActivationType;
/// bf16 is what `infer compile --target cuda` makes and the CUDA backend
/// runs).
StatusOr<Artifact> buildLlamaArtifact(const std::string &modelDir,
                                      int64_t blockSize = 16,
                                      plan::DType dtype = plan::DType::kF32);

/// Writes the artifact to `dir` like the compiler would: manifest.json,
/// plan.json, a placeholder program.mlir, and the model's tokenizer files.
Status writeTestArtifact(const Artifact &artifact, const std::string &dir);

/// The artifact's params loaded and a CPU backend of `numBlocks` blocks.
StatusOr<std::unique_ptr<Backend>> createTestBackend(const Artifact &artifact,
                                                     int64_t numBlocks,
                                                     int numThreads = 0);

/// `plan` as infer-assign-precision makes it for `dtype`: every activation
/// but the logits, every float param and the KV cache (unless fp8) of that
/// dtype, format version 2.
plan::Plan withActivationType(plan::Plan plan, plan::DType dtype);

/// Rewrites each `add` of a `linear` result used only there as
/// infer-fuse-residual does: a linear_residual(x, w, other addend, bias?)
/// step in the add's place (the linear's result value stays, unused).
/// Returns how many it rewrote.
int fuseResidualSteps(plan::RankPlan &rank);

/// A new activation value of `like`'s dtype and shape (`cols` columns
/// where given), named "<like's name>.unfused<id>", in its own memory (no
/// workspace offset): for tests that split a fused step. Returns its id.
int addActivationLike(plan::RankPlan &rank, int like, int64_t cols = -1);

/// The inverse, for plans compiled with infer-fuse-residual: each
/// linear_residual(x, w, r, bias?) step becomes linear(x, w, bias?) into a
/// new activation of its result's type and shape, then add(r, product) into
/// its result. Returns how many it rewrote.
int unfuseResidualSteps(plan::RankPlan &rank);

/// A buildLlamaArtifact plan with infer-fuse's rope steps: each layer's
/// rope of k and its kv_cache_write become rope_kv_cache_write, and with
/// `queries` the rope of q that the layer's paged_attention reads joins them
/// in rope_qkv_cache_write (where the cache write was, both ropes gone).
plan::Plan withFusedRopes(plan::Plan plan, bool queries);

/// max |a - b| / max |b| over equal-sized arrays.
double maxRelativeError(const float *actual, const float *expected, int64_t n);

} // namespace infer::testing

#endif // INFER_TESTS_RUNTIME_SUPPORT_LLAMAPLAN_H
