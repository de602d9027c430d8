"""Timers every benchmark family uses: do_bench medians, host time per call, CUDA-graph time."""

from __future__ import annotations

import time
from typing import Callable

from drill.kernels.common import graph_ms, median_ms  # noqa: F401  (re-exported for the families)


def host_us(fn: Callable, calls: int = 200) -> float:
    """Host microseconds per call, the GPU left to run behind: what a call costs the CPU."""
    import torch

    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    t1 = time.perf_counter()
    torch.cuda.synchronize()
    return (t1 - t0) / calls * 1e6
