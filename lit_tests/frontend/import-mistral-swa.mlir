// RUN: infer import %fixtures/rand/mistral-swa | FileCheck %s

// Mistral's `sliding_window` applies to every layer.

// CHECK:       architecture = "MistralForCausalLM"
// CHECK-LABEL: func.func @forward(
// CHECK:       infer.attention {{.*}}layer = 0 : i64{{.*}}sliding_window = 16 : i64
// CHECK:       infer.attention {{.*}}layer = 1 : i64{{.*}}sliding_window = 16 : i64
// CHECK:       infer.attention {{.*}}layer = 2 : i64{{.*}}sliding_window = 16 : i64
// CHECK:       infer.weight "lm_head.weight"
