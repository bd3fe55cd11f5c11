//===- InferBase.td - infer dialect definition -------------*- tablegen -*-===//
//
// Defines the `infer` dialect and the base class of its operations.
//
//===----------------------------------------------------------------------===//

#ifndef INFER_IR_INFERBASE_TD
#define INFER_IR_INFERBASE_TD

include "mlir/IR/OpBase.td"

def Infer_Dialect : Dialect {
  let name = "infer";
  let cppNamespace = "::mlir::infer";
  let summary = "Transformer LLM inference at the model level";
  let description = [{
    The `infer` dialect describes the forward step of a transformer language
    model over one flat batch of tokens (continuous batching without
    padding). All operations have value semantics; the KV cache, once the
    `infer-page-kv-cache` pass has made it explicit, is an SSA value threaded
    through `infer.kv_cache_write`.

    A forward function marks its batch-contract arguments with the
    `infer.input` argument attribute, and the module carries the model
    configuration in the `infer.model` dictionary attribute. A
    tensor-parallel program records its number of ranks in `infer.tp`:

    ```mlir
    module attributes {infer.model = {architecture = "LlamaForCausalLM",
                                      num_layers = 2 : i64},
                       infer.tp = 2 : i64} {
      func.func @forward(%token_ids: tensor<?xi32> {infer.input = "token_ids"},
                         %positions: tensor<?xi32> {infer.input = "positions"})
          -> tensor<?x4096xf32>
    }
    ```

    Precision. Element types say what is stored: the activations an op
    reads and writes share one float element type (f32, bf16 or f16), and
    only `infer.cast` changes it. Parameters (weights, norm weights, biases,
    embedding tables) may be of another float type, which the op converts as
    it reads them, and projection weights and the KV cache may be fp8. What
    an op computes in between is fp32 unless its description says otherwise:
    each op loads its operands to fp32 and rounds each result once to its
    element type (round to nearest even). The importer writes f32
    activations and the checkpoint's weight types; `infer-assign-precision`
    chooses the types a target runs.
  }];

  let useDefaultTypePrinterParser = 1;
  let useDefaultAttributePrinterParser = 1;
  let hasOperationAttrVerify = 1;
  let hasRegionArgAttrVerify = 1;

  let extraClassDeclaration = [{
    /// Name of the argument attribute that binds a function argument to a
    /// batch-contract input.
    static constexpr ::llvm::StringLiteral kInputAttrName = "infer.input";
    /// Name of the module attribute that holds the model configuration.
    static constexpr ::llvm::StringLiteral kModelAttrName = "infer.model";
    /// Name of the module attribute that holds the number of tensor-parallel
    /// ranks of an SPMD program (absent: one rank).
    static constexpr ::llvm::StringLiteral kTensorParallelAttrName = "infer.tp";
    /// Name of the module attribute (`#infer.streaming`) that makes the KV
    /// cache keep attention sinks and a rolling window (infer-streaming-kv).
    static constexpr ::llvm::StringLiteral kStreamingAttrName =
        "infer.streaming";

    void registerAttributes();
    void registerTypes();
  }];
}

/// Base class of every `infer` operation.
class Infer_Op<string mnemonic, list<Trait> traits = []>
    : Op<Infer_Dialect, mnemonic, traits>;

#endif // INFER_IR_INFERBASE_TD
