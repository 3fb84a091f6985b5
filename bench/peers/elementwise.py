"""PyTorch peer for bench_elementwise: prints GB/s (bytes read + written, as the C++ side counts)
of one op on the same shapes and thread count.

usage: elementwise.py OP DTYPE THREADS
  OP: add mul silu gelu silu_bwd gelu_bwd (64 MiB tensors) | rms_norm rms_norm_fb ([16384, 1024] f32)
  (silu_bwd / gelu_bwd: the autograd kernels aten.silu_backward / gelu_backward on (dy, x).)
"""
import sys

import torch

from peer_timing import best_seconds




def main():
    op, dtype_name, threads = sys.argv[1], sys.argv[2], int(sys.argv[3])
    torch.set_num_threads(threads)
    dt = {"f32": torch.float32, "bf16": torch.bfloat16}[dtype_name]
    if op in ("add", "mul", "silu", "gelu", "silu_bwd", "gelu_bwd"):
        n = (64 << 20) // torch.tensor([], dtype=dt).element_size()
        a = torch.randn(n).to(dt)
        b = torch.randn(n).to(dt)
        fns = {"add": lambda: a + b, "mul": lambda: a * b,
               "silu": lambda: torch.nn.functional.silu(a), "gelu": lambda: torch.nn.functional.gelu(a),
               "silu_bwd": lambda: torch.ops.aten.silu_backward(b, a),
               "gelu_bwd": lambda: torch.ops.aten.gelu_backward(b, a)}
        tensors = 2 if op in ("silu", "gelu") else 3
        nbytes = tensors * n * a.element_size()
        fn = fns[op]
    else:
        rows, dim = 16384, 1024
        x = torch.randn(rows, dim).to(dt)
        w = torch.randn(dim).to(dt)
        g = torch.randn(rows, dim).to(dt)
        if op == "rms_norm":
            fn = lambda: torch.nn.functional.rms_norm(x, (dim,), w, 1e-6)
            nbytes = 2 * x.numel() * x.element_size()
        else:
            xr = x.clone().requires_grad_()
            wr = w.clone().requires_grad_()

            def fn():
                y = torch.nn.functional.rms_norm(xr, (dim,), wr, 1e-6)
                y.backward(g)
                xr.grad = None
                wr.grad = None

            # forward: read x, write y; backward: read g and x, write dx.
            nbytes = 5 * x.numel() * x.element_size()
    with torch.no_grad() if op != "rms_norm_fb" else torch.enable_grad():
        s = best_seconds(fn)
    print(nbytes / s / 1e9)


if __name__ == "__main__":
    main()
