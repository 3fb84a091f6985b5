"""Per-call overhead of the Python package: hyperparallel.add on 16 f32 elements from Python
against the same add called from C++ in a loop (target: at most 3 µs above it), beside PyTorch's
per-op time when torch is installed.

    python bench/python_overhead.py [--iters N]
"""
import argparse
import time

import numpy as np

import hyperparallel as hp


def per_call(fn, iters):
    for _ in range(min(iters, 1000)):  # warm-up: allocator caches, branch predictors
        fn()
    t0 = time.perf_counter()
    for _ in range(iters):
        fn()
    return (time.perf_counter() - t0) / iters


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--iters", type=int, default=200_000)
    iters = ap.parse_args().iters
    a = hp.from_numpy(np.arange(16, dtype=np.float32))
    b = hp.from_numpy(np.ones(16, dtype=np.float32))
    cpp = hp._core._time_add(a, b, iters)
    rows = [("C++ hp::add (in-process loop)", cpp),
            ("Python hp.add(a, b)", per_call(lambda: hp.add(a, b), iters)),
            ("Python a + b", per_call(lambda: a + b, iters))]
    try:
        import torch
        ta, tb = torch.arange(16, dtype=torch.float32), torch.ones(16)
        rows.append(("PyTorch torch.add(a, b)", per_call(lambda: torch.add(ta, tb), iters)))
    except ImportError:
        rows.append(("PyTorch torch.add(a, b)", None))
    print(f"add of 16 f32 elements, {iters} calls each")
    for name, sec in rows:
        if sec is None:
            print(f"  {name:32s}  skipped: torch is not installed")
            continue
        extra = f"  (+{(sec - cpp) * 1e6:.2f} µs over C++)" if sec is not rows[0][1] else ""
        print(f"  {name:32s} {sec * 1e6:8.2f} µs/call{extra}")
    overhead = rows[1][1] - cpp
    print(f"Python overhead {overhead * 1e6:.2f} µs per call (target <= 3 µs): "
          f"{'met' if overhead <= 3e-6 else 'NOT met'}")


if __name__ == "__main__":
    main()
