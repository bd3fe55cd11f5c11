// Import errors of the family and rope variants name the config.json key.

// RUN: rm -rf %t && mkdir -p %t
// RUN: %python -c "import json, sys, os; d = sys.argv[1]; c = json.load(open(d + '/config.json')); c['rope_parameters']['long_factor'] = [1.0, 2.0]; os.makedirs(sys.argv[2]); json.dump(c, open(sys.argv[2] + '/config.json', 'w'), indent=2)" %S/../../tests/fixtures/families/phi3-longrope %t/long-factor
// RUN: ln -s %S/../../tests/fixtures/families/phi3-longrope/model.safetensors %t/long-factor/model.safetensors
// RUN: not infer import %t/long-factor 2>&1 | FileCheck %s --check-prefix=LONG-FACTOR
// LONG-FACTOR: long-factor/config.json:{{[0-9]+}}:{{[0-9]+}}: 'rope_parameters.long_factor' has 2 entries; longrope needs one per rotary frequency, head_dim * partial_rotary_factor / 2 = 8

// RUN: %python -c "import json, sys, os; d = sys.argv[1]; c = json.load(open(d + '/config.json')); c['rope_parameters']['truncate'] = False; os.makedirs(sys.argv[2]); json.dump(c, open(sys.argv[2] + '/config.json', 'w'), indent=2)" %S/../../tests/fixtures/families/llama-yarn %t/truncate
// RUN: ln -s %S/../../tests/fixtures/families/llama-yarn/model.safetensors %t/truncate/model.safetensors
// RUN: not infer import %t/truncate 2>&1 | FileCheck %s --check-prefix=TRUNCATE
// TRUNCATE: truncate/config.json:{{[0-9]+}}:{{[0-9]+}}: 'rope_parameters.truncate' = false is not supported (yarn with truncate = true only)

// RUN: %python -c "import json, sys, os; d = sys.argv[1]; c = json.load(open(d + '/config.json')); c['partial_rotary_factor'] = 0.1875; c['rope_parameters']['partial_rotary_factor'] = 0.1875; os.makedirs(sys.argv[2]); json.dump(c, open(sys.argv[2] + '/config.json', 'w'), indent=2)" %S/../../tests/fixtures/families/phi3-partial-rotary %t/partial
// RUN: ln -s %S/../../tests/fixtures/families/phi3-partial-rotary/model.safetensors %t/partial/model.safetensors
// RUN: not infer import %t/partial 2>&1 | FileCheck %s --check-prefix=PARTIAL
// PARTIAL: partial/config.json:{{[0-9]+}}:{{[0-9]+}}: 'partial_rotary_factor' = 1.875000e-01 gives a rotary dimension of 3 of head_dim 16; it must be even and in (0, head_dim]

// RUN: %python -c "import json, sys, os; d = sys.argv[1]; c = json.load(open(d + '/config.json')); c['rope_parameters']['rope_type'] = 'ntk'; os.makedirs(sys.argv[2]); json.dump(c, open(sys.argv[2] + '/config.json', 'w'), indent=2)" %S/../../tests/fixtures/families/llama-dynamic-ntk %t/ntk
// RUN: ln -s %S/../../tests/fixtures/families/llama-dynamic-ntk/model.safetensors %t/ntk/model.safetensors
// RUN: not infer import %t/ntk 2>&1 | FileCheck %s --check-prefix=NTK
// NTK: ntk/config.json:{{[0-9]+}}:{{[0-9]+}}: rope type 'ntk' ('rope_parameters.rope_type') is not supported (supported: default, linear, llama3, yarn, longrope, dynamic)

// RUN: %python -c "import json, sys, os; d = sys.argv[1]; c = json.load(open(d + '/config.json')); del c['rope_parameters']['factor']; os.makedirs(sys.argv[2]); json.dump(c, open(sys.argv[2] + '/config.json', 'w'), indent=2)" %S/../../tests/fixtures/families/llama-dynamic-ntk %t/dynamic-factor
// RUN: ln -s %S/../../tests/fixtures/families/llama-dynamic-ntk/model.safetensors %t/dynamic-factor/model.safetensors
// RUN: not infer import %t/dynamic-factor 2>&1 | FileCheck %s --check-prefix=DYNAMIC-FACTOR
// DYNAMIC-FACTOR: dynamic-factor/config.json:{{[0-9]+}}:{{[0-9]+}}: 'rope_parameters.factor' is missing

// RUN: %python -c "import json, sys, os; d = sys.argv[1]; c = json.load(open(d + '/config.json')); c['attn_logit_softcapping'] = -1.0; os.makedirs(sys.argv[2]); json.dump(c, open(sys.argv[2] + '/config.json', 'w'), indent=2)" %S/../../tests/fixtures/families/gemma2 %t/softcap
// RUN: ln -s %S/../../tests/fixtures/families/gemma2/model.safetensors %t/softcap/model.safetensors
// RUN: not infer import %t/softcap 2>&1 | FileCheck %s --check-prefix=SOFTCAP
// SOFTCAP: softcap/config.json:{{[0-9]+}}:{{[0-9]+}}: 'attn_logit_softcapping' must be positive (or null), got -1.000000e+00

// RUN: %python -c "import json, sys, os; d = sys.argv[1]; c = json.load(open(d + '/config.json')); c['hidden_activation'] = 'relu'; os.makedirs(sys.argv[2]); json.dump(c, open(sys.argv[2] + '/config.json', 'w'), indent=2)" %S/../../tests/fixtures/families/gemma3 %t/act
// RUN: ln -s %S/../../tests/fixtures/families/gemma3/model.safetensors %t/act/model.safetensors
// RUN: not infer import %t/act 2>&1 | FileCheck %s --check-prefix=ACT
// ACT: act/config.json:{{[0-9]+}}:{{[0-9]+}}: unsupported 'hidden_activation' 'relu' (supported: silu, swish, gelu, gelu_pytorch_tanh, gelu_new)
