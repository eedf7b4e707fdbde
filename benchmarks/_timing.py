"""Timing helper shared by the benchmark scripts (run them from the repository root)."""

import time


def best_of(fn, repeat=3):
    """The shortest of ``repeat`` wall-clock timings of ``fn()``, in seconds."""
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def int_list(text):
    """``"256,1024"`` -> ``[256, 1024]``: the benchmarks' comma-separated size options."""
    return [int(v) for v in text.split(",") if v.strip()]
