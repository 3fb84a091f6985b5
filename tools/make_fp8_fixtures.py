"""An FP8 block-quantized DeepSeek-V3 checkpoint + reference logits for tests/models
(docs/ARCHITECTURE.md §8; the format: src/hp/mx/fp8_blocks.h).

Writes tests/models/fixtures/deepseek_v3_fp8/:
  config.json            transformers' DeepSeek-V3 config + quantization_config {quant_method fp8,
                         fmt e4m3, activation_scheme dynamic, weight_block_size [128, 128]}
  model.safetensors      the 2-D linear weights of the decoder layers as F8_E4M3 with an F32
                         `<name>_scale_inv` per 128×128 block (edge blocks partial); embeddings,
                         norms, router gates and lm_head stay F32 — the layout of DeepSeek-V3 and
                         Kimi-K2 checkpoints. Plus a few tensors of a next-token-prediction layer
                         model.layers.2.* (num_nextn_predict_layers = 1), which loaders skip.
  reference.safetensors  input_ids [B, T], logits [B, T, V] of the dequantized model
                         (W = fp8 · scale_inv[i/128, j/128] in f32, loaded into transformers) and
                         dequant.<name> for one multi-block weight.

Quantization is DeepSeek's reference (`weight_quant` / `act_quant`): scale_inv = amax / 448 and
codes = (x / scale_inv).to(float8_e4m3fn), both in f32. hidden_size 144 and intermediate_size 160
make the dense MLP's weights span 2×2 blocks with partial edges. The script also loads the FP8
directory with transformers' fine-grained FP8 integration (dequantize=True, CPU; needs
accelerate) and compares the weights it can dequantize correctly (see the note in main()).

Run: /work/peer-venv/bin/python tools/make_fp8_fixtures.py
"""
import json
import math
import os
import sys
import tempfile

import torch
from safetensors.torch import load_file, save_file

import transformers as tf

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_model_fixtures as mmf  # noqa: E402

NAME = "deepseek_v3_fp8"
BLOCK = 128
FP8_MAX = 448.0
QUANT_CONFIG = {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
                "weight_block_size": [BLOCK, BLOCK]}
ROW = (NAME, tf.DeepseekV3Config, tf.DeepseekV3ForCausalLM,
       dict(mmf.DEEPSEEK_V3, hidden_size=144, intermediate_size=160), [])
DEQUANT_CHECK = "model.layers.0.mlp.gate_proj.weight"  # [160, 144]: 2×2 blocks, partial edges


def quantized(name, t):
    """The tensors the format quantizes: 2-D linear weights of the decoder layers, not norms or
    the router gate (hp's export applies the same rule, checkpoint/export.cpp)."""
    return (name.startswith("model.layers.") and name.endswith(".weight") and t.dim() == 2
            and "norm" not in name.rsplit(".", 2)[-2] and not name.endswith(".mlp.gate.weight"))


def quantize(w):
    rows, cols = w.shape
    codes = torch.empty(rows, cols, dtype=torch.float8_e4m3fn)
    scale = torch.empty(math.ceil(rows / BLOCK), math.ceil(cols / BLOCK), dtype=torch.float32)
    for i in range(scale.shape[0]):
        for j in range(scale.shape[1]):
            blk = w[i * BLOCK:(i + 1) * BLOCK, j * BLOCK:(j + 1) * BLOCK].float()
            amax = blk.abs().max()
            s = amax / FP8_MAX if amax > 0 else torch.tensor(1.0)
            codes[i * BLOCK:(i + 1) * BLOCK, j * BLOCK:(j + 1) * BLOCK] = \
                (blk / s).to(torch.float8_e4m3fn)
            scale[i, j] = s
    return codes, scale


def dequantize(codes, scale):
    s = scale.repeat_interleave(BLOCK, 0).repeat_interleave(BLOCK, 1)
    return codes.float() * s[:codes.shape[0], :codes.shape[1]]


def logits_of(model, ids):
    with torch.no_grad():
        return model(input_ids=ids).logits.float()


def main():
    model = mmf.build(ROW)
    d = os.path.join(mmf.OUT, NAME)
    os.makedirs(d, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        model.save_pretrained(tmp, safe_serialization=True)
        state = load_file(os.path.join(tmp, "model.safetensors"))
        with open(os.path.join(tmp, "config.json")) as f:
            config = json.load(f)
    L = config["num_hidden_layers"]
    config["num_nextn_predict_layers"] = 1
    # A next-token-prediction layer as DeepSeek-V3 stores it (a few of its tensors).
    g = torch.Generator().manual_seed(2)
    H = config["hidden_size"]
    for leaf, shape in [("enorm.weight", [H]), ("hnorm.weight", [H]), ("eh_proj.weight", [H, 2 * H]),
                        ("shared_head.norm.weight", [H]),
                        ("self_attn.q_a_proj.weight", [config["q_lora_rank"], H])]:
        state[f"model.layers.{L}.{leaf}"] = 0.1 * torch.randn(shape, generator=g)

    out, dequantized = {}, {}
    for name, t in state.items():
        if quantized(name, t):
            codes, scale = quantize(t)
            out[name], out[name + "_scale_inv"] = codes, scale
            dequantized[name] = dequantize(codes, scale)
        else:
            out[name] = t.contiguous()
            dequantized[name] = t
    save_file(out, os.path.join(d, "model.safetensors"), metadata={"format": "pt"})
    config["quantization_config"] = QUANT_CONFIG
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(config, f, indent=2, sort_keys=True)
        f.write("\n")

    # Reference: transformers' model with the dequantized weights (the MTP tensors are not its).
    sd = {k: v for k, v in dequantized.items() if not k.startswith(f"model.layers.{L}.")}
    with tempfile.TemporaryDirectory() as tmp:
        plain = dict(config)
        del plain["quantization_config"]
        with open(os.path.join(tmp, "config.json"), "w") as f:
            json.dump(plain, f)
        save_file(sd, os.path.join(tmp, "model.safetensors"), metadata={"format": "pt"})
        ref_model = tf.AutoModelForCausalLM.from_pretrained(tmp, dtype=torch.float32).eval()
    ids = torch.randint(0, config["vocab_size"], (mmf.BATCH, mmf.SEQ),
                        generator=torch.Generator().manual_seed(1))
    logits = logits_of(ref_model, ids)
    save_file({"input_ids": ids, "logits": logits.contiguous(),
               "dequant." + DEQUANT_CHECK: dequantized[DEQUANT_CHECK].contiguous()},
              os.path.join(d, "reference.safetensors"))

    # Cross-check of the format with transformers' own FP8 integration (dequantize=True, CPU;
    # needs accelerate). transformers 5.24 derives the block size from the weight and scale shapes
    # (rows // scale_rows), which is wrong for partial edge blocks (144 columns over 2 blocks
    # become blocks of 72) and refuses shapes such as DeepSeek-V3's [576, 7168] kv_a_proj_with_mqa
    # (5 scale rows); so only weights of whole or single blocks are compared, bitwise.
    try:
        fp8 = tf.AutoModelForCausalLM.from_pretrained(
            d, dtype=torch.float32,
            quantization_config=tf.FineGrainedFP8Config(dequantize=True)).eval()
        theirs = dict(fp8.named_parameters())
        same = [k for k, v in sd.items() if k in theirs and k in out and
                out[k].dtype == torch.float8_e4m3fn and
                all(n <= BLOCK or n % BLOCK == 0 for n in v.shape)]
        for k in same:
            assert torch.equal(theirs[k], sd[k]), k
        print(f"{NAME}: transformers FP8 (dequantize=True) equals this dequantization on "
              f"{len(same)} single-block weights")
    except ImportError as e:
        print(f"{NAME}: transformers FP8 cross-check skipped: {e}")
    size = sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d))
    print(f"{NAME}: {len(out)} tensors, {size} bytes")


if __name__ == "__main__":
    main()
