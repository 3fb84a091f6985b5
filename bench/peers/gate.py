"""PyTorch peer for bench_gate: prints the best-of-7 seconds of one forward + backward (w.r.t. the
logits) of the composed router, as transformers writes it, on the same shapes and thread count.

usage: gate.py MODE TOKENS THREADS
  MODE: softmax (Qwen3-MoE: softmax, top-8 of 64, normalized)
        deepseek (DeepSeek-V3: sigmoid + bias, 8 groups keep 4, top-8 of 256, normalized, x2.5)
"""
import sys

import torch

from peer_timing import best_seconds


def main():
    mode, n, threads = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    torch.set_num_threads(threads)
    e = 64 if mode == "softmax" else 256
    k = 8
    torch.manual_seed(1)
    logits = torch.randn(n, e, requires_grad=True)
    g = torch.randn(n, k)
    bias = torch.randn(e) * 0.1

    def step():
        if mode == "softmax":
            p = torch.softmax(logits, dim=-1)
            w, idx = torch.topk(p, k, dim=-1)
            w = w / w.sum(dim=-1, keepdim=True)
        else:
            p = logits.sigmoid()
            c = p.detach() + bias
            groups = c.view(n, 8, e // 8).topk(2, dim=-1)[0].sum(dim=-1)
            gidx = torch.topk(groups, 4, dim=-1, sorted=False)[1]
            mask = torch.zeros_like(groups).scatter_(1, gidx, 1)
            mask = mask.unsqueeze(-1).expand(n, 8, e // 8).reshape(n, e)
            idx = torch.topk(c.masked_fill(~mask.bool(), 0.0), k, dim=-1, sorted=False)[1]
            w = p.gather(1, idx)
            w = w / (w.sum(dim=-1, keepdim=True) + 1e-20) * 2.5
        logits.grad = None
        (w * g).sum().backward()

    print(best_seconds(step, reps=7))


if __name__ == "__main__":
    main()
