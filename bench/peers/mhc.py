"""PyTorch peer for bench_mhc: prints the best-of-5 seconds of one forward + backward of an mHC
block (transformers' DeepseekV4HyperConnection math in torch eager: the flattened streams' rms, the
fn linear, sigmoid / 2·sigmoid / softmax + 20 Sinkhorn iterations, the collapse, the block input's
RMSNorm, and the fold post ⊗ out + combᵀ · streams), f32, hc_mult 4, on the same shapes and
thread count. The block output `out` is a leaf, as in bench_mhc.

usage: mhc.py TOKENS HIDDEN THREADS
"""
import sys

import torch

from peer_timing import best_seconds


def rms(x, eps=1e-6):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)


def main():
    tokens, d, threads = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    torch.set_num_threads(threads)
    n, iters, eps = 4, 20, 1e-6
    torch.manual_seed(1)
    streams = torch.randn(1, tokens, n, d, requires_grad=True)
    out = torch.randn(1, tokens, d, requires_grad=True)
    fn = (torch.randn((2 + n) * n, n * d) * 0.02).requires_grad_()
    base = torch.zeros((2 + n) * n, requires_grad=True)
    scale = torch.ones(3, requires_grad=True)
    weight = torch.ones(d, requires_grad=True)
    g = torch.randn(1, tokens, n, d)
    g_in = torch.randn(1, tokens, d)

    def step():
        for t in (streams, out, fn, base, scale, weight):
            t.grad = None
        mixes = torch.nn.functional.linear(rms(streams.flatten(2)), fn)
        pre, post, comb = mixes.split([n, n, n * n], dim=-1)
        bp, bq, bc = base.split([n, n, n * n])
        pre = torch.sigmoid(pre * scale[0] + bp) + eps
        post = 2 * torch.sigmoid(post * scale[1] + bq)
        comb = comb.view(1, tokens, n, n) * scale[2] + bc.view(n, n)
        comb = torch.softmax(comb, dim=-1) + eps
        comb = comb / (comb.sum(-2, keepdim=True) + eps)
        for _ in range(iters - 1):
            comb = comb / (comb.sum(-1, keepdim=True) + eps)
            comb = comb / (comb.sum(-2, keepdim=True) + eps)
        x = (pre.unsqueeze(-1) * streams).sum(2)
        inp = weight * rms(x)
        y = post.unsqueeze(-1) * out.unsqueeze(-2) + torch.matmul(comb.transpose(-1, -2), streams)
        torch.autograd.backward([y, inp], [g, g_in])

    print(best_seconds(step, reps=5))


if __name__ == "__main__":
    main()
