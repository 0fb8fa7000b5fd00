# -*- coding: utf-8 -*-
"""Stand-in checkpoints for tests, written by scripts/make_sample_checkpoints.py (the script the examples use)."""
import importlib.util
import os

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_spec = importlib.util.spec_from_file_location("make_sample_checkpoints",
                                               os.path.join(ROOT, "scripts", "make_sample_checkpoints.py"))
generator = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(generator)

# Hy3's layout at toy size: dense layer 0, MoE layers with a shared expert, one MTP layer.
TINY_HY3 = dict(generator.HY3_CONFIG, num_hidden_layers=3, num_attention_heads=4, num_key_value_heads=2, head_dim=32,
                hidden_size=128, intermediate_size=256, moe_intermediate_size=128, num_experts=4,
                num_experts_per_tok=2, vocab_size=256, max_position_embeddings=4096)


def write(directory, fmt="bf16", config=None, shard_bytes=200_000):
    """A checkpoint of the tiny (or given) Hy3-layout config in directory; returns the directory as str."""
    config = dict(config or TINY_HY3)
    if generator.QUANTIZATION_CONFIGS[fmt]:
        config["quantization_config"] = generator.QUANTIZATION_CONFIGS[fmt]
    generator.write_checkpoint(str(directory), generator.hy3_tensors(fmt, config), config, shard_bytes)
    return str(directory)
