"""Tiny random Hugging Face checkpoints + reference outputs for tests/models (DESIGN.md §8).

For each row of ARCHITECTURES this writes tests/models/fixtures/<name>/:
  config.json, model.safetensors   what `transformers` save_pretrained writes (f32)
  reference.safetensors            input_ids [B, T] (i64), logits [B, T, V], loss [] (labels =
                                   input_ids, HF's shifted mean cross-entropy) and grad.<fqn> for
                                   the parameters listed in the row (gradients of that loss)

Run: /work/venv/bin/python tools/make_model_fixtures.py [--check DIR NAME]
`--check DIR NAME` instead loads a checkpoint written by `hp` (save_pretrained) with transformers
and prints max |Δlogit| against fixture NAME's reference — the export round-trip check.

Adding an architecture (e.g. Qwen3-MoE, Mixtral, DeepSeek-V3): append a row with its config class,
model class, config overrides and the parameters whose gradients the test compares.
"""
import argparse
import json
import os
import sys

import torch
from safetensors.torch import load_file, save_file

import transformers as tf

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "models", "fixtures")

# Small enough that all fixtures together stay well under 2 MB; GQA (4 q heads over 2 kv heads)
# and an explicit head_dim that differs from hidden / heads.
BASE = dict(
    hidden_size=32,
    intermediate_size=64,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=16,
    vocab_size=96,
    max_position_embeddings=64,
    rms_norm_eps=1e-6,
    initializer_range=0.1,
    tie_word_embeddings=False,
)
COMMON_GRADS = ["model.embed_tokens.weight", "model.layers.0.self_attn.q_proj.weight",
                "model.layers.1.mlp.down_proj.weight", "model.norm.weight"]

# name, config class, model class, overrides of BASE, extra gradient FQNs
ARCHITECTURES = [
    ("llama", tf.LlamaConfig, tf.LlamaForCausalLM, dict(rope_theta=10000.0), ["lm_head.weight"]),
    ("llama_tied", tf.LlamaConfig, tf.LlamaForCausalLM, dict(tie_word_embeddings=True), []),
    ("llama_rope_llama3", tf.LlamaConfig, tf.LlamaForCausalLM,
     dict(rope_theta=500000.0,
          rope_scaling=dict(rope_type="llama3", factor=8.0, low_freq_factor=1.0,
                            high_freq_factor=4.0, original_max_position_embeddings=16)),
     ["lm_head.weight"]),
    ("llama_rope_yarn", tf.LlamaConfig, tf.LlamaForCausalLM,
     dict(rope_theta=10000.0,
          rope_scaling=dict(rope_type="yarn", factor=4.0, original_max_position_embeddings=16)),
     ["lm_head.weight"]),
    ("llama_rope_linear", tf.LlamaConfig, tf.LlamaForCausalLM,
     dict(rope_scaling=dict(rope_type="linear", factor=2.0)), []),
    # max_position_embeddings 8 < SEQ, so the dynamic NTK base stretch is active.
    ("llama_rope_dynamic", tf.LlamaConfig, tf.LlamaForCausalLM,
     dict(max_position_embeddings=8, rope_scaling=dict(rope_type="dynamic", factor=2.0)), []),
    ("qwen2", tf.Qwen2Config, tf.Qwen2ForCausalLM, dict(rope_theta=1000000.0),
     ["lm_head.weight", "model.layers.0.self_attn.q_proj.bias"]),
    ("qwen3", tf.Qwen3Config, tf.Qwen3ForCausalLM, dict(rope_theta=1000000.0),
     ["lm_head.weight", "model.layers.0.self_attn.q_norm.weight",
      "model.layers.1.self_attn.k_norm.weight"]),
]

BATCH, SEQ = 2, 12


def build(row):
    name, cfg_cls, model_cls, overrides, _ = row
    kw = dict(BASE)
    kw.update(overrides)
    rope_scaling = kw.pop("rope_scaling", None)
    cfg = cfg_cls(**kw)
    if rope_scaling is not None:
        params = dict(rope_scaling)
        params["rope_theta"] = kw.get("rope_theta", 10000.0)
        cfg.rope_parameters = params
    torch.manual_seed(0)
    model = model_cls(cfg).float().eval()
    # Norm weights start at ones in HF init; perturb them so the tests see them.
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "norm" in n or n.endswith(".bias"):
                p.add_(0.1 * torch.randn_like(p))
    return model


def reference(model, ids):
    model.zero_grad()
    out = model(input_ids=ids, labels=ids)
    out.loss.backward()
    return out


def make(row):
    name, _, _, _, extra = row
    model = build(row)
    d = os.path.join(OUT, name)
    os.makedirs(d, exist_ok=True)
    model.save_pretrained(d, safe_serialization=True)
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, model.config.vocab_size, (BATCH, SEQ), generator=g)
    out = reference(model, ids)
    params = dict(model.named_parameters())
    tensors = {"input_ids": ids, "logits": out.logits.detach().contiguous(),
               "loss": out.loss.detach().reshape([])}
    # COMMON_GRADS entries an architecture lacks (e.g. mlp.down_proj in an MoE layer) are skipped.
    for fqn in [f for f in COMMON_GRADS if f in params] + extra:
        tensors["grad." + fqn] = params[fqn].grad.detach().contiguous()
    save_file(tensors, os.path.join(d, "reference.safetensors"))
    for f in os.listdir(d):
        if f not in ("config.json", "model.safetensors", "reference.safetensors"):
            os.remove(os.path.join(d, f))
    print(f"{name}: loss {out.loss.item():.6f}")


def check(directory, name):
    ref = load_file(os.path.join(OUT, name, "reference.safetensors"))
    model = tf.AutoModelForCausalLM.from_pretrained(directory, torch_dtype=torch.float32).eval()
    with torch.no_grad():
        logits = model(input_ids=ref["input_ids"]).logits
    diff = (logits - ref["logits"]).abs().max().item()
    print(f"max |dlogit| {diff:.3e}")
    return diff


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--check", nargs=2, metavar=("DIR", "NAME"))
    args = ap.parse_args()
    if args.check:
        sys.exit(0 if check(*args.check) <= 1e-4 else 1)
    for row in ARCHITECTURES:
        make(row)


if __name__ == "__main__":
    main()
