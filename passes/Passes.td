//===- Passes.td - infer transformation passes -------------*- tablegen -*-===//
//
// Declares the passes that rewrite infer IR on its way to a deployable plan.
//
//===----------------------------------------------------------------------===//

#ifndef INFER_PASSES_PASSES_TD
#define INFER_PASSES_PASSES_TD

include "mlir/Pass/PassBase.td"

//===----------------------------------------------------------------------===//
// KV cache
//===----------------------------------------------------------------------===//

def PageKVCachePass : Pass<"infer-page-kv-cache", "::mlir::func::FuncOp"> {
  let summary = "Turns logical attention into paged KV-cache writes and reads";
  let description = [{
    Gives every function that contains `infer.attention` an explicit paged KV
    cache. The function must bind the `slot_mapping`, `block_tables` and
    `context_lens` inputs of the batch contract (arguments marked with
    `infer.input`); the pass appends a `!infer.kv_cache` argument marked
    `{infer.input = "kv_cache"}` and rewrites each attention, in program
    order, into an `infer.kv_cache_write` of the new tokens' keys and values
    followed by an `infer.paged_attention` reading the updated cache. The
    cache value is threaded from one layer to the next.

    The cache has `max(#attention ops, max layer + 1)` layers; its head
    count, head size and element type come from the attention ops (their key
    element type), which must agree. Each attention op must own a distinct
    layer and sit in the function's entry block.

    Before:

    ```mlir
    func.func @forward(%qsl: tensor<?xi32> {infer.input = "query_start_loc"},
                       %lens: tensor<?xi32> {infer.input = "context_lens"},
                       %tables: tensor<?x?xi32> {infer.input = "block_tables"},
                       %slots: tensor<?xi64> {infer.input = "slot_mapping"},
                       %q: tensor<?x384xf32>, %k: tensor<?x128xf32>,
                       %v: tensor<?x128xf32>) -> tensor<?x384xf32> {
      %o = infer.attention %q, %k, %v, %qsl
          {layer = 0 : i64, num_heads = 6 : i64, num_kv_heads = 2 : i64,
           head_dim = 64 : i64, scale = 1.250000e-01 : f64,
           sliding_window = 0 : i64}
          : tensor<?x384xf32>, tensor<?x128xf32>, tensor<?x128xf32>,
            tensor<?xi32> -> tensor<?x384xf32>
      return %o : tensor<?x384xf32>
    }
    ```

    After `--infer-page-kv-cache="block-size=16"`:

    ```mlir
    func.func @forward(..., %cache: !infer.kv_cache<num_layers = 1,
                                num_kv_heads = 2, block_size = 16,
                                head_dim = 64, element_type = f32>
                            {infer.input = "kv_cache"}) -> tensor<?x384xf32> {
      %c = infer.kv_cache_write %cache, %k, %v, %slots {layer = 0 : i64} : ...
      %o = infer.paged_attention %q, %c, %tables, %lens, %qsl
          {layer = 0 : i64, num_heads = 6 : i64, num_kv_heads = 2 : i64,
           head_dim = 64 : i64, scale = 1.250000e-01 : f64,
           sliding_window = 0 : i64} : ...
      return %o : tensor<?x384xf32>
    }
    ```
  }];

  let options = [
    Option<"blockSize", "block-size", "int64_t", /*default=*/"16",
           "Tokens per KV-cache block; a positive power of two">
  ];
  let dependentDialects = ["::mlir::infer::InferDialect"];
}

#endif // INFER_PASSES_PASSES_TD
