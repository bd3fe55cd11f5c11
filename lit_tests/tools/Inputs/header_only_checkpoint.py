#!/usr/bin/env python3
"""Writes a Llama-3-8B-shaped HF directory whose safetensors file has a real
header and a sparse (unwritten) data section: what the compiler reads, without
16 GB of disk. Usage: header_only_checkpoint.py OUT_DIR"""
import json
import os
import struct
import sys

out = sys.argv[1]
os.makedirs(out, exist_ok=True)
H, I, L, V, HEADS, KV_HEADS, HEAD_DIM = 4096, 14336, 32, 128256, 32, 8, 128
config = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": H,
    "intermediate_size": I, "num_hidden_layers": L, "num_attention_heads": HEADS,
    "num_key_value_heads": KV_HEADS, "vocab_size": V, "max_position_embeddings": 8192,
    "rms_norm_eps": 1e-5, "hidden_act": "silu", "tie_word_embeddings": False,
    "bos_token_id": 128000, "eos_token_id": [128001, 128009],
    "rope_parameters": {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
                        "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                        "original_max_position_embeddings": 8192},
}
with open(os.path.join(out, "config.json"), "w") as f:
    json.dump(config, f, indent=1)

kv = KV_HEADS * HEAD_DIM
shapes = {"model.embed_tokens.weight": [V, H], "model.norm.weight": [H], "lm_head.weight": [V, H]}
for l in range(L):
    p = f"model.layers.{l}."
    shapes.update({
        p + "input_layernorm.weight": [H], p + "post_attention_layernorm.weight": [H],
        p + "self_attn.q_proj.weight": [H, H], p + "self_attn.k_proj.weight": [kv, H],
        p + "self_attn.v_proj.weight": [kv, H], p + "self_attn.o_proj.weight": [H, H],
        p + "mlp.gate_proj.weight": [I, H], p + "mlp.up_proj.weight": [I, H],
        p + "mlp.down_proj.weight": [H, I]})
header, offset = {}, 0
for name, shape in shapes.items():
    size = 2
    for d in shape:
        size *= d
    header[name] = {"dtype": "BF16", "shape": shape, "data_offsets": [offset, offset + size]}
    offset += size
blob = json.dumps(header).encode()
blob += b" " * (-len(blob) % 8)
with open(os.path.join(out, "model.safetensors"), "wb") as f:
    f.write(struct.pack("<Q", len(blob)))
    f.write(blob)
    f.truncate(8 + len(blob) + offset)
