// What `infer compile` writes besides the plan steps, per model feature.

// Tokenizer and generation config files are copied so the artifact runs
// without the model directory's text files; on the cpu target the bf16
// checkpoint's params are f32 (converted at load; tools/compile-dtype.test
// covers --dtype).
// RUN: rm -rf %t && mkdir -p %t
// RUN: infer compile %fixtures/models/tiny-pycode-target -o %t/pycode
// RUN: ls %t/pycode | FileCheck %s --check-prefix=FILES
// RUN: FileCheck %s --input-file=%t/pycode/manifest.json --check-prefix=TOKENIZER
// RUN: FileCheck %s --input-file=%t/pycode/plan.json --check-prefix=PARAM
// FILES:      generation_config.json
// FILES-NEXT: manifest.json
// FILES-NEXT: plan.json
// FILES-NEXT: program.mlir
// FILES-NEXT: tokenizer.json
// FILES-NEXT: tokenizer_config.json
// TOKENIZER:      "compile_options": {
// TOKENIZER-NEXT:   "block_size": "16",
// TOKENIZER-NEXT:   "dtype": "float32",
// TOKENIZER:      "tokenizer_config_file": "tokenizer_config.json",
// TOKENIZER-NEXT: "tokenizer_file": "tokenizer.json",
// PARAM:      "kind": "kv_cache",
// PARAM:      "dtype": "f32",
// PARAM-NEXT: "id": 8,
// PARAM-NEXT: "kind": "param",
// PARAM-NEXT: "name": "model.embed_tokens.weight",

// Tied embeddings: one param serves the embedding and the logits.
// RUN: infer compile %fixtures/rand/llama-mha-tied -o %t/tied
// RUN: FileCheck %s --input-file=%t/tied/plan.json --check-prefix=TIED
// TIED:      "op": "embedding",
// TIED-NEXT: "operands": [
// TIED-NEXT:   [[TABLE:[0-9]+]],
// TIED:      "op": "logits",
// TIED-NEXT: "operands": [
// TIED-NEXT:   {{[0-9]+}},
// TIED-NEXT:   [[TABLE]]
// TIED-NOT:  lm_head
// TIED:      "name": "model.embed_tokens.weight",
// TIED-NOT:  "name": "model.embed_tokens.weight",

// Sliding window and rope scaling reach the step attributes.
// RUN: infer compile %fixtures/rand/mistral-swa -o %t/swa
// RUN: FileCheck %s --input-file=%t/swa/plan.json --check-prefix=SWA
// SWA:      "sliding_window": 16
// SWA-NEXT: },
// SWA-NEXT: "op": "paged_attention",
// RUN: infer compile %S/../../tests/fixtures/llama3-rope-scaling -o %t/llama3
// RUN: FileCheck %s --input-file=%t/llama3/plan.json --check-prefix=LLAMA3
// LLAMA3:      "factor": 8.0,
// LLAMA3-NEXT: "head_dim": 16,
// LLAMA3-NEXT: "high_freq_factor": 4.0,
// LLAMA3-NEXT: "layer": 0,
// LLAMA3-NEXT: "low_freq_factor": 1.0,
// LLAMA3-NEXT: "original_max_position_embeddings": 8192,
// LLAMA3-NEXT: "rotary_dim": 16,
// LLAMA3-NEXT: "scaling": "llama3",
// LLAMA3-NEXT: "theta": 500000.0
// LLAMA3-NEXT: },
// LLAMA3-NEXT: "op": "rope_qkv_cache_write",

// Qwen2 q/k/v biases are the third operand of linear.
// RUN: infer compile %S/../../tests/fixtures/qwen2-bias-tied -o %t/qwen2
// RUN: FileCheck %s --input-file=%t/qwen2/plan.json --check-prefix=BIAS
// BIAS:      "op": "linear",
// BIAS-NEXT: "operands": [
// BIAS-NEXT:   {{[0-9]+}},
// BIAS-NEXT:   {{[0-9]+}},
// BIAS-NEXT:   {{[0-9]+}}
// BIAS-NEXT: ],

// Errors: an unknown target (--target cuda: compile-cuda.test); import
// errors come through.
// RUN: not infer compile %fixtures/rand/llama-gqa -o %t/rocm --target rocm 2>&1 | FileCheck %s --check-prefix=TARGET
// TARGET: infer compile: error: --target must be cpu or cuda
// RUN: mkdir %t/bad && ln -s %fixtures/rand/llama-gqa/model.safetensors %t/bad/model.safetensors
// RUN: sed 's/"hidden_size": 128/"hidden_size": 96/' %fixtures/rand/llama-gqa/config.json > %t/bad/config.json
// RUN: not infer compile %t/bad -o %t/bad-artifact 2>&1 | FileCheck %s --check-prefix=BAD
// RUN: not ls %t/bad-artifact/manifest.json
// BAD: infer compile: error: {{.*}}bad/model.safetensors: tensor 'model.embed_tokens.weight' has shape [512, 128] but config.json implies [512, 96]
