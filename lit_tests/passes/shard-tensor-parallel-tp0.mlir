// RUN: infer-opt %s --verify-diagnostics --infer-shard-tensor-parallel="tp=0"

// expected-error @+1 {{infer-shard-tensor-parallel: tp must be at least 1, got 0}}
module attributes {infer.model = {architecture = "LlamaForCausalLM"}} {
}
