"""Tiny random Hugging Face checkpoints + reference outputs for tests/models
(docs/ARCHITECTURE.md §8).

For each row of ARCHITECTURES this writes tests/models/fixtures/<name>/:
  config.json, model.safetensors   what `transformers` save_pretrained writes (f32)
  reference.safetensors            input_ids [B, T] (i64), logits [B, T, V], loss [] (labels =
                                   input_ids, HF's shifted mean cross-entropy) and grad.<fqn> for
                                   the parameters listed in the row (gradients of that loss)

Run: /work/venv/bin/python tools/make_model_fixtures.py [--check DIR NAME]
`--check DIR NAME` instead loads a checkpoint written by `hp` (save_pretrained) with transformers
and prints max |Δlogit| against fixture NAME's reference — the export round-trip check.

Adding an architecture: append a row with its config class, model class, config overrides and the
parameters whose gradients the test compares, named as in the checkpoint (per-expert
`experts.<e>.<proj>.weight`, Mixtral's `block_sparse_moe`); `param_grad` maps those names onto
transformers' in-memory modules (fused 3-D experts, Mixtral's `mlp`).
"""
import argparse
import json
import os
import re
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
    # Sliding windows shorter than SEQ: Mistral on every layer; Qwen2 from max_window_layers
    # (layer 0 full, layer 1 sliding); Qwen3 from an explicit layer_types list.
    ("mistral", tf.MistralConfig, tf.MistralForCausalLM, dict(sliding_window=5),
     ["lm_head.weight", "model.layers.1.self_attn.k_proj.weight"]),
    ("qwen2_sliding", tf.Qwen2Config, tf.Qwen2ForCausalLM,
     dict(rope_theta=1000000.0, use_sliding_window=True, sliding_window=4, max_window_layers=1),
     ["model.layers.1.self_attn.k_proj.weight"]),
    ("qwen3_sliding", tf.Qwen3Config, tf.Qwen3ForCausalLM,
     dict(rope_theta=1000000.0, use_sliding_window=True, sliding_window=3,
          layer_types=["sliding_attention", "full_attention"]),
     ["model.layers.0.self_attn.k_proj.weight"]),
]

# The MoE / MLA rows. Qwen3-MoE: 3 layers with layer 1 dense (mlp_only_layers); Qwen3-MoE and
# Mixtral train with the router aux loss (output_router_logits, a visible coefficient), so the
# reference loss includes it. DeepSeek-V3: layer 0 dense (first_k_dense_replace), grouped sigmoid
# routing, a shared expert, MLA with q/kv LoRA and v_head_dim != qk head dim (padding path).
QWEN3_MOE = dict(num_hidden_layers=3, moe_intermediate_size=16, num_experts=8,
                 num_experts_per_tok=2, norm_topk_prob=True, decoder_sparse_step=1,
                 mlp_only_layers=[1], output_router_logits=True, router_aux_loss_coef=0.1)
MIXTRAL = dict(head_dim=8, intermediate_size=24, num_local_experts=4, num_experts_per_tok=2,
               router_jitter_noise=0.0, output_router_logits=True, router_aux_loss_coef=0.05)
DEEPSEEK_V3 = dict(num_key_value_heads=4, head_dim=4, intermediate_size=48,
                   moe_intermediate_size=16, n_routed_experts=8, num_experts_per_tok=2,
                   n_shared_experts=1, n_group=2, topk_group=1, first_k_dense_replace=1,
                   norm_topk_prob=True, routed_scaling_factor=2.5, q_lora_rank=16,
                   kv_lora_rank=16, qk_rope_head_dim=4, qk_nope_head_dim=8, v_head_dim=8,
                   rope_interleave=True)
# No q LoRA, v_head_dim > qk head dim, YaRN with mscale_all_dim (changes the softmax scale).
DEEPSEEK_V3_YARN = dict(DEEPSEEK_V3, q_lora_rank=None, v_head_dim=16,
                        rope_scaling=dict(rope_type="yarn", factor=4.0,
                                          original_max_position_embeddings=16, mscale=1.0,
                                          mscale_all_dim=1.0, beta_fast=32.0, beta_slow=1.0))
ARCHITECTURES += [
    ("qwen3_moe", tf.Qwen3MoeConfig, tf.Qwen3MoeForCausalLM, QWEN3_MOE,
     ["model.layers.0.mlp.gate.weight", "model.layers.2.mlp.experts.3.gate_proj.weight",
      "model.layers.2.mlp.experts.1.down_proj.weight", "model.layers.0.self_attn.k_norm.weight"]),
    ("mixtral", tf.MixtralConfig, tf.MixtralForCausalLM, MIXTRAL,
     ["model.layers.0.block_sparse_moe.gate.weight",
      "model.layers.1.block_sparse_moe.experts.2.w1.weight",
      "model.layers.1.block_sparse_moe.experts.0.w2.weight", "lm_head.weight"]),
    ("deepseek_v3", tf.DeepseekV3Config, tf.DeepseekV3ForCausalLM, DEEPSEEK_V3,
     ["model.layers.0.self_attn.q_a_proj.weight", "model.layers.1.self_attn.kv_b_proj.weight",
      "model.layers.1.self_attn.kv_a_layernorm.weight", "model.layers.1.mlp.gate.weight",
      "model.layers.1.mlp.experts.5.up_proj.weight",
      "model.layers.1.mlp.shared_experts.down_proj.weight",
      "model.layers.0.mlp.down_proj.weight"]),
    ("deepseek_v3_yarn", tf.DeepseekV3Config, tf.DeepseekV3ForCausalLM, DEEPSEEK_V3_YARN,
     ["model.layers.1.self_attn.q_proj.weight", "model.layers.1.self_attn.kv_a_proj_with_mqa.weight",
      "model.layers.1.mlp.gate.weight", "model.layers.1.mlp.experts.2.gate_proj.weight"]),
]

BATCH, SEQ = 2, 12

EXPERT_RE = re.compile(r"(.*)\.(?:mlp|block_sparse_moe)\.experts\.(\d+)\."
                       r"(gate_proj|up_proj|down_proj|w1|w3|w2)\.weight")


def param_grad(params, fqn):
    """The gradient of checkpoint parameter `fqn`: per-expert slices of transformers 5's fused
    experts.gate_up_proj [E, 2I, H] (gate rows first) / experts.down_proj [E, H, I]."""
    m = EXPERT_RE.fullmatch(fqn)
    if m:
        prefix, e, proj = m.group(1), int(m.group(2)), m.group(3)
        if proj in ("down_proj", "w2"):
            return params[f"{prefix}.mlp.experts.down_proj"].grad[e]
        g = params[f"{prefix}.mlp.experts.gate_up_proj"].grad[e]
        inter = g.shape[0] // 2
        return g[:inter] if proj in ("gate_proj", "w1") else g[inter:]
    return params[fqn.replace(".block_sparse_moe.", ".mlp.")].grad


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
        # DeepSeek's selection bias starts at zero; make it matter.
        for n, b in model.named_buffers():
            if n.endswith("e_score_correction_bias"):
                b.copy_(0.1 * torch.randn_like(b))
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
        tensors["grad." + fqn] = param_grad(params, fqn).detach().contiguous()
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
    ap.add_argument("names", nargs="*", help="only these rows (default: all)")
    args = ap.parse_args()
    if args.check:
        sys.exit(0 if check(*args.check) <= 1e-4 else 1)
    for row in ARCHITECTURES:
        if not args.names or row[0] in args.names:
            make(row)


if __name__ == "__main__":
    main()
