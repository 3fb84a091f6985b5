#!/usr/bin/env python3
"""Peer for bench_mx_quant: torchao's to_mx (eager, CPU) on the same shape, E4M3, rceil.

usage: mx_quant_torchao.py <row|col|dual> <f32|bf16> [rows cols]
Prints GB/s (input read + codes and scales written, as bench_mx_quant counts) on the last line.
Column-wise is to_mx on the transposed copy (the transpose is included in the time).
"""
import sys
import time

import torch
from torchao.prototype.mx_formats.config import ScaleCalculationMode
from torchao.prototype.mx_formats.mx_tensor import to_mx


def main():
    axis, dt = sys.argv[1], sys.argv[2]
    rows, cols = (int(sys.argv[3]), int(sys.argv[4])) if len(sys.argv) > 4 else (4096, 4096)
    torch.set_num_threads(2)
    dtype = torch.float32 if dt == "f32" else torch.bfloat16
    x = torch.randn(rows, cols, dtype=torch.float32).to(dtype)

    def run():
        if axis in ("row", "dual"):
            to_mx(x, torch.float8_e4m3fn, 32, ScaleCalculationMode.RCEIL)
        if axis in ("col", "dual"):
            to_mx(x.t().contiguous(), torch.float8_e4m3fn, 32, ScaleCalculationMode.RCEIL)

    run()
    best = min(_time(run) for _ in range(3))
    n = rows * cols
    outputs = 2 if axis == "dual" else 1
    nbytes = n * x.element_size() + outputs * (n + n // 32)
    print(nbytes / best / 1e9)


def _time(fn):
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


if __name__ == "__main__":
    main()
