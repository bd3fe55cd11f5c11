//===- FuzzInferOpt.cpp - libFuzzer: IR through the infer-opt passes ------===//
//
// The first byte picks a pipeline, the rest is MLIR source: parse (the
// dialect's verifiers run), then the pipeline (each pass and the verifier
// after it). Diagnostics are expected; a crash is a bug.
//
//===----------------------------------------------------------------------===//

#include "ir/InferDialect.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Tensor/IR/Tensor.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassRegistry.h"
#include "passes/Passes.h"

#include <cstdint>
#include <iterator>
#include <string>

namespace {

/// What the lit tests run, one pipeline each.
constexpr const char *kPipelines[] = {
    "func.func(infer-page-kv-cache)",
    "func.func(infer-page-kv-cache{block-size=8}),"
    "infer-streaming-kv{sink-tokens=4 window=32}",
    "func.func(infer-assign-precision{activation-type=bf16})",
    "func.func(infer-quantize-fp8{weights=e4m3 granularity=per-channel "
    "kv-cache=e5m2})",
    "func.func(infer-fuse)",
    "func.func(infer-plan-memory)",
    "infer-shard-tensor-parallel{tp=2}",
    "infer-deploy-pipeline{block-size=32}",
};

mlir::MLIRContext &context() {
  static mlir::MLIRContext *ctx = [] {
    mlir::DialectRegistry registry;
    registry.insert<mlir::arith::ArithDialect, mlir::func::FuncDialect,
                    mlir::infer::InferDialect, mlir::tensor::TensorDialect>();
    mlir::infer::registerInferPasses();
    mlir::infer::registerInferPipelines();
    auto *c = new mlir::MLIRContext(registry);
    c->loadAllAvailableDialects();
    c->disableMultithreading();
    return c;
  }();
  return *ctx;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size == 0)
    return 0;
  mlir::MLIRContext &ctx = context();
  mlir::ScopedDiagnosticHandler quiet(
      &ctx, [](mlir::Diagnostic &) { return mlir::success(); });
  // MLIR's lexer reads the byte after the text to find its end: the text
  // must be NUL-terminated, as files read through llvm::MemoryBuffer are.
  const std::string source(reinterpret_cast<const char *>(data) + 1, size - 1);
  mlir::OwningOpRef<mlir::ModuleOp> module =
      mlir::parseSourceString<mlir::ModuleOp>(source, &ctx);
  if (!module)
    return 0;
  mlir::PassManager pm(&ctx);
  const char *pipeline = kPipelines[data[0] % std::size(kPipelines)];
  if (mlir::failed(mlir::parsePassPipeline(pipeline, pm)))
    __builtin_trap();
  (void)pm.run(*module);
  return 0;
}
