// Import errors name what is wrong and where: the config.json key (with its
// line), or the checkpoint tensor with expected and actual shape.

// RUN: rm -rf %t && mkdir -p %t
// RUN: cp %fixtures/rand/llama-gqa/config.json %t/good-config.json
// RUN: ln -s %fixtures/rand/llama-gqa/model.safetensors %t/good.safetensors

// RUN: mkdir %t/arch && ln -s %t/good.safetensors %t/arch/model.safetensors
// RUN: sed 's/LlamaForCausalLM/GPT2LMHeadModel/' %t/good-config.json > %t/arch/config.json
// RUN: not infer import %t/arch 2>&1 | FileCheck %s --check-prefix=ARCH
// ARCH: arch/config.json:2:3: unsupported architecture 'GPT2LMHeadModel' (supported: LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM, Phi3ForCausalLM, Gemma2ForCausalLM, Gemma3ForCausalLM)

// RUN: mkdir %t/missing-key && ln -s %t/good.safetensors %t/missing-key/model.safetensors
// RUN: sed '/"hidden_size"/d' %t/good-config.json > %t/missing-key/config.json
// RUN: not infer import %t/missing-key 2>&1 | FileCheck %s --check-prefix=MISSING-KEY
// MISSING-KEY: missing-key/config.json:1:1: 'hidden_size' is missing from config.json

// RUN: mkdir %t/wrong-type && ln -s %t/good.safetensors %t/wrong-type/model.safetensors
// RUN: sed 's/"num_attention_heads": 8/"num_attention_heads": "8"/' %t/good-config.json > %t/wrong-type/config.json
// RUN: not infer import %t/wrong-type 2>&1 | FileCheck %s --check-prefix=WRONG-TYPE
// WRONG-TYPE: wrong-type/config.json:18:3: 'num_attention_heads' in config.json must be an integer, not a string

// RUN: mkdir %t/nested && ln -s %t/good.safetensors %t/nested/model.safetensors
// RUN: sed 's/"rope_theta": 10000.0/"rope_theta": "fast"/' %t/good-config.json > %t/nested/config.json
// RUN: not infer import %t/nested 2>&1 | FileCheck %s --check-prefix=NESTED
// NESTED: nested/config.json:25:5: 'rope_parameters.rope_theta' in config.json must be a number, not a string

// RUN: mkdir %t/rope-type && ln -s %t/good.safetensors %t/rope-type/model.safetensors
// RUN: sed 's/"rope_type": "default"/"rope_type": "ntk"/' %t/good-config.json > %t/rope-type/config.json
// RUN: not infer import %t/rope-type 2>&1 | FileCheck %s --check-prefix=ROPE-TYPE
// ROPE-TYPE: rope-type/config.json:26:5: rope type 'ntk' ('rope_parameters.rope_type') is not supported (supported: default, linear, llama3, yarn, longrope, dynamic)

// RUN: mkdir %t/not-json && ln -s %t/good.safetensors %t/not-json/model.safetensors
// RUN: sed 's/"vocab_size": 512/"vocab_size": 512,,/' %t/good-config.json > %t/not-json/config.json
// RUN: not infer import %t/not-json 2>&1 | FileCheck %s --check-prefix=NOT-JSON
// NOT-JSON: not-json/config.json:1:1: config.json is not valid JSON: [31:21, byte={{[0-9]+}}]: Expected object key

// RUN: mkdir %t/heads && ln -s %t/good.safetensors %t/heads/model.safetensors
// RUN: sed 's/"num_key_value_heads": 2/"num_key_value_heads": 3/' %t/good-config.json > %t/heads/config.json
// RUN: not infer import %t/heads 2>&1 | FileCheck %s --check-prefix=HEADS
// HEADS: heads/config.json:20:3: 'num_attention_heads' (8) must be a multiple of 'num_key_value_heads' (3)

// A checkpoint without one tensor, and one with a tensor of the wrong shape
// (written by Inputs/rewrite_safetensors.py, zero-filled).
// RUN: mkdir %t/missing-tensor && cp %t/good-config.json %t/missing-tensor/config.json
// RUN: %python %S/Inputs/rewrite_safetensors.py %t/good.safetensors %t/missing-tensor/model.safetensors --drop model.layers.1.self_attn.v_proj.weight
// RUN: not infer import %t/missing-tensor 2>&1 | FileCheck %s --check-prefix=MISSING-TENSOR
// MISSING-TENSOR: missing-tensor/model.safetensors: tensor 'model.layers.1.self_attn.v_proj.weight' is missing from the checkpoint (model.safetensors)

// RUN: mkdir %t/shape && cp %t/good-config.json %t/shape/config.json
// RUN: %python %S/Inputs/rewrite_safetensors.py %t/good.safetensors %t/shape/model.safetensors --shape model.layers.2.mlp.up_proj.weight=256,64
// RUN: not infer import %t/shape 2>&1 | FileCheck %s --check-prefix=SHAPE
// SHAPE: shape/model.safetensors: tensor 'model.layers.2.mlp.up_proj.weight' has shape [256, 64] but config.json implies [256, 128]

// RUN: mkdir %t/dtype && cp %t/good-config.json %t/dtype/config.json
// RUN: %python %S/Inputs/rewrite_safetensors.py %t/good.safetensors %t/dtype/model.safetensors --dtype model.norm.weight=I32
// RUN: not infer import %t/dtype 2>&1 | FileCheck %s --check-prefix=DTYPE
// DTYPE: dtype/model.safetensors: tensor 'model.norm.weight' has dtype I32; weights must be F32, F16 or BF16

// Untied config without lm_head.weight.
// RUN: mkdir %t/no-head && cp %t/good-config.json %t/no-head/config.json
// RUN: %python %S/Inputs/rewrite_safetensors.py %t/good.safetensors %t/no-head/model.safetensors --drop lm_head.weight
// RUN: not infer import %t/no-head 2>&1 | FileCheck %s --check-prefix=NO-HEAD
// NO-HEAD:      no-head/model.safetensors: tensor 'lm_head.weight' is missing from the checkpoint (model.safetensors)
// NO-HEAD-NEXT: no-head/model.safetensors: note: config.json has tie_word_embeddings = false
