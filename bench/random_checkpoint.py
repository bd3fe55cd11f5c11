#!/usr/bin/env python3
"""A random-weight bf16 Hugging Face checkpoint of a real Llama config.

usage: random_checkpoint.py CONFIG OUT_DIR [--header-only]

CONFIG is llama3-8b (Meta-Llama-3-8B) or tinyllama-1.1b. The safetensors
header is the same bytes in both modes, so an artifact compiled from the
header-only directory (the compiler reads headers only; the data section is a
sparse hole, no disk used) runs on the full checkpoint made elsewhere with
`--weights`: its fingerprint matches. Without --header-only the data is
written too, drawn on the GPU with torch: N(0, 0.02) for matrices (the
initializer_range of both configs), ones for norm weights; seeded.
"""
import json
import os
import struct
import sys

CONFIGS = {
    "llama3-8b": {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama",
        "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
        "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256,
        "max_position_embeddings": 8192, "rms_norm_eps": 1e-5, "hidden_act": "silu",
        "tie_word_embeddings": False, "bos_token_id": 128000,
        "eos_token_id": [128001, 128009], "torch_dtype": "bfloat16",
        "rope_theta": 500000.0,
        "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                         "high_freq_factor": 4.0,
                         "original_max_position_embeddings": 8192},
    },
    "tinyllama-1.1b": {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama",
        "hidden_size": 2048, "intermediate_size": 5632, "num_hidden_layers": 22,
        "num_attention_heads": 32, "num_key_value_heads": 4, "vocab_size": 32000,
        "max_position_embeddings": 2048, "rms_norm_eps": 1e-5, "hidden_act": "silu",
        "tie_word_embeddings": False, "bos_token_id": 1, "eos_token_id": 2,
        "torch_dtype": "bfloat16", "rope_theta": 10000.0,
    },
}


def tensors(c):
    h, i, v = c["hidden_size"], c["intermediate_size"], c["vocab_size"]
    d = h // c["num_attention_heads"]
    kv = c["num_key_value_heads"] * d
    yield "model.embed_tokens.weight", [v, h]
    for l in range(c["num_hidden_layers"]):
        p = f"model.layers.{l}."
        yield p + "input_layernorm.weight", [h]
        yield p + "self_attn.q_proj.weight", [h, h]
        yield p + "self_attn.k_proj.weight", [kv, h]
        yield p + "self_attn.v_proj.weight", [kv, h]
        yield p + "self_attn.o_proj.weight", [h, h]
        yield p + "post_attention_layernorm.weight", [h]
        yield p + "mlp.gate_proj.weight", [i, h]
        yield p + "mlp.up_proj.weight", [i, h]
        yield p + "mlp.down_proj.weight", [h, i]
    yield "model.norm.weight", [h]
    yield "lm_head.weight", [v, h]


def main():
    if len(sys.argv) < 3 or sys.argv[1] not in CONFIGS:
        sys.exit(__doc__)
    config, out = CONFIGS[sys.argv[1]], sys.argv[2]
    header_only = "--header-only" in sys.argv[3:]
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(config, f, indent=1)
    header, layout, offset = {}, [], 0
    for name, shape in tensors(config):
        size = 2
        for dim in shape:
            size *= dim
        header[name] = {"dtype": "BF16", "shape": shape,
                        "data_offsets": [offset, offset + size]}
        layout.append((name, shape, offset, size))
        offset += size
    blob = json.dumps(header, separators=(",", ":")).encode()
    blob += b" " * (-len(blob) % 8)
    path = os.path.join(out, "model.safetensors")
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(blob)))
        f.write(blob)
        f.truncate(8 + len(blob) + offset)
    if header_only:
        return
    import torch

    gen = torch.Generator(device="cuda").manual_seed(0)
    base = 8 + len(blob)
    with open(path, "r+b") as f:
        for name, shape, start, size in layout:
            if len(shape) == 1:
                t = torch.ones(shape, dtype=torch.bfloat16, device="cuda")
            else:
                t = torch.empty(shape, dtype=torch.bfloat16, device="cuda")
                t.normal_(0.0, 0.02, generator=gen)
            data = t.view(torch.int16).cpu().numpy().tobytes()
            assert len(data) == size, name
            f.seek(base + start)
            f.write(data)
    print(f"wrote {path}: {offset / 1e9:.2f} GB of bf16 weights")


if __name__ == "__main__":
    main()
