#!/usr/bin/env python3
"""Writes the safetensors fixtures of tests/io (files made by the reference Python library).

  python tools/make_safetensors_fixtures.py            # writes tests/io/fixtures/safetensors/
  python tools/make_safetensors_fixtures.py --check F  # loads F (written by hp) and checks it

Every tensor named "<dtype>" holds arange(6) * 0.5 reshaped to [2, 3] (exact in every dtype; BOOL
holds arange(6) % 2, integer dtypes arange(6)), which is what tests/io/safetensors_test.cpp expects.
"""
import argparse
import json
import os

import torch
from safetensors import safe_open
from safetensors.torch import save_file

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "io", "fixtures", "safetensors")

DTYPES = {
    "F64": torch.float64, "F32": torch.float32, "BF16": torch.bfloat16, "F16": torch.float16,
    "F8_E4M3": torch.float8_e4m3fn, "F8_E5M2": torch.float8_e5m2, "I64": torch.int64,
    "I32": torch.int32, "U8": torch.uint8, "BOOL": torch.bool,
}


def expected(name):
    base = torch.arange(6, dtype=torch.float64).reshape(2, 3)
    if name == "BOOL":
        return (base.to(torch.int64) % 2).to(torch.bool)
    if name in ("I64", "I32", "U8"):
        return base.to(DTYPES[name])
    return (base * 0.5).to(DTYPES[name])


def make():
    os.makedirs(OUT, exist_ok=True)
    tensors = {name: expected(name) for name in DTYPES}
    tensors["empty"] = torch.zeros(0, 4, dtype=torch.float32)
    tensors["scalar"] = torch.tensor(3.25, dtype=torch.float32)
    save_file(tensors, os.path.join(OUT, "py_all_dtypes.safetensors"),
              metadata={"format": "pt", "note": "hp fixture"})

    # Sharded checkpoint in the Hugging Face layout.
    shard_dir = os.path.join(OUT, "py_sharded")
    os.makedirs(shard_dir, exist_ok=True)
    shards = {
        "model-00001-of-00002.safetensors": {"a.weight": expected("F32"), "b.bias": expected("BF16")},
        "model-00002-of-00002.safetensors": {"c.weight": expected("F16")},
    }
    weight_map, total = {}, 0
    for fname, ts in shards.items():
        save_file(ts, os.path.join(shard_dir, fname), metadata={"format": "pt"})
        for k, v in ts.items():
            weight_map[k] = fname
            total += v.numel() * v.element_size()
    with open(os.path.join(shard_dir, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)


def check(path):
    with safe_open(path, framework="pt") as f:
        meta = f.metadata()
        assert meta == {"writer": "hp", "purpose": "interop"}, meta
        names = sorted(f.keys())
        assert names == sorted(list(DTYPES) + ["empty"]), names
        for name in DTYPES:
            got, want = f.get_tensor(name), expected(name)
            assert got.dtype == want.dtype and got.shape == want.shape, name
            assert torch.equal(got.to(torch.float64), want.to(torch.float64)), name
        assert f.get_tensor("empty").shape == (0, 4)
    print("OK: python safetensors loaded", path, "with", len(names), "tensors")


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--check", help="verify a file written by hp's safetensors test")
    args = ap.parse_args()
    check(args.check) if args.check else make()
