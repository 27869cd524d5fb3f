"""GPU timing shared by the examples: median GPU time per call from CUDA-graph replays (PyTorch)."""

from __future__ import annotations

from typing import Any


def time_ms(fn: Any, repeat: int = 20) -> tuple[float, str]:
    """(median milliseconds per call of ``fn``, how it was timed): GPU time from CUDA-graph replays.

    A graph of ``repeat`` calls replays without Python in between, so every competitor is
    timed on the GPU alone; if capture fails, back-to-back eager calls are timed instead.
    """
    import torch

    fn()
    torch.cuda.synchronize()
    method = "CUDA graph"
    try:
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for _ in range(repeat):
                fn()
        run = graph.replay
    except Exception:  # capture unsupported here: time eager launches
        torch.cuda.synchronize()
        method = "eager launches"

        def run() -> None:
            for _ in range(repeat):
                fn()

    run()
    samples = []
    for _ in range(7):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        run()
        end.record()
        end.synchronize()
        samples.append(start.elapsed_time(end) / repeat)
    return sorted(samples)[len(samples) // 2], method



def print_speedups(fused_ms: float, width: int, rivals: dict[str, tuple[float, str]]) -> None:
    """Print each rival's time per call and how it was timed (labels padded to ``width``), and the fused speedup."""
    for label, (ms, how) in rivals.items():
        print(f"  {label:<{width}}{ms:8.3f} ms  ({how}) -> fused speedup {ms / fused_ms:.2f}x")
