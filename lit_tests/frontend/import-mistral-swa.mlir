// RUN: infer import %fixtures/rand/mistral-swa | FileCheck %s

// `-o` writes the same IR to a file, and it parses back.
// RUN: infer import %fixtures/rand/mistral-swa -o %t.mlir
// RUN: infer-opt %t.mlir | FileCheck %s

// Mistral's `sliding_window` applies to every layer.

// CHECK:       architecture = "MistralForCausalLM"
// CHECK-LABEL: func.func @forward(
// CHECK:       infer.attention {{.*}}layer = 0 : i64{{.*}}sliding_window = 16 : i64
// CHECK:       infer.attention {{.*}}layer = 1 : i64{{.*}}sliding_window = 16 : i64
// CHECK:       infer.attention {{.*}}layer = 2 : i64{{.*}}sliding_window = 16 : i64
// CHECK:       infer.weight "lm_head.weight"
