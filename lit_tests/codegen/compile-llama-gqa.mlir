// RUN: rm -rf %t && infer compile %fixtures/rand/llama-gqa -o %t --block-size 32 --no-fuse
// RUN: FileCheck %s --input-file=%t/manifest.json --check-prefix=MANIFEST
// RUN: FileCheck %s --input-file=%t/plan.json --check-prefix=PLAN
// RUN: infer inspect %t | FileCheck %s --check-prefix=INSPECT

// --no-fuse keeps one plan step per model-level op, the lowering these checks
// describe; codegen/fuse-numerics.test covers the fused plan.

// The manifest: model info from the `infer.model` attribute, the options as
// given, the KV-cache layout the paging pass chose, and the source weights
// (absolute directory, size and header fingerprint per file).

// MANIFEST:      "compile_options": {
// MANIFEST-NEXT:   "block_size": "32",
// MANIFEST-NEXT:   "dtype": "float32",
// MANIFEST-NEXT:   "fuse": "false",
// MANIFEST-NEXT:   "plan_memory": "true",
// MANIFEST-NEXT:   "target": "cpu"
// MANIFEST:      "kv_cache": {
// MANIFEST-NEXT:   "block_size": 32,
// MANIFEST-NEXT:   "dtype": "f32",
// MANIFEST-NEXT:   "head_dim": 16,
// MANIFEST-NEXT:   "layout": "block_layer_kv_slot_head_dim",
// MANIFEST-NEXT:   "num_kv_heads": 2,
// MANIFEST-NEXT:   "num_layers": 3
// MANIFEST:      "model": {
// MANIFEST-NEXT:   "architecture": "LlamaForCausalLM",
// MANIFEST-NEXT:   "bos_token_id": 1,
// MANIFEST-NEXT:   "eos_token_ids": [
// MANIFEST-NEXT:     2
// MANIFEST-NEXT:   ],
// MANIFEST-NEXT:   "head_dim": 16,
// MANIFEST-NEXT:   "hidden_size": 128,
// MANIFEST-NEXT:   "max_position_embeddings": 4096,
// MANIFEST-NEXT:   "num_heads": 8,
// MANIFEST-NEXT:   "num_kv_heads": 2,
// MANIFEST-NEXT:   "num_layers": 3,
// MANIFEST:        "vocab_size": 512
// MANIFEST:      "plan_file": "plan.json",
// MANIFEST-NEXT: "program_file": "program.mlir",
// MANIFEST-NEXT: "targets": [
// MANIFEST-NEXT:   "cpu"
// MANIFEST-NEXT: ],
// MANIFEST-NEXT: "tokenizer_config_file": "",
// MANIFEST-NEXT: "tokenizer_file": "",
// MANIFEST-NEXT: "weight_files": [
// MANIFEST-NEXT:   {
// MANIFEST-NEXT:     "header_fingerprint": "{{[0-9a-f]+}}",
// MANIFEST-NEXT:     "name": "model.safetensors",
// MANIFEST-NEXT:     "size": 2202200
// MANIFEST:      "weights_dir": "{{/.*}}/rand/llama-gqa"

// The plan: values 0-6 are the batch-contract inputs, 7 the KV cache, then
// params and activations in program order. One step per op; kv_cache_write
// updates value 7 in place and has no results.

// PLAN:      "kv_cache": {
// PLAN-NEXT:   "block_size": 32,
// PLAN:      "num_ranks": 1,
// PLAN:      "outputs": [
// PLAN-NEXT:   [[LOGITS:[0-9]+]]
// PLAN-NEXT: ],

// PLAN:      "op": "embedding",
// PLAN-NEXT: "operands": [
// PLAN-NEXT:   8,
// PLAN-NEXT:   0
// PLAN-NEXT: ],
// PLAN-NEXT: "results": [
// PLAN-NEXT:   9
// PLAN-NEXT: ]

// PLAN:        "epsilon": 1e-06
// PLAN-NEXT: },
// PLAN-NEXT: "op": "rms_norm",

// PLAN:        "factor": 1.0,
// PLAN-NEXT:   "head_dim": 16,
// PLAN-NEXT:   "high_freq_factor": 4.0,
// PLAN-NEXT:   "low_freq_factor": 1.0,
// PLAN-NEXT:   "original_max_position_embeddings": 0,
// PLAN-NEXT:   "rotary_dim": 16,
// PLAN-NEXT:   "scaling": "default",
// PLAN-NEXT:   "theta": 10000.0
// PLAN-NEXT: },
// PLAN-NEXT: "op": "rope",

// PLAN:        "layer": 0
// PLAN-NEXT: },
// PLAN-NEXT: "op": "kv_cache_write",
// PLAN-NEXT: "operands": [
// PLAN-NEXT:   7,
// PLAN-NEXT:   {{[0-9]+}},
// PLAN-NEXT:   {{[0-9]+}},
// PLAN-NEXT:   5
// PLAN-NEXT: ],
// PLAN-NEXT: "results": []

// PLAN:        "head_dim": 16,
// PLAN-NEXT:   "layer": 0,
// PLAN-NEXT:   "num_heads": 8,
// PLAN-NEXT:   "num_kv_heads": 2,
// PLAN-NEXT:   "scale": 0.25,
// PLAN-NEXT:   "sliding_window": 0
// PLAN-NEXT: },
// PLAN-NEXT: "op": "paged_attention",
// PLAN-NEXT: "operands": [
// PLAN-NEXT:   {{[0-9]+}},
// PLAN-NEXT:   7,
// PLAN-NEXT:   4,
// PLAN-NEXT:   3,
// PLAN-NEXT:   2
// PLAN-NEXT: ],

// PLAN:      "op": "silu",
// PLAN:      "op": "mul",
// PLAN:      "op": "add",
// PLAN:      "op": "gather_rows",
// PLAN-NEXT: "operands": [
// PLAN-NEXT:   {{[0-9]+}},
// PLAN-NEXT:   6
// PLAN-NEXT: ],
// PLAN:      "op": "rms_norm",
// PLAN:      "op": "logits",
// PLAN-NOT:  "op":

// PLAN:      "values": [
// PLAN:        "dtype": "i32",
// PLAN-NEXT:   "id": 0,
// PLAN-NEXT:   "kind": "input",
// PLAN-NEXT:   "name": "token_ids",
// PLAN-NEXT:   "shape": [
// PLAN-NEXT:     "T"
// PLAN-NEXT:   ]
// PLAN:        "id": 4,
// PLAN-NEXT:   "kind": "input",
// PLAN-NEXT:   "name": "block_tables",
// PLAN-NEXT:   "shape": [
// PLAN-NEXT:     "B",
// PLAN-NEXT:     "M"
// PLAN-NEXT:   ]
// PLAN:        "dtype": "i64",
// PLAN-NEXT:   "id": 5,
// PLAN-NEXT:   "kind": "input",
// PLAN-NEXT:   "name": "slot_mapping",
// PLAN:        "id": 6,
// PLAN-NEXT:   "kind": "input",
// PLAN-NEXT:   "name": "logits_indices",
// PLAN-NEXT:   "shape": [
// PLAN-NEXT:     "S"
// PLAN-NEXT:   ]
// PLAN:        "dtype": "f32",
// PLAN-NEXT:   "id": 7,
// PLAN-NEXT:   "kind": "kv_cache",
// PLAN-NEXT:   "name": "kv_cache",
// PLAN-NEXT:   "shape": []
// PLAN:        "dtype": "f32",
// PLAN-NEXT:   "id": 8,
// PLAN-NEXT:   "kind": "param",
// PLAN-NEXT:   "name": "model.embed_tokens.weight",
// PLAN-NEXT:   "shape": [
// PLAN-NEXT:     512,
// PLAN-NEXT:     128
// PLAN-NEXT:   ],
// PLAN-NEXT:   "source_file": "model.safetensors",
// PLAN-NEXT:   "source_tensor": "model.embed_tokens.weight",
// PLAN:        "dtype": "f32",
// PLAN-NEXT:   "id": 9,
// PLAN-NEXT:   "kind": "activation",
// PLAN-NEXT:   "name": "%1",
// PLAN-NEXT:   "shape": [
// PLAN-NEXT:     "T",
// PLAN-NEXT:     128
// PLAN-NEXT:   ]
// The logits: S rows of the vocabulary.
// PLAN:        "id": [[LOGITS]],
// PLAN-NEXT:   "kind": "activation",
// PLAN-NEXT:   "name": "%{{[0-9]+}}",
// PLAN-NEXT:   "shape": [
// PLAN-NEXT:     "S",
// PLAN-NEXT:     512
// PLAN-NEXT:   ]
// PLAN-NEXT: }
// PLAN-NEXT: ]

// INSPECT:      model: LlamaForCausalLM, vocab 512, hidden 128, 3 layers, 8 heads / 2 kv heads, head_dim 16
// INSPECT:      kv cache: block_layer_kv_slot_head_dim, 3 layers, 2 kv heads, head_dim 16, block_size 32, f32
// INSPECT:      plan rank 0: 90 values (30 params), 55 steps: add x6 embedding x1 gather_rows x1 kv_cache_write x3 linear x21 logits x1 mul x3 paged_attention x3 rms_norm x7 rope x6 silu x3
// INSPECT:      // program.mlir
// INSPECT-NEXT: module attributes {infer.model = {architecture = "LlamaForCausalLM"
// INSPECT:      func.func @forward(
// INSPECT-SAME:   %[[CACHE:[^:]+]]: !infer.kv_cache<num_layers = 3, num_kv_heads = 2, block_size = 32, head_dim = 16, element_type = f32> {infer.input = "kv_cache"}
// INSPECT:      infer.kv_cache_write %[[CACHE]]
// INSPECT:      infer.paged_attention
// INSPECT-NOT:  infer.attention
