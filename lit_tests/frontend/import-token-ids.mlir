// Token ids: config.json's eos_token_id may be an int or a list;
// generation_config.json's eos ids are merged in (HF generate stops on the
// union), and its bos/pad fill in what config.json leaves null.

// RUN: rm -rf %t && mkdir -p %t
// RUN: ln -s %fixtures/rand/llama-gqa/model.safetensors %t/model.safetensors
// RUN: %python -c "import json, sys; c = json.load(open(sys.argv[1])); c.update(bos_token_id=None, eos_token_id=[2, 5]); json.dump(c, open(sys.argv[2], 'w'), indent=2)" %fixtures/rand/llama-gqa/config.json %t/config.json
// RUN: %python -c "import json, sys; json.dump({'bos_token_id': 1, 'eos_token_id': [5, 7], 'pad_token_id': 0}, open(sys.argv[1], 'w'))" %t/generation_config.json
// RUN: infer import %t | FileCheck %s

// CHECK: infer.model = {architecture = "LlamaForCausalLM", bos_token_id = 1 : i64, eos_token_ids = [2, 5, 7],
// CHECK-SAME: pad_token_id = 0 : i64
