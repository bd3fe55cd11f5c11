// RUN: infer import %S/../../tests/fixtures/llama3-rope-scaling | FileCheck %s --check-prefix=LLAMA3
// RUN: infer import %S/../../tests/fixtures/llama-linear-rope | FileCheck %s --check-prefix=LINEAR

// Older configs spell rope as top-level `rope_theta` + `rope_scaling` with
// `type` (or `rope_type`); the importer reads both spellings the same way.
// RUN: rm -rf %t && mkdir -p %t
// RUN: ln -s %fixtures/rand/llama-gqa/model.safetensors %t/model.safetensors
// RUN: %python -c "import json, sys; c = json.load(open(sys.argv[1])); del c['rope_parameters']; c['rope_theta'] = 250000.0; c['rope_scaling'] = {'type': 'linear', 'factor': 2.0}; json.dump(c, open(sys.argv[2], 'w'), indent=2)" %fixtures/rand/llama-gqa/config.json %t/config.json
// RUN: infer import %t | FileCheck %s --check-prefix=LEGACY

// LLAMA3: infer.rope {{.*}}rope = #infer.rope<theta = 5.000000e+05, kind = llama3, factor = 8.000000e+00, original_max_position_embeddings = 8192>

// LINEAR: infer.rope {{.*}}rope = #infer.rope<theta = 1.000000e+04, kind = linear, factor = 4.000000e+00>

// LEGACY: infer.rope {{.*}}rope = #infer.rope<theta = 2.500000e+05, kind = linear, factor = 2.000000e+00>
