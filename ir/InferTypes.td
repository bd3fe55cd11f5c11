//===- InferTypes.td - infer dialect types -----------------*- tablegen -*-===//
//
// Types of the infer dialect.
//
//===----------------------------------------------------------------------===//

#ifndef INFER_IR_INFERTYPES_TD
#define INFER_IR_INFERTYPES_TD

include "ir/InferBase.td"
include "mlir/IR/AttrTypeBase.td"

class Infer_Type<string name, string typeMnemonic, list<Trait> traits = []>
    : TypeDef<Infer_Dialect, name, traits> {
  let mnemonic = typeMnemonic;
}

//===----------------------------------------------------------------------===//
// KV cache
//===----------------------------------------------------------------------===//

def Infer_KVCacheType : Infer_Type<"KVCache", "kv_cache"> {
  let summary = "Paged key/value cache of all attention layers";
  let description = [{
    The paged KV cache of one rank: a pool of blocks, each holding the keys
    and values of `block_size` consecutive tokens of one sequence for every
    layer. Sequences address their blocks through block tables; the pool size
    (number of blocks) is chosen by the runtime and is not part of the type.

    ```
      block b:  layer 0 .. num_layers-1
                  ├─ K [block_size, num_kv_heads, head_dim]
                  └─ V [block_size, num_kv_heads, head_dim]
      slot s = block * block_size + offset
    ```

    All parameters must be positive and the element type must be a float.
    An 8-bit element type stores one byte per element (`infer-quantize-fp8`):

    - `f8E5M2`: each key/value element is its saturating E5M2 code, no scale
      (as Colossal-Inference's fp8 cache);
    - `f8E4M3FN`: each head's `head_dim` keys (or values) of one token in one
      layer share a dynamic fp32 scale `amax / 448`, computed when the cache
      write quantizes them and stored beside the codes; attention reads
      `decode(code) * scale`. A per-(token, head) scale needs no calibration
      (vLLM's static per-layer scales do) and follows outlier heads.

    Other 8-bit floats are rejected.

    ```mlir
    !infer.kv_cache<num_layers = 8, num_kv_heads = 2, block_size = 16,
                    head_dim = 64, element_type = f32>
    ```
  }];

  let parameters = (ins
    "int64_t":$numLayers,
    "int64_t":$numKVHeads,
    "int64_t":$blockSize,
    "int64_t":$headDim,
    "::mlir::Type":$elementType
  );
  let assemblyFormat = [{
    `<` `num_layers` `=` $numLayers `,` `num_kv_heads` `=` $numKVHeads `,`
    `block_size` `=` $blockSize `,` `head_dim` `=` $headDim `,`
    `element_type` `=` $elementType `>`
  }];
  let genVerifyDecl = 1;

  let extraClassDeclaration = [{
    /// Width of one token's keys (or values) in one layer.
    int64_t getKVWidth() const { return getNumKVHeads() * getHeadDim(); }
  }];
}

#endif // INFER_IR_INFERTYPES_TD
