"""Peer for bench_gemm: torch.matmul GFLOP/s on the same shape, dtype and thread count.

Usage: gemm.py M N K DTYPE THREADS TRANS_B   (DTYPE f32|bf16, TRANS_B 0|1: B stored [N, K])
Prints the best-of GFLOP/s as the last line.

torch's bf16 matmul has no fast path on CPUs without AVX512-BF16/AMX (it runs well under
1 GFLOP/s here), so a full large bf16 product would take minutes: the peer then times a slice of
the rows of A (same N and K) sized to about half a second, and says so on stderr.
"""
import sys
import time

import torch


def main():
    m, n, k = (int(x) for x in sys.argv[1:4])
    dtype = {"f32": torch.float32, "bf16": torch.bfloat16}[sys.argv[4]]
    torch.set_num_threads(int(sys.argv[5]))
    trans_b = sys.argv[6] == "1"
    gen = torch.Generator().manual_seed(0)
    a = torch.randn(m, k, generator=gen).to(dtype)
    b = torch.randn(n, k, generator=gen).to(dtype).t() if trans_b else torch.randn(
        k, n, generator=gen).to(dtype)

    def timed(rows):
        t0 = time.perf_counter()
        torch.matmul(a[:rows], b)
        return time.perf_counter() - t0

    rows = m
    if dtype == torch.bfloat16:
        probe = min(m, 16)
        per_row = timed(probe) / probe
        rows = max(1, min(m, int(0.5 / max(per_row, 1e-12))))
        if rows < m:
            print(f"bf16 peer timed on {rows} of {m} rows", file=sys.stderr)
    timed(rows)
    best, spent = float("inf"), 0.0
    for _ in range(10):
        t = timed(rows)
        best, spent = min(best, t), spent + t
        if spent > 2.0:
            break
    print(2.0 * rows * n * k / best / 1e9)


if __name__ == "__main__":
    main()
