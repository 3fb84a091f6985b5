"""PyTorch peer for bench_fusion: prints the best milliseconds of one eager PyTorch region on the
same shapes and thread count as the C++ side.

usage: fusion.py OP THREADS
  OP: silu_composed, gelu_tanh_composed (x * sigmoid(x) and the tanh-GELU formula as separate ops
      on a 64 MiB f32 tensor) | softmax | rms_norm ([16384, 1024] f32, weight [1024])
"""
import sys

import torch

from peer_timing import best_seconds


def best_ms(fn, reps=10):
    return best_seconds(fn, reps) * 1e3


def main():
    op, threads = sys.argv[1], int(sys.argv[2])
    torch.set_num_threads(threads)
    if op in ("silu_composed", "gelu_tanh_composed"):
        x = torch.randn((64 << 20) // 4)
        if op == "silu_composed":
            fn = lambda: x * torch.sigmoid(x)
        else:
            fn = lambda: 0.5 * x * (1.0 + torch.tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)))
    else:
        x = torch.randn(16384, 1024)
        w = torch.randn(1024)
        if op == "softmax":
            fn = lambda: torch.softmax(x, -1)
        else:
            fn = lambda: torch.nn.functional.rms_norm(x, (1024,), w, 1e-6)
    with torch.no_grad():
        print(best_ms(fn))


if __name__ == "__main__":
    main()
