#!/usr/bin/env python3
"""Full-model parity fixtures for DeepSeek-V4 (tests/models/deepseek_v4_test.cpp).

Builds tiny random `DeepseekV4ForCausalLM` models with Hugging Face `transformers` (>= 5.24), saves
each with `save_pretrained` (config.json + model.safetensors under the checkpoint names transformers
writes: `attn.wq_a`, `ffn.experts.<e>.w1`, `hc_attn_fn`, `head.weight`, ...) and a
reference.safetensors holding: `ids` [B, T], the f32 `logits` [B, T, V], the causal-LM `loss`
(labels = ids) and `grad.<checkpoint name>` for a few parameters of every kind (mHC, hyper head,
attention sinks, grouped output projection, CSA/HCA compressors, hash and learned routers, experts).

The configs cover every layer type (sliding / compressed sparse / heavily compressed attention),
both MLP types (hash_moe, moe), hc_mult 2 and 4, and sequences long enough that the compressed
branches hold several blocks (CSA: T / 4 entries with index_topk below that, HCA: T / 16) and that
the sliding window (16) is shorter than the sequence.

Generation (tests/models/deepseek_v4_generate_test.cpp, cli_test.cpp): a character-level
tokenizer, deepseek_v4.tokenizer.json beside the directories (id 0 `<s>`, 1 `</s>`, every other id
one character; BPE without merges, Fuse decoder; not inside them, where the trainer would take it
for the data's tokenizer), and reference.safetensors `generate.prompt` [P] / `generate.greedy` [N]:
a prompt and transformers' greedy `generate` continuation with its cache (the sliding window,
the compressors' rolling state and the indexer's keys), checked against the uncached forward's
argmax. The prompt is drawn until the continuation has no `</s>`, no near-tie between the two
best logits and no indexer top-k tie, and is long enough that compressed entries complete several
times and the window wraps during decoding.

    /work/peer-venv/bin/python tools/make_v4_fixtures.py [--out tests/models/fixtures]
"""
import argparse
import os

import torch
import transformers
from safetensors.torch import save_file
from tokenizers import Tokenizer, decoders, models

BATCH, SEQ = 2, 64
PROMPT, NEW = 7, 73  # prompt length (not a multiple of any rate) and new tokens


def tiny_configs():
    common = dict(vocab_size=128, hidden_size=32, moe_intermediate_size=16, num_attention_heads=4,
                  num_key_value_heads=1, head_dim=16, q_lora_rank=16, num_experts_per_tok=2,
                  n_routed_experts=4, n_shared_experts=1, sliding_window=16, o_groups=2,
                  o_lora_rank=8, index_n_heads=8, index_head_dim=8, index_topk=5,
                  max_position_embeddings=256, routed_scaling_factor=1.5, swiglu_limit=2.0,
                  hc_sinkhorn_iters=20, tie_word_embeddings=False)
    hc2 = transformers.DeepseekV4Config(
        **common, num_hidden_layers=4, hc_mult=2, partial_rotary_factor=0.5,
        layer_types=["sliding_attention", "compressed_sparse_attention",
                     "heavily_compressed_attention", "compressed_sparse_attention"],
        compress_rates={"compressed_sparse_attention": 4, "heavily_compressed_attention": 16},
        mlp_layer_types=["hash_moe", "hash_moe", "moe", "moe"])
    hc4 = transformers.DeepseekV4Config(
        **common, num_hidden_layers=4, hc_mult=4, partial_rotary_factor=0.25,
        layer_types=["heavily_compressed_attention", "compressed_sparse_attention",
                     "sliding_attention", "heavily_compressed_attention"],
        compress_rates={"compressed_sparse_attention": 4, "heavily_compressed_attention": 8},
        mlp_layer_types=["hash_moe", "moe", "moe", "hash_moe"])
    return {"deepseek_v4_hc2": hc2, "deepseek_v4_hc4": hc4}


def build(cfg, seed):
    torch.manual_seed(seed)
    cfg._attn_implementation = "eager"
    model = transformers.DeepseekV4ForCausalLM(cfg).float().eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.normal_(0.0, 0.2 if p.dim() > 1 else 0.1)
            if "norm" in name or name.endswith("scale"):
                p.add_(1.0)
        for name, b in model.named_buffers():
            if name.endswith("e_score_correction_bias"):
                b.copy_(torch.randn_like(b) * 0.1)
            if name.endswith("tid2eid"):
                # k distinct experts per token id, as the real table has.
                rows = [torch.randperm(cfg.n_routed_experts)[: cfg.num_experts_per_tok]
                        for _ in range(cfg.vocab_size)]
                b.copy_(torch.stack(rows))
    return model


# In-memory parameter name -> checkpoint name (what save_pretrained writes), for the gradients kept.
def grads_to_keep(cfg):
    out = {
        "model.embed_tokens.weight": "model.embed_tokens.weight",
        "lm_head.weight": "head.weight",
        "model.norm.weight": "model.norm.weight",
        "model.hc_head.hc_fn": "model.hc_head.hc_fn",
        "model.hc_head.hc_base": "model.hc_head.hc_base",
        "model.hc_head.hc_scale": "model.hc_head.hc_scale",
    }
    for i, kind in enumerate(cfg.layer_types):
        p, c = f"model.layers.{i}.", f"model.layers.{i}."
        out.update({
            p + "attn_hc.fn": c + "hc_attn_fn", p + "attn_hc.base": c + "hc_attn_base",
            p + "attn_hc.scale": c + "hc_attn_scale", p + "ffn_hc.fn": c + "hc_ffn_fn",
            p + "input_layernorm.weight": c + "attn_norm.weight",
            p + "self_attn.sinks": c + "attn.attn_sink",
            p + "self_attn.q_a_proj.weight": c + "attn.wq_a.weight",
            p + "self_attn.q_b_proj.weight": c + "attn.wq_b.weight",
            p + "self_attn.kv_proj.weight": c + "attn.wkv.weight",
            p + "self_attn.kv_norm.weight": c + "attn.norm.weight",
            p + "self_attn.o_a_proj.weight": c + "attn.wo_a.weight",
            p + "self_attn.o_b_proj.weight": c + "attn.wo_b.weight",
            p + "mlp.gate.weight": c + "ffn.gate.weight",
            p + "mlp.shared_experts.up_proj.weight": c + "ffn.shared_experts.w3.weight",
        })
        if kind != "sliding_attention":
            for a, b in (("kv_proj.weight", "wkv.weight"), ("gate_proj.weight", "wgate.weight"),
                         ("position_bias", "ape"), ("kv_norm.weight", "norm.weight")):
                out[p + "self_attn.compressor." + a] = c + "attn.compressor." + b
    return out


def reference(model, cfg, ids):
    model.zero_grad()
    out = model(input_ids=ids, labels=ids)
    out.loss.backward()
    t = {"ids": ids.to(torch.int64), "logits": out.logits.detach().float(),
         "loss": out.loss.detach().reshape(1)}
    # The residual streams [T, N, D] of batch row 0 after each layer (layer-by-layer parity).
    with torch.no_grad():
        hs = model.model(input_ids=ids, output_hidden_states=True).hidden_states
    for i in range(cfg.num_hidden_layers):
        t[f"streams.{i}"] = hs[i + 1][0].float().clone()
    params = dict(model.named_parameters())
    for name, ckpt in grads_to_keep(cfg).items():
        if name in params and params[name].grad is not None:
            t["grad." + ckpt] = params[name].grad.clone()
    # Experts (fused in memory): expert 1's gate (w1) and down (w2) projections of each layer.
    for i, layer in enumerate(model.model.layers):
        ex = layer.mlp.experts
        inter = ex.gate_up_proj.shape[1] // 2
        t[f"grad.model.layers.{i}.ffn.experts.1.w1.weight"] = ex.gate_up_proj.grad[1, :inter].clone()
        t[f"grad.model.layers.{i}.ffn.experts.1.w2.weight"] = ex.down_proj.grad[1].clone()
    return t


def has_selection_ties(model, cfg, ids):
    """Whether an indexer's top-k boundary has a tie among the causal entries of some query.

    ReLU makes exact zero scores common; which of tied entries torch.topk keeps is unspecified, so
    a fixture must not depend on it."""
    scorer_cls = transformers.models.deepseek_v4.modeling_deepseek_v4.DeepseekV4IndexerScorer
    seen = []
    orig = scorer_cls.forward

    def record(self, q, ckv, hs):
        r = orig(self, q, ckv, hs)
        seen.append(r.detach())
        return r

    scorer_cls.forward = record
    try:
        with torch.no_grad():
            model(input_ids=ids)
    finally:
        scorer_cls.forward = orig
    rate, k = cfg.compress_rates["compressed_sparse_attention"], cfg.index_topk
    for s in seen:
        for b in range(s.shape[0]):
            for t in range(s.shape[1]):
                visible = min(s.shape[2], (t + 1) // rate)
                if visible > k:
                    v = s[b, t, :visible].sort(descending=True).values
                    if v[k - 1] == v[k]:
                        return True
    return False


def char_tokenizer(vocab_size):
    """id 0 `<s>`, 1 `</s>`, then printable ASCII and Latin-1 characters: one character per id, so
    text and ids map one to one."""
    chars = [chr(c) for c in range(33, 127)] + [chr(c) for c in range(161, 256)]
    vocab = {"<s>": 0, "</s>": 1}
    for i in range(2, vocab_size):
        vocab[chars[i - 2]] = i
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.decoder = decoders.Fuse()
    tok.add_special_tokens(["<s>", "</s>"])
    return tok


def greedy_reference(model, cfg, tok):
    """(prompt [P], transformers' greedy continuation [NEW]) for the first prompt seed whose run is
    unambiguous: no eos, top-2 logit margin > 1e-3 at every step, no indexer top-k tie."""
    for seed in range(1000):
        g = torch.Generator().manual_seed(seed)
        prompt = torch.randint(2, cfg.vocab_size, (1, PROMPT), generator=g)
        assert tok.encode(tok.decode(prompt[0].tolist())).ids == prompt[0].tolist()
        with torch.no_grad():
            out = model.generate(prompt, max_new_tokens=NEW, do_sample=False, min_new_tokens=NEW,
                                 eos_token_id=None, pad_token_id=0)
            new = out[0, PROMPT:]
            if (new == cfg.eos_token_id).any():
                continue
            # The uncached forward of the whole sequence: its argmax at every step is the same
            # continuation, with a clear margin.
            logits = model(input_ids=out[:, :-1]).logits[0, PROMPT - 1:]
            top = logits.topk(2, dim=-1)
            if not torch.equal(top.indices[:, 0], new) or (top.values[:, 0] - top.values[:, 1]).min() < 1e-3:
                continue
        if has_selection_ties(model, cfg, out):
            continue
        return prompt[0].to(torch.int64), new.to(torch.int64).clone()
    raise RuntimeError("no unambiguous prompt")


def main():
    ap = argparse.ArgumentParser()
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--out", default=os.path.join(here, "..", "tests", "models", "fixtures"))
    args = ap.parse_args()
    for seed, (name, cfg) in enumerate(tiny_configs().items()):
        seed = 100 * seed
        ids = torch.randint(0, cfg.vocab_size, (BATCH, SEQ), generator=torch.Generator().manual_seed(3))
        model = build(cfg, seed)
        while has_selection_ties(model, cfg, ids):
            seed += 1
            model = build(cfg, seed)
        d = os.path.join(args.out, name)
        os.makedirs(d, exist_ok=True)
        model.save_pretrained(d, safe_serialization=True)
        t = reference(model, cfg, ids)
        tok = char_tokenizer(cfg.vocab_size)
        tok.save(os.path.join(args.out, "deepseek_v4.tokenizer.json"))
        t["generate.prompt"], t["generate.greedy"] = greedy_reference(model, cfg, tok)
        save_file({k: v.contiguous() for k, v in t.items()}, os.path.join(d, "reference.safetensors"))
        print(name, "seed", seed, "loss", float(t["loss"]), "grads", sum(k.startswith("grad.") for k in t))
    print(f"transformers {transformers.__version__}, torch {torch.__version__}: wrote {args.out}")


if __name__ == "__main__":
    main()
