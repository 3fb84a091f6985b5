#!/usr/bin/env python3
"""Parity fixtures for the MoE blocks and DeepSeek-V3 MLA attention (tests/models/moe_test.cpp, mla_test.cpp).

Builds tiny random Qwen3-MoE, Mixtral and DeepSeek-V3 models with Hugging Face `transformers`, runs one
decoder layer's MoE block (and, for DeepSeek, its MLA attention) forward and backward in f32, and saves
for each block: its weights under the FQNs a transformers checkpoint uses (per-expert 2-D tensors, as
`save_pretrained` writes them even though transformers >= 5 fuses experts into 3-D tensors in memory),
the input, a random output gradient, the output, and gradients w.r.t. the input and a few parameters.

    /work/venv/bin/python tools/make_moe_fixtures.py [--out tests/models/fixtures/moe] [--full DIR]

`save_model_fixture` (config.json + model.safetensors + ids + logits) is the reusable piece for
full-model parity fixtures; `--full DIR` writes one per architecture into DIR (not committed).
"""
import argparse
import json
import os

import torch
import transformers
from safetensors.torch import save_file

BATCH, SEQ = 2, 5


def tiny_configs():
    common = dict(vocab_size=64, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                  rms_norm_eps=1e-6, tie_word_embeddings=False)
    qwen = transformers.Qwen3MoeConfig(**common, head_dim=8, moe_intermediate_size=16, num_experts=8,
                                       num_experts_per_tok=2, norm_topk_prob=True,
                                       decoder_sparse_step=1, mlp_only_layers=[])
    mixtral = transformers.MixtralConfig(**common, num_local_experts=4, num_experts_per_tok=2,
                                         router_jitter_noise=0.0)
    # v_head_dim != qk head dim on purpose: 6 < 12 pads v, 16 > 12 pads q and k.
    ds = dict(common, num_key_value_heads=4)
    deepseek = transformers.DeepseekV3Config(
        **ds, moe_intermediate_size=16, n_routed_experts=8, num_experts_per_tok=2, n_shared_experts=1,
        n_group=2, topk_group=1, first_k_dense_replace=1, norm_topk_prob=True,
        routed_scaling_factor=2.5, q_lora_rank=24, kv_lora_rank=16, qk_rope_head_dim=4,
        qk_nope_head_dim=8, v_head_dim=6, rope_interleave=True)
    deepseek_noq = transformers.DeepseekV3Config(
        **ds, moe_intermediate_size=16, n_routed_experts=8, num_experts_per_tok=2, n_shared_experts=1,
        n_group=2, topk_group=1, first_k_dense_replace=1, q_lora_rank=None, kv_lora_rank=16,
        qk_rope_head_dim=4, qk_nope_head_dim=8, v_head_dim=16, rope_interleave=True)
    return {
        "qwen3_moe": (transformers.Qwen3MoeForCausalLM, qwen),
        "mixtral": (transformers.MixtralForCausalLM, mixtral),
        "deepseek_v3": (transformers.DeepseekV3ForCausalLM, deepseek),
        "deepseek_v3_noqlora": (transformers.DeepseekV3ForCausalLM, deepseek_noq),
    }


def build(cls, cfg, seed):
    torch.manual_seed(seed)
    cfg._attn_implementation = "eager"
    model = cls(cfg).float().eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.normal_(0.0, 0.2 if p.dim() > 1 else 0.1)
            if "norm" in name:
                p.add_(1.0)
        for name, b in model.named_buffers():
            if name.endswith("e_score_correction_bias"):
                b.copy_(torch.randn_like(b) * 0.1)
    return model


def checkpoint_state(module, prefix, mixtral_names):
    """The block's tensors under checkpoint FQNs: fused experts split back into per-expert weights."""
    out = {}
    for name, t in list(module.named_parameters()) + list(module.named_buffers()):
        t = t.detach().contiguous()
        if name == "experts.gate_up_proj":
            inter = t.shape[1] // 2
            for e in range(t.shape[0]):
                g, u = ("w1", "w3") if mixtral_names else ("gate_proj", "up_proj")
                out[f"{prefix}.experts.{e}.{g}.weight"] = t[e, :inter].clone()
                out[f"{prefix}.experts.{e}.{u}.weight"] = t[e, inter:].clone()
        elif name == "experts.down_proj":
            d = "w2" if mixtral_names else "down_proj"
            for e in range(t.shape[0]):
                out[f"{prefix}.experts.{e}.{d}.weight"] = t[e].clone()
        else:
            out[f"{prefix}.{name}"] = t.clone()
    return out


def expert_grads(module, prefix, mixtral_names, expert):
    gu, dn = module.experts.gate_up_proj.grad, module.experts.down_proj.grad
    inter = gu.shape[1] // 2
    g, d = ("w1", "w2") if mixtral_names else ("gate_proj", "down_proj")
    return {f"grad.{prefix}.experts.{expert}.{g}.weight": gu[expert, :inter].clone(),
            f"grad.{prefix}.experts.{expert}.{d}.weight": dn[expert].clone(),
            f"grad.{prefix}.gate.weight": module.gate.weight.grad.clone()}


def moe_fixture(name, model, cfg):
    layer = model.model.layers[1]
    block = layer.mlp
    mixtral = name == "mixtral"
    # The checkpoint prefix: transformers 5 renames Mixtral's block_sparse_moe to mlp on load and
    # back on save.
    prefix = "block_sparse_moe" if mixtral else "mlp"
    torch.manual_seed(1)
    x = torch.randn(BATCH, SEQ, cfg.hidden_size, requires_grad=True)
    out = block(x)
    gout = torch.randn_like(out)
    (out * gout).sum().backward()
    logits = block.gate(x.detach())[0]
    t = dict(checkpoint_state(block, prefix, mixtral))
    t.update({"input": x.detach(), "output": out.detach(), "grad_output": gout,
              "grad.input": x.grad.clone(), "router_logits": logits.detach()})
    t.update(expert_grads(block, prefix, mixtral, expert=3 if not mixtral else 1))
    if hasattr(block, "shared_experts"):
        t[f"grad.{prefix}.shared_experts.up_proj.weight"] = block.shared_experts.up_proj.weight.grad.clone()
    if not name.startswith("deepseek"):
        fn = transformers.models.qwen3_moe.modeling_qwen3_moe.load_balancing_loss_func
        experts = cfg.num_experts if hasattr(cfg, "num_experts") else cfg.num_local_experts
        # Two "layers" of the same logits: exercises the accumulation over layers.
        t["aux_loss"] = fn((logits, logits), experts, cfg.num_experts_per_tok).detach().reshape(1)
    return t


def mla_fixture(model, cfg):
    attn = model.model.layers[1].self_attn
    torch.manual_seed(2)
    x = torch.randn(BATCH, SEQ, cfg.hidden_size, requires_grad=True)
    pos = torch.arange(SEQ).unsqueeze(0).expand(BATCH, -1)
    cos, sin = model.model.rotary_emb(x, pos)
    mask = torch.full((SEQ, SEQ), float("-inf")).triu(1)[None, None].expand(BATCH, 1, -1, -1)
    out = attn(x, (cos, sin), mask)[0]
    gout = torch.randn_like(out)
    (out * gout).sum().backward()
    t = {f"self_attn.{n}": p.detach().clone() for n, p in attn.named_parameters()}
    t.update({"input": x.detach(), "output": out.detach(), "grad_output": gout,
              "grad.input": x.grad.clone()})
    params = dict(attn.named_parameters())
    for n in ("q_a_proj.weight", "q_proj.weight", "kv_b_proj.weight", "kv_a_proj_with_mqa.weight",
              "kv_a_layernorm.weight", "o_proj.weight"):
        if n in params:
            t[f"grad.self_attn.{n}"] = params[n].grad.clone()
    return t


def save_model_fixture(model, out_dir, ids):
    """Full-model fixture: config.json + model.safetensors (as save_pretrained writes them) + ids + logits."""
    os.makedirs(out_dir, exist_ok=True)
    model.save_pretrained(out_dir, safe_serialization=True)
    with torch.no_grad():
        logits = model(input_ids=ids).logits
    save_file({"ids": ids.to(torch.int64).contiguous(), "logits": logits.float().contiguous()},
              os.path.join(out_dir, "reference.safetensors"))


def main():
    ap = argparse.ArgumentParser()
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--out", default=os.path.join(here, "..", "tests", "models", "fixtures", "moe"))
    ap.add_argument("--full", default=None, help="also write full-model fixtures into this directory")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    meta = {}
    for seed, (name, (cls, cfg)) in enumerate(tiny_configs().items()):
        model = build(cls, cfg, seed)
        if name != "deepseek_v3_noqlora":
            save_file({k: v.contiguous() for k, v in moe_fixture(name, model, cfg).items()},
                      os.path.join(args.out, f"{name}_moe.safetensors"))
        if name.startswith("deepseek"):
            model.zero_grad()
            save_file({k: v.contiguous() for k, v in mla_fixture(model, cfg).items()},
                      os.path.join(args.out, f"{name}_mla.safetensors"))
        meta[name] = cfg.to_diff_dict()
        if args.full:
            ids = torch.randint(0, cfg.vocab_size, (BATCH, SEQ), generator=torch.Generator().manual_seed(3))
            save_model_fixture(model, os.path.join(args.full, name), ids)
    with open(os.path.join(args.out, "configs.json"), "w") as f:
        json.dump(meta, f, indent=1, sort_keys=True, default=str)
    print(f"transformers {transformers.__version__}, torch {torch.__version__}: wrote {args.out}")


if __name__ == "__main__":
    main()
