"""Peer for `hp bench train`: the same model, shapes and optimizer trained by PyTorch eager.

Usage: train_peer.py SPEC.json

SPEC (written by `hp bench train`, tools/hp/bench.cpp):
  config        the Hugging Face config.json of the model (architectures, model_type, sizes)
  seq_len, batch_size (sequences per optimizer step), grad_accum (micro-batches per step),
  warmup        {"min_steps", "window", "tolerance", "max_steps"}: warm up until the last `window`
                of at least `min_steps` warm-up steps are within `tolerance` (slowest / fastest - 1),
                or for `max_steps` at most -- the rule hp applies to itself (src/hp/train/step_timer.h)
  timed_steps   steps timed after the warm-up; their median is the result
  lr, betas, eps, weight_decay, grad_clip (0 = none)   -- torch.optim.AdamW, constant lr
  threads       torch.set_num_threads
  dtype         "bf16": f32 parameters, forward under torch.autocast("cpu", bfloat16), as
                training.mixed_precision bf16 does on our side; "f32": plain f32
  seed

The model is built from the config with random init (transformers' _init_weights) and trained on
random token batches of [batch_size / grad_accum, seq_len] (labels = inputs, shifted inside the model as for our
causal LM loss). Throughput does not depend on the token values. Prints progress on stderr and one
JSON line on stdout:
  {"tokens_per_s": tokens per step / median_step_s, "median_step_s": ..., "step_s": [timed steps],
   "warmup_s": [warm-up steps], "stable": false when the warm-up hit max_steps, "loss_first": ...,
   "loss_last": ..., "num_parameters": ..., "optimizer": "AdamW(fused)" | "AdamW(foreach)"}
"""
import json
import statistics
import sys
import time

import torch
import transformers as tf


def build_model(config):
    cfg = dict(config)
    model_type = cfg.pop("model_type")
    hf_config = tf.AutoConfig.for_model(model_type, **cfg)
    hf_config._attn_implementation = "sdpa"
    return tf.AutoModelForCausalLM.from_config(hf_config).float().train()


def make_optimizer(params, spec):
    kw = dict(lr=spec["lr"], betas=tuple(spec["betas"]), eps=spec["eps"],
              weight_decay=spec["weight_decay"])
    # fused AdamW has a CPU kernel in recent torch (one pass over each tensor); foreach otherwise.
    try:
        return torch.optim.AdamW(params, fused=True, **kw), "AdamW(fused)"
    except (RuntimeError, TypeError, ValueError):
        return torch.optim.AdamW(params, foreach=True, **kw), "AdamW(foreach)"


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: train_peer.py SPEC.json")
    with open(sys.argv[1]) as f:
        spec = json.load(f)
    torch.set_num_threads(int(spec["threads"]))
    torch.manual_seed(int(spec.get("seed", 0)))
    model = build_model(spec["config"])
    params = [p for p in model.parameters() if p.requires_grad]
    opt, opt_name = make_optimizer(params, spec)
    b, t = int(spec["batch_size"]), int(spec["seq_len"])
    accum = int(spec.get("grad_accum", 1))
    if b % accum:
        sys.exit(f"train_peer: batch_size ({b}) does not split into grad_accum ({accum}) micro-batches")
    vocab = int(spec["config"]["vocab_size"])
    rule = spec["warmup"]
    min_warmup, window = int(rule["min_steps"]), int(rule["window"])
    tolerance, max_warmup = float(rule["tolerance"]), int(rule["max_steps"])
    timed_steps = int(spec["timed_steps"])
    if not 1 <= window <= min_warmup <= max_warmup or timed_steps < 1:
        sys.exit(f"train_peer: bad warm-up rule {rule} / timed_steps {timed_steps}")
    bf16 = spec["dtype"] == "bf16"
    clip = float(spec.get("grad_clip", 0.0))

    def step():
        total = 0.0
        for _ in range(accum):
            ids = torch.randint(0, vocab, (b // accum, t))
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
                loss = model(input_ids=ids, labels=ids, use_cache=False).loss / accum
            loss.backward()
            total += loss.detach().item()
        if clip > 0:
            torch.nn.utils.clip_grad_norm_(params, clip)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return total

    def stable(times):
        last = times[-window:]
        return len(times) >= min_warmup and max(last) / min(last) - 1 <= tolerance

    warmup, times, losses = [], [], []
    while len(times) < timed_steps:
        t0 = time.perf_counter()
        loss = step()
        dt = time.perf_counter() - t0
        losses.append(loss)
        warm = len(warmup) >= max_warmup or (len(warmup) > 0 and stable(warmup))
        (times if warm else warmup).append(dt)
        kind = f"timed {len(times)}/{timed_steps}" if warm else f"warm-up {len(warmup)}"
        print(f"peer step {len(losses)} ({kind}) loss {loss:.4f} {dt:.3f}s", file=sys.stderr, flush=True)
    median = statistics.median(times)
    print(json.dumps({
        "tokens_per_s": b * t / median,
        "median_step_s": median,
        "step_s": times,
        "warmup_s": warmup,
        "stable": stable(warmup),
        "loss_first": losses[0],
        "loss_last": losses[-1],
        "num_parameters": sum(p.numel() for p in params),
        "optimizer": opt_name,
    }))


if __name__ == "__main__":
    main()
