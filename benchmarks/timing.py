"""CUDA-event timing shared by the benchmarks (run as ``python benchmarks/x.py``: this folder is on sys.path)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np


def events_ms(fn: Callable[[], Any], repeats: int = 20, warmup: int = 2, calls: int = 1) -> float:
    """Milliseconds per call of ``fn``: median over ``repeats`` of ``calls`` back-to-back calls between CUDA events."""
    import torch

    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(calls):
            fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / calls)
    return float(np.median(times))


def time_ms(fn: Callable[[], Any], repeats: int = 20) -> float:
    """Median milliseconds of ``fn`` over CUDA events, after two warm-up calls."""
    return events_ms(fn, repeats)
