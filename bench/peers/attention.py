"""Peer for bench_attention: PyTorch scaled_dot_product_attention forward + backward, f32, causal.

Usage: attention.py B Hq Hkv T D threads
Prints the best-of-reps seconds for one forward + backward on its last line.
"""
import sys

import torch
import torch.nn.functional as F

from peer_timing import best_seconds


def main():
    b, hq, hkv, t, d, threads = (int(x) for x in sys.argv[1:7])
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    q = torch.randn(b, hq, t, d, requires_grad=True)
    k = torch.randn(b, hkv, t, d, requires_grad=True)
    v = torch.randn(b, hkv, t, d, requires_grad=True)
    g = torch.randn(b, hq, t, d)

    def step():
        q.grad = k.grad = v.grad = None
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=hq != hkv)
        o.backward(g)

    print(best_seconds(step, reps=5))


if __name__ == "__main__":
    main()
