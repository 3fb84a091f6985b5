"""Peer for bench_optimizer: torch.nn.utils.clip_grad_norm_ then torch.optim.AdamW(fused=True)
step over the parameter shapes of configs/bench_5m.yaml (the peer of hp bench train uses the same).

Usage: optimizer.py threads
Prints the best-of-reps seconds of one clip + step on its last line.
"""
import sys

import torch

from peer_timing import best_seconds

# bench_5m: embeddings and lm_head [4096, 256], 4 layers of q/k/v/o [256, 256], gate/up
# [688, 256], down [256, 688] and two norms [256], the final norm [256]: 5,261,568 parameters.
SHAPES = ([(4096, 256)] + [(256, 256)] * 4 * 4 + [(688, 256), (688, 256), (256, 688)] * 4 +
          [(256,)] * 9 + [(4096, 256)])


def main():
    torch.set_num_threads(int(sys.argv[1]))
    torch.manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(s) * 0.02) for s in SHAPES]
    for p in params:
        p.grad = torch.randn(p.shape)
    opt = torch.optim.AdamW(params, lr=1e-3, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.1,
                            fused=True)

    def step():
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()

    print(best_seconds(step, reps=20))


if __name__ == "__main__":
    main()
