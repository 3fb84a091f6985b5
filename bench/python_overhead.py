"""Per-call overhead of the Python package: hyperparallel.add on 16 f32 elements from Python
against the same add called from C++ in a loop (target: at most 3 µs above it), beside PyTorch's
own per-op time on the same shapes (torch.add and + of 16 f32 elements, as a PyTorch user calls
them).

    python bench/python_overhead.py [--iters N] [--torch-python PYTHON]

The PyTorch rows run in a subprocess of --torch-python (an interpreter of an environment with
torch), by default this one; without torch there they say "skipped". Prints the table; figures
mean something only on a quiet machine.
"""
import argparse
import inspect
import subprocess
import sys
import time

import numpy as np

import hyperparallel as hp

# Times torch's per-op calls on the shapes above in a torch interpreter (after per_call's source);
# one line "name\tseconds" per row.
TORCH_ROWS = r"""
import time, torch
torch.set_num_threads(1)
ta, tb = torch.arange(16, dtype=torch.float32), torch.ones(16)
for name, fn in (("PyTorch torch.add(a, b)", lambda: torch.add(ta, tb)),
                 ("PyTorch a + b", lambda: ta + tb)):
    print(name + "\t" + repr(per_call(fn, ITERS)))
"""


def per_call(fn, iters):
    for _ in range(min(iters, 1000)):  # warm-up: allocator caches, branch predictors
        fn()
    t0 = time.perf_counter()
    for _ in range(iters):
        fn()
    return (time.perf_counter() - t0) / iters


def torch_rows(iters, torch_python):
    """[(name, seconds)] of TORCH_ROWS, or [(why skipped, None)]."""
    python = torch_python or sys.executable
    script = inspect.getsource(per_call) + TORCH_ROWS.replace("ITERS", str(iters))
    proc = subprocess.run([python, "-c", script],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        why = (proc.stderr.strip().splitlines() or ["failed"])[-1]
        return [(f"PyTorch: skipped ({python}: {why})", None)]
    return [(name, float(sec)) for name, sec in
            (line.split("\t") for line in proc.stdout.splitlines())]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--iters", type=int, default=200_000)
    ap.add_argument("--torch-python", help="an interpreter with torch, for the PyTorch rows")
    args = ap.parse_args()
    iters = args.iters
    a = hp.from_numpy(np.arange(16, dtype=np.float32))
    b = hp.from_numpy(np.ones(16, dtype=np.float32))
    cpp = hp._core._time_add(a, b, iters)
    rows = [("Python hp.add(a, b)", per_call(lambda: hp.add(a, b), iters)),
            ("Python a + b", per_call(lambda: a + b, iters))]
    print(f"add of 16 f32 elements, {iters} calls each")
    print(f"  {'C++ hp::add (in-process loop)':32s} {cpp * 1e6:8.2f} µs/call")
    for name, sec in rows + torch_rows(iters, args.torch_python):
        if sec is None:
            print(f"  {name}")
        else:
            print(f"  {name:32s} {sec * 1e6:8.2f} µs/call  ({(sec - cpp) * 1e6:+.2f} µs over "
                  "hp's C++ call)")
    overhead = rows[0][1] - cpp
    print(f"Python overhead {overhead * 1e6:.2f} µs per call (target <= 3 µs): "
          f"{'met' if overhead <= 3e-6 else 'NOT met'}")


if __name__ == "__main__":
    main()
