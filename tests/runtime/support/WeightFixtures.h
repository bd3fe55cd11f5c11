//===- WeightFixtures.h - Artifacts for the weight loader -------*- C++ -*-===//
//
// llama-gqa artifacts for the loader's tests, host (tests/runtime/engine)
// and device (tests/runtime/cuda): the checkpoint in bf16, fp8 weights, and
// params with the transforms of a tensor-parallel shard.
//
//===----------------------------------------------------------------------===//

#ifndef INFER_TESTS_RUNTIME_SUPPORT_WEIGHTFIXTURES_H
#define INFER_TESTS_RUNTIME_SUPPORT_WEIGHTFIXTURES_H

#include "runtime/engine/Artifact.h"

#include <ostream>
#include <string>
#include <vector>

namespace infer::testing {

/// Writes `from`'s model directory to `to` with every F32 tensor of its
/// checkpoint rounded to BF16 (what real checkpoints hold).
Status writeBf16Checkpoint(const std::string &from, const std::string &to);

/// Linear and logits weights as FP8 E4M3 with `granularity` (what
/// infer-quantize-fp8 makes).
void quantizeWeights(Artifact &artifact,
                     const std::string &granularity = "per-channel");

/// Appends params (used by no step: the plan is for the loader, not for
/// running) with the transforms of a tensor-parallel shard, of `dtype` or
/// quantized with `quantize` ("": not; per-tensor scales per merged part):
///
///   shard.layers.0.qkv        [96, 128]  q rows 64..127, k and v rows 16..31
///   shard.layers.0.gate_up    [256, 128] rows 128..255 of gate and of up
///   shard.layers.0.o          [128, 64]  o_proj columns 64..127
///   shard.layers.0.down       [128, 128] down_proj columns 128..255
///   shard.layers.1.qk_rows    [96, 128]  rows 48..143 of q ++ k
///   shard.layers.1.kv_columns [64, 64]   columns 32..95 of k ++ v
void addTensorParallelShards(Artifact &artifact, plan::DType dtype,
                             const std::string &quantize);

/// One artifact of the loader's tests: its checkpoint (the fixture's f32 or
/// a bf16 copy), param dtype, fp8 granularity ("" for none) and whether its
/// artifact has tensor-parallel shards (addTensorParallelShards).
struct LoaderCase {
  std::string name;
  bool bf16Checkpoint = false;
  plan::DType dtype = plan::DType::kF32;
  std::string quantize;
  bool tensorParallel = false;
};

void PrintTo(const LoaderCase &c, std::ostream *os);

/// f32, bf16 (cast at load), bf16 from a bf16 checkpoint (no cast), fp8
/// per-channel and per-tensor (with parts), each also as shards.
std::vector<LoaderCase> loaderCases();

/// Writes `c`'s checkpoint to dir/model (from the llama-gqa directory
/// `fixture`) and its artifact, packed (packArtifact), to dir/artifact, and
/// returns the loaded artifact.
StatusOr<Artifact> writeLoaderCase(const LoaderCase &c,
                                   const std::string &fixture,
                                   const std::string &dir);

/// The bytes a backend reads of a materialized param: its elements, then an
/// fp8 param's row scales.
std::string paramBytes(const HostTensor &tensor);

} // namespace infer::testing

#endif // INFER_TESTS_RUNTIME_SUPPORT_WEIGHTFIXTURES_H
