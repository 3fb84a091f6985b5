"""Timing shared by the PyTorch peer scripts of bench/ (imported from the scripts' own directory)."""
import time


def best_seconds(fn, reps=10):
    """Best-of-`reps` wall seconds of fn() after one warm-up call."""
    fn()
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best
