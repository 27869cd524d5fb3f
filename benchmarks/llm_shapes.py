"""The Hopper engine on the layer shapes of real LLMs, against torch on the same data.

    python benchmarks/llm_shapes.py [--quick] [--types bf16 f16 tf32 e4m3 fp8-tensor ...]
                                    [--ms 16 128 2048] [--layouts nk kn] [--shapes 512x6144x4096 ...]
                                    [--sweep] [--sweep-transposition] [--json PATH]

Every case is x [M, K] @ w with the weight stored the way frameworks store it: ``nk``, the
row-major [N, K] weight of a linear layer read transposed (y column-major, K-major: what
every competitor reads fastest), or ``kn``, a row-major [K, N] weight (y row-major,
N-major). Shapes (K x N) are those of Llama-3-8B, Llama-3-70B, DeepSeek-V3's dense layers
and a Mixtral expert, at M in {16, 64, 128, 512, 2048, 8192}.

Types: bf16 / f16 (bx.matmul against torch.matmul, each writing the result type torch.matmul
gives: bf16 inputs as bx.matmul(x, w, out_dtype=bx.bfloat16), f32 sums rounded once), tf32 (bx.matmul of bx.tf32 operands
against torch.matmul with tf32 allowed), e4m3 (bx.matmul of fp8 operands against
torch._scaled_mm with a column-major y, the layout it needs, and beside it bx.scaled_mm with
a column-major y: the goal of a row-major y), fp8-tensor / fp8-row / fp8-block
(bx.scaled_mm with per-tensor, per-row/column and 1x128 / 128x128 block scales against
torch._scaled_mm with the same scales; block scales against torch's block-scaled call where
this torch has one), f32 / f64 on a subset.

Two timings per case, both for every competitor: GPU time (a CUDA graph of many calls
replayed, so the host does not count) and call time (back-to-back calls between CUDA
events). Every blasdx result is checked on sampled rows against the float64 product
before it is timed. ``--sweep`` times the engine's candidate configurations and K splits on
one shape per class (GPU time; JSON under ``sweep``) for blasdx/engine/hopper.py's rule.
Writes ``benchmarks/results/llm_shapes.json``: ``meta`` {gpu, date, torch}, ``rows`` and a
geomean of the GPU-time ratios per type.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from batched import cuda_sm, pyplot

import blasdx as bx
from blasdx.base import dtypes as dt
from blasdx.reference import tolerance

#: K x N of each model's linear layers (x [M, K] @ w -> [M, N]).
MODELS: dict[str, list[tuple[int, int]]] = {
    "llama3-8b": [(4096, 6144), (4096, 4096), (4096, 28672), (14336, 4096)],
    "llama3-70b": [(8192, 10240), (8192, 8192), (8192, 57344), (28672, 8192)],
    "deepseek-v3": [(7168, 2112), (1536, 24576), (512, 32768), (16384, 7168)],
    "mixtral-expert": [(4096, 14336), (14336, 4096)],
}
MS = (16, 64, 128, 512, 2048, 8192)
LAYOUTS = ("nk", "kn")
TYPES = ("bf16", "f16", "tf32", "e4m3", "fp8-tensor", "fp8-row", "fp8-block", "f32", "f64")
#: the subset of shapes the slow types (f32 / f64 on CUDA cores and DMMA) run
SLOW_SHAPES = [("llama3-8b", 4096, 4096), ("llama3-8b", 14336, 4096)]
SLOW_MS = (16, 128, 2048)

#: --quick: a few shapes per class (decode, small prefill, large prefill; narrow and wide N; deep K)
QUICK = {
    "bf16": ([("llama3-8b", 4096, 4096), ("llama3-8b", 4096, 28672), ("llama3-8b", 14336, 4096),
              ("deepseek-v3", 7168, 2112)], (16, 128, 2048, 8192), ("nk", "kn")),
    "tf32": ([("llama3-8b", 4096, 4096), ("llama3-8b", 14336, 4096)], (16, 128, 2048), ("nk", "kn")),
    "e4m3": ([("llama3-8b", 4096, 4096), ("llama3-70b", 28672, 8192)], (16, 128, 2048),
             ("nk", "kn")),
    "fp8-tensor": ([("llama3-8b", 4096, 4096), ("llama3-8b", 14336, 4096)], (16, 128, 2048), ("nk",)),
    "fp8-block": ([("llama3-8b", 4096, 4096)], (128, 2048), ("nk",)),
}
#: --core: the 16-bit classes in depth (decode to large prefill, narrow and wide N, deep K), tf32 and fp8 skinny
CORE = {
    "bf16": ([("llama3-8b", 4096, 4096), ("llama3-8b", 4096, 28672), ("llama3-8b", 14336, 4096),
              ("deepseek-v3", 7168, 2112)], (16, 128, 512, 2048, 8192), ("nk", "kn")),
    "tf32": ([("llama3-8b", 4096, 4096), ("llama3-8b", 14336, 4096)], (16, 128, 2048), ("nk", "kn")),
    "e4m3": ([("llama3-8b", 4096, 4096), ("llama3-70b", 28672, 8192)], (16, 128, 2048), ("nk", "kn")),
    "fp8-tensor": ([("llama3-8b", 4096, 4096)], (16, 128, 2048), ("nk",)),
}

#: blasdx's result type where torch.matmul's differs from bx.matmul's default (the tile libraries' f32 for bf16)
TORCH_RESULTS = {dt.bfloat16: dt.bfloat16}
TARGET_REPLAY_MS = 2.0  # GPU time per graph replay the call count aims at
MAX_GRAPH_CALLS = 50


@dataclass
class Case:
    """One timed case: what it is, how to build its operands, and its results."""

    dtype: str
    model: str
    m: int
    n: int
    k: int
    layout: str
    row: dict = field(default_factory=dict)

    @property
    def name(self) -> str:
        return f"{self.dtype} {self.model} {self.m}x{self.n}x{self.k} {self.layout}"


def model_of(k: int, n: int) -> str:
    """The first model with a K x N layer, or "custom"."""
    return next((model for model, kn in MODELS.items() if (k, n) in kn), "custom")


def suite(types: list[str], ms: list[int] | None, layouts: list[str], quick: bool | dict,
          kn: list[tuple[int, int]] | None = None, shapes: list[tuple[int, int, int]] | None = None) -> list[Case]:
    """The cases to run, in order: type by type, shape by shape, M ascending; ``kn`` keeps only those K x N;
    ``shapes`` (M, N, K) runs exactly those, in the order given, for every type and layout asked for."""
    if shapes is not None:
        return [Case(t, model_of(k, n), m, n, k, layout) for t in types for m, n, k in shapes for layout in layouts
                if layout == "nk" or not t.startswith("fp8-")]
    cases = []
    preset = QUICK if quick is True else quick or None
    for t in types:
        if preset is CORE and t not in CORE:
            continue
        if preset:
            if t == "f16" or t not in preset and t not in ("f32", "f64", "fp8-row"):
                continue
            shapes, t_ms, t_layouts = preset.get(t, (SLOW_SHAPES[:1], (16, 2048), ("nk", "kn")))
        elif t in ("f32", "f64"):
            shapes, t_ms, t_layouts = SLOW_SHAPES, SLOW_MS, LAYOUTS
        else:
            shapes = [(model, k, n) for model, kn in MODELS.items() for k, n in kn]
            t_ms, t_layouts = MS, LAYOUTS
        if t.startswith("fp8-"):
            t_layouts = ("nk",)  # torch's scaled calls need a column-major y
        seen = set()
        for model, k, n in shapes:
            if (kn is not None and (k, n) not in kn) or (k, n) in seen:
                continue  # a weight shape two models share runs once
            seen.add((k, n))
            for m in (ms or t_ms):
                for layout in t_layouts:
                    if layout in layouts:
                        cases.append(Case(t, model, m, n, k, layout))
    return cases


# ---------------------------------------------------------------------------------------------
# timing
# ---------------------------------------------------------------------------------------------


def _events_ms(torch, run: Callable[[], None], stream, repeats: int) -> list[float]:
    samples = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record(stream)
        run()
        end.record(stream)
        end.synchronize()
        samples.append(start.elapsed_time(end))
    return samples


def gpu_ms(fn: Callable[[], Any], estimate_ms: float) -> float:
    """GPU milliseconds per call: a CUDA graph of enough calls to take TARGET_REPLAY_MS, median of 5 replays."""
    import torch

    calls = int(min(MAX_GRAPH_CALLS, max(3, TARGET_REPLAY_MS / max(estimate_ms, 1e-3))))
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):  # warm the capture stream: its scratch buffers exist before capture
        fn()
        fn()
    stream.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        for _ in range(calls):
            fn()
    graph.replay()
    samples = _events_ms(torch, graph.replay, torch.cuda.current_stream(), 5)
    del graph
    return float(np.median(samples)) / calls


def call_ms(fn: Callable[[], Any], calls: int = 10, repeats: int = 3) -> float:
    """Milliseconds per call of ``calls`` back-to-back calls between CUDA events (median of ``repeats``)."""
    import torch

    fn()

    def run() -> None:
        for _ in range(calls):
            fn()

    return float(np.median(_events_ms(torch, run, torch.cuda.current_stream(), repeats))) / calls


# ---------------------------------------------------------------------------------------------
# operands, calls, checks
# ---------------------------------------------------------------------------------------------


def _weight(torch, k: int, n: int, layout: str, dtype, gen, scale: float = 1.0):
    """The weight as y [K, N]: a view of a row-major [N, K] array (nk) or a row-major [K, N] array (kn)."""
    if layout == "nk":
        return (scale * torch.randn(n, k, device="cuda", generator=gen)).to(dtype).t()
    return (scale * torch.randn(k, n, device="cuda", generator=gen)).to(dtype)


def _scales(torch, shape, gen):
    return torch.exp2(4 * torch.rand(shape, device="cuda", generator=gen) - 2)


def _expand(s, rows: int, cols: int, block: bool, is_x: bool):
    """A scale expanded to its operand's shape (float64)."""
    import torch

    s = s.to(torch.float64)
    if not block:
        return s.expand(rows, cols)
    if is_x:
        return s.repeat_interleave(128, dim=1)[:, :cols]
    return s.repeat_interleave(128, dim=0)[:rows].repeat_interleave(128, dim=1)[:, :cols]


@dataclass
class Built:
    """A case's calls and its check: ``ours`` (blasdx), ``theirs`` (name -> torch call), ``check``."""

    ours: Callable[[], Any]
    theirs: dict[str, Callable[[], Any]]
    check: Callable[[Any], float]
    extra: dict[str, Callable[[], Any]] = field(default_factory=dict)  # more blasdx calls timed beside (goals)
    prepare: Callable[[], Any] | None = None  # compiles ours without launching anything


def _checker(torch, x, y, a: dt.DType, c: dt.DType, gen, sx=None, sy=None, block=False, promotion=None):
    """check(result): relative error of sampled rows against the float64 product; raises past the tolerance."""
    m, k = x.shape
    n = y.shape[1]
    rows = torch.randint(0, m, (min(m, 32),), generator=gen, device="cuda")
    xs = x[rows].to(torch.float64)
    yd = y.to(torch.float64)
    if sx is not None:
        sxe = _expand(sx, m, k, block, True)
        xs = xs * (sxe[rows] if sxe.dim() == 2 and sxe.shape[0] == m else sxe)
        yd = yd * _expand(sy, k, n, block, False)
    ref = xs @ yd
    acc = dt.float32 if c != dt.float64 else dt.float64
    tol = tolerance(a, c, k, acc, "wgmma", promotion) if promotion is not None else tolerance(a, c, k, acc)

    def check(got) -> float:
        out = got[rows].to(torch.float64)
        err = (torch.linalg.norm(out - ref) / torch.linalg.norm(ref)).item()
        if not err <= tol:
            raise AssertionError(f"relative error {err:.3e} exceeds {tol:.1e}")
        return err

    return check


def build(case: Case, gen) -> Built:
    """Operands on the GPU and the calls of one case."""
    import torch

    m, n, k, layout = case.m, case.n, case.k, case.layout
    torch.backends.cuda.matmul.allow_tf32 = case.dtype == "tf32"
    if case.dtype in ("bf16", "f16", "tf32", "f32", "f64"):
        tdt = {"bf16": torch.bfloat16, "f16": torch.float16, "tf32": torch.float32, "f32": torch.float32,
               "f64": torch.float64}[case.dtype]
        a = {"bf16": dt.bfloat16, "f16": dt.float16, "tf32": dt.tfloat32, "f32": dt.float32,
             "f64": dt.float64}[case.dtype]
        x = torch.randn(m, k, device="cuda", generator=gen).to(tdt)
        y = _weight(torch, k, n, layout, tdt, gen)
        bx_x, bx_y = (bx.tf32(x), bx.tf32(y)) if case.dtype == "tf32" else (x, y)
        c = TORCH_RESULTS.get(a, a)
        check = _checker(torch, x, y, a, c, gen)
        return Built(lambda: bx.matmul(bx_x, bx_y, out_dtype=c), {"torch": lambda: torch.matmul(x, y)}, check,
                     prepare=lambda: _compile_matmul(bx_x, bx_y, c))
    e4m3 = torch.float8_e4m3fn
    x = (2 * torch.randn(m, k, device="cuda", generator=gen)).to(e4m3)
    y = _weight(torch, k, n, layout, e4m3, gen, 2.0)
    y_col = y if layout == "nk" else y.t().contiguous().t()
    if case.dtype == "e4m3":  # bx.matmul of fp8 operands (f16 result)
        one = torch.ones((), device="cuda")
        check = _checker(torch, x, y, dt.float8_e4m3, dt.float16, gen, promotion=128)
        return Built(lambda: bx.matmul(x, y),
                     {"torch": lambda: torch._scaled_mm(x, y_col, scale_a=one, scale_b=one, out_dtype=torch.float16)},
                     check, {"bx.scaled_mm col-major y": lambda: bx.scaled_mm(x, y_col, one, one,
                                                                              out_dtype=bx.float16)},
                     prepare=lambda: (_compile_matmul(x, y), _compile_scaled(x, y_col, one, one, dt.float16)))
    block = case.dtype == "fp8-block"
    if case.dtype == "fp8-tensor":
        sx, sy = torch.tensor(0.5, device="cuda"), torch.tensor(2.0, device="cuda")
    elif case.dtype == "fp8-row":
        sx, sy = _scales(torch, (m, 1), gen), _scales(torch, (1, n), gen)
    else:
        kb, nb = math.ceil(k / 128), math.ceil(n / 128)
        sx = _scales(torch, (kb, m), gen).t()  # (M, K / 128), rows contiguous: torch's blockwise layout
        sy = _scales(torch, (nb, kb), gen).t()  # (K / 128, N / 128), column-major likewise
    check = _checker(torch, x, y, dt.float8_e4m3, dt.bfloat16, gen, sx, sy, block, promotion=128)
    ours = lambda: bx.scaled_mm(x, y, sx, sy, out_dtype=bx.bfloat16)
    prepare = lambda: _compile_scaled(x, y, sx, sy, dt.bfloat16)  # noqa: E731
    if not block:
        return Built(ours, {"torch": lambda: torch._scaled_mm(x, y_col, scale_a=sx, scale_b=sy,
                                                              out_dtype=torch.bfloat16)}, check, prepare=prepare)
    theirs = {}
    fn = getattr(torch.nn.functional, "scaled_mm", None)
    scaling = getattr(torch.nn.functional, "ScalingType", None)
    if fn is not None and scaling is not None:
        theirs["torch"] = lambda: fn(x, y_col, sx, scaling.BlockWise1x128, sy, scaling.BlockWise128x128,
                                     output_dtype=torch.bfloat16)
    else:
        theirs["torch"] = lambda: torch._scaled_mm(x, y_col, scale_a=sx, scale_b=sy, out_dtype=torch.bfloat16)
    one = torch.ones((), device="cuda")
    theirs["torch per-tensor"] = lambda: torch._scaled_mm(x, y_col, scale_a=one, scale_b=one,
                                                          out_dtype=torch.bfloat16)
    return Built(ours, theirs, check, prepare=prepare)


def _compile_matmul(x, y, c: dt.DType | None = None) -> None:
    """The kernel bx.matmul(x, y, out_dtype=c) runs, compiled (both cache levels) without a launch."""
    import torch

    from blasdx.calls import matmul as array_gemm

    handle = torch.cuda.current_stream().cuda_stream
    vx = array_gemm._view(x, "x", handle)
    plan = array_gemm._plan_matmul(vx, array_gemm._view(y, "y", handle), torch.cuda.current_device(),
                                   result=array_gemm.result_type(vx.dtype, c))
    if plan.kind == "hopper":
        plan.kernel.compiled  # noqa: B018  (compiles)


def _compile_scaled(x, y, sx, sy, c: dt.DType) -> None:
    """The kernel bx.scaled_mm runs on these operands, compiled without a launch."""
    import torch

    from blasdx.arrays import as_array
    from blasdx.calls import scaled_mm as sm

    vx, vy = as_array(x, "x"), as_array(y, "y")
    mx, my = sm._check_operands(vx, vy)
    m, n, k = mx.rows, my.cols, mx.cols
    scale_x = sm.scaling_of(as_array(sx, "scale_x"), "scale_x", m, k, n, True)
    scale_y = sm.scaling_of(as_array(sy, "scale_y"), "scale_y", m, k, n, False)
    call = sm._plan(vx, vy, mx, my, scale_x, scale_y, c, None, torch.cuda.current_device(), False)
    call.plan.compiled  # noqa: B018  (compiles)


def measure(case: Case, built: Built) -> dict:
    """Check, then time every call of a case; the row of the JSON."""
    import torch

    from blasdx.calls import matmul as array_gemm

    row = {"case": case.model, "dtype": case.dtype, "shape": [case.m, case.n, case.k], "layout": case.layout}
    flops = 2.0 * case.m * case.n * case.k
    try:
        got = built.ours()
        row["result"] = str(got.dtype).replace("torch.", "")
        row["error_rel"] = built.check(got)
        est = call_ms(built.ours, 3, 1)
        row["blasdx_gpu_ms"] = gpu_ms(built.ours, est)
        row["blasdx_call_ms"] = call_ms(built.ours)
        row["blasdx_tflops"] = flops / row["blasdx_gpu_ms"] / 1e9
        plan = next((p for p in reversed(list(array_gemm._CALLS.values())) if p.shape == (case.m, case.n)), None)
        if plan is not None:
            row["plan"] = plan.describe()
    except Exception as exc:  # a failing case is a result too
        row["blasdx_error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
    for who, call in list(built.theirs.items()) + list(built.extra.items()):
        key = "torch" if who == "torch" else who.replace(" ", "_").replace(".", "_")
        try:
            call()
            torch.cuda.synchronize()
            est = call_ms(call, 3, 1)
            row[f"{key}_gpu_ms"] = gpu_ms(call, est)
            row[f"{key}_call_ms"] = call_ms(call)
        except Exception as exc:
            row[f"{key}_error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
    if "blasdx_gpu_ms" in row and "torch_gpu_ms" in row:
        row["ratio"] = row["torch_gpu_ms"] / row["blasdx_gpu_ms"]
        row["call_ratio"] = row["torch_call_ms"] / row["blasdx_call_ms"]
    return row


def warm(cases: list[Case], workers: int) -> None:
    """Compile every case's kernels at once (NVRTC releases the GIL), launching nothing."""
    import torch

    def first(case: Case) -> None:
        gen = torch.Generator(device="cuda").manual_seed(1)
        try:
            built = build(Case(case.dtype, case.model, case.m, case.n, case.k, case.layout), gen)
            if built.prepare is not None:
                built.prepare()
        except Exception as exc:  # reported again when the case is measured
            print(f"  (compiling {case.name}: {type(exc).__name__}: {str(exc).splitlines()[0][:120]})")

    with ThreadPoolExecutor(workers) as pool:
        list(pool.map(first, cases))
    torch.cuda.synchronize()


# ---------------------------------------------------------------------------------------------
# --sweep: engine configurations per shape class
# ---------------------------------------------------------------------------------------------

#: shape classes (M x N x K, layout) and the configurations tried on each: base name, changes
SWEEP_SHAPES = [
    ("decode", 16, 4096, 4096, "nk"), ("decode", 16, 28672, 4096, "nk"), ("decode", 64, 4096, 14336, "nk"),
    ("decode", 128, 8192, 8192, "nk"), ("small", 512, 2112, 7168, "nk"), ("small", 512, 6144, 4096, "nk"),
    ("small", 1024, 1024, 1024, "nk"), ("mid", 2048, 2112, 7168, "nk"), ("mid", 2048, 4096, 4096, "nk"),
    ("mid", 2048, 28672, 4096, "nk"),
]
SWEEP_CONFIGS = [
    ("narrow", {}), ("narrow", {"bn": 128, "stages": 8}), ("narrow", {"bn": 64, "stages": 10}),
    ("pingpong", {}), ("pingpong", {"bm": 64, "bn": 256, "stages": 4}), ("pingpong", {"bm": 64, "bn": 128, "stages": 8}),
    ("wide", {}), ("pingpong", {"cluster": 2}), ("pingpong", {"stream_k": True}), ("medium", {"stream_k": True}),
    # 64-row tiles in clusters of 2 sharing the weights' tile (cuBLAS's choice at 512x2112x7168: 64x128, 1x2)
    ("medium", {"cluster": 2}), ("narrow", {"cluster": 2}),
]
SWEEP_SPLITS = (1, 2, 4, 8, 16)
#: --sweep-transposition: a [K, N] weight of tf32 / e4m3 (MN-major y, which wgmma reads only K-major), transposed
#: in shared memory or repacked first (hopper.TRANSPOSE_MAX_TILE_ROWS decides by tile rows), 4 to 32 tile rows
TRANSPOSITION_SHAPES = [("kn", m, n, 4096, "kn", kind) for kind in ("e4m3", "tf32") for n in (4096, 28672)
                        for m in (512, 2048, 4096)]
TRANSPOSITION_CONFIGS = [(base, {"transpose_b": flag}) for base in ("pingpong", "wide") for flag in (True, False)]
#: the waves a stream-K configuration shares (its launch's splits) in the sweep
SWEEP_WAVES = (2, 3)


def _sweep_operands(torch, kind: str, m: int, n: int, k: int, layout: str, gen):
    """(x, y, engine input type, result type, torch's call) of a sweep shape of type ``kind``."""
    from blasdx.calls.matmul import RESULT_TYPES

    if kind == "e4m3":
        x = (2 * torch.randn(m, k, device="cuda", generator=gen)).to(torch.float8_e4m3fn)
        y = _weight(torch, k, n, layout, torch.float8_e4m3fn, gen, 2.0)
        y_col = y if layout == "nk" else y.t().contiguous().t()
        one = torch.ones((), device="cuda")
        return x, y, dt.float8_e4m3, dt.float16, lambda: torch._scaled_mm(x, y_col, scale_a=one, scale_b=one,
                                                                        out_dtype=torch.float16)
    tdt = {"bf16": torch.bfloat16, "f16": torch.float16, "tf32": torch.float32}[kind]
    a = {"bf16": dt.bfloat16, "f16": dt.float16, "tf32": dt.tfloat32}[kind]
    x = torch.randn(m, k, device="cuda", generator=gen).to(tdt)
    y = _weight(torch, k, n, layout, tdt, gen)

    def theirs():
        torch.backends.cuda.matmul.allow_tf32 = kind == "tf32"
        return torch.matmul(x, y)

    return x, y, a, TORCH_RESULTS.get(a, RESULT_TYPES[a]), theirs


def sweep(gen, shapes=SWEEP_SHAPES, configs=SWEEP_CONFIGS, split_counts=SWEEP_SPLITS,
          deadline: float = 1e9) -> list[dict]:
    """GPU time of each candidate configuration and split count per shape (results checked first).

    A shape is (class, M, N, K, layout[, type]) with type bf16 (default), f16, tf32 or e4m3 (f16
    results, promoted every 128 K); a configuration is (base, changes) of blasdx/engine/hopper.py's
    CONFIGS, ``transpose_b`` among the changes forcing B's transposition in shared memory on or off.
    """
    import dataclasses

    import torch

    from blasdx import arrays
    from blasdx.calls import matmul as array_gemm
    from blasdx.engine import hopper

    device = array_gemm._device_info(torch.cuda.current_device())
    jobs = []
    rows = []
    competitors = []
    for shape in shapes:
        cls, m, n, k, layout = shape[:5]
        kind = shape[5] if len(shape) > 5 else "bf16"
        x, y, a, result, theirs = _sweep_operands(torch, kind, m, n, k, layout, gen)
        competitors.append((cls, m, n, k, layout, kind, theirs))
        check = _checker(torch, x, y, a, result, gen, promotion=128 if a.size == 1 else None)
        vx, vy = arrays.as_array(x, "x")._replace(dtype=a), arrays.as_array(y, "y")._replace(dtype=a)
        mx, my = array_gemm._matrix(vx, "x"), array_gemm._matrix(vy, "y")
        out = torch.empty((m, n), device="cuda", dtype={dt.float32: torch.float32, dt.float16: torch.float16,
                                                        dt.bfloat16: torch.bfloat16}[result])
        vout = arrays.as_array(out, "out")
        promotion = hopper.promotion_of(a)
        default = hopper.choose_config(a, m, n, k, 1, device.multiprocessors, promotion=promotion, stream_k=True)
        for base, changes in configs:
            if "only" in changes and kind not in changes["only"]:
                continue
            changes = {key: value for key, value in changes.items() if key != "only"}
            config = dataclasses.replace(hopper.CONFIGS[base], bk=128 // a.size, promotion=promotion, **changes)
            for splits in SWEEP_WAVES if config.stream_k else split_counts:
                steps = math.ceil(k / config.bk)
                units = math.ceil(m / config.bm) * math.ceil(n / config.bn)
                if not config.stream_k and splits > 1 and (
                        steps < 2 * splits or units >= device.multiprocessors * (2 if splits == 2 else 1)):
                    continue  # splits only where the tiles leave SMs idle
                entry = {"class": cls, "type": kind, "shape": [m, n, k], "layout": layout, "config": str(config),
                         "splits": splits, "default": (config, splits) == default}
                try:
                    engine, reason = array_gemm._engine_plan(vx, vy, mx, my, result, m, n, k, 1, device, vout,
                                                             config, splits)
                    if engine is None:
                        raise RuntimeError(reason)
                    entry["plan"] = engine.describe()
                    jobs.append((entry, engine, out, vx, vy, vout, check))
                except Exception as exc:
                    entry["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:160]}"
                rows.append(entry)

    def compiled(job):
        try:
            return job[1].compiled
        except Exception:
            return None

    with ThreadPoolExecutor(16) as pool:
        list(pool.map(compiled, jobs))
    for cls, m, n, k, layout, kind, theirs in competitors:  # torch first: its figure is the yardstick
        rows.append({"class": cls, "type": kind, "shape": [m, n, k], "layout": layout, "config": "torch",
                     "gpu_ms": gpu_ms(theirs, call_ms(theirs, 3, 1))})
    for entry, engine, out, vx, vy, vout, check in jobs:
        if time.monotonic() > deadline:
            entry["error"] = "skipped: out of time"
            continue

        def run(engine=engine, vx=vx, vy=vy, vout=vout) -> None:
            handle = torch.cuda.current_stream().cuda_stream
            core = arrays.as_core_stream(None, handle)
            engine.run(torch.cuda.current_device(), core, handle, vx, vy, None, vout, 1.0, 0.0)

        try:
            out.fill_(float("nan"))
            run()
            entry["error_rel"] = check(out)
            entry["gpu_ms"] = gpu_ms(run, call_ms(run, 3, 1))
            m, n, k = entry["shape"]
            entry["tflops"] = 2.0 * m * n * k / entry["gpu_ms"] / 1e9
            entry["registers"] = engine.compiled.registers
        except Exception as exc:
            entry["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:160]}"
        shown = f"{entry['gpu_ms'] * 1e3:8.1f} us" if "gpu_ms" in entry else entry["error"]
        print(f"  sweep {entry['type']} {entry['class']:9s} {'x'.join(map(str, entry['shape']))} {entry['layout']} "
              f"{entry['config']} x{entry['splits']}: {shown}{' (rule)' if entry['default'] else ''}", flush=True)
    for cls, m, n, k, layout, kind, _ in competitors:
        torch_ms = next(r["gpu_ms"] for r in rows if r["config"] == "torch" and r["shape"] == [m, n, k]
                        and r["layout"] == layout and r["type"] == kind)
        best = min((r for r in rows if r.get("shape") == [m, n, k] and r.get("layout") == layout and "gpu_ms" in r
                    and r.get("type") == kind and r["config"] != "torch"), key=lambda r: r["gpu_ms"], default=None)
        if best is not None:
            print(f"  best {kind} {cls:9s} {m}x{n}x{k} {layout}: {best['config']} x{best['splits']} "
                  f"{best['gpu_ms'] * 1e3:.1f} us, torch {torch_ms * 1e3:.1f} us ({torch_ms / best['gpu_ms']:.2f}x)",
                  flush=True)
    return rows


# ---------------------------------------------------------------------------------------------
# main
# ---------------------------------------------------------------------------------------------


def plot(rows: list[dict], path: Path) -> None:
    """GPU-time ratio (torch / blasdx) per case, a bar each, grouped by type; the goal of 1.0 marked."""
    plt = pyplot()
    rows = [r for r in rows if "ratio" in r]
    if plt is None or not rows:
        return
    labels = [f"{r['dtype']} {'x'.join(map(str, r['shape']))} {r['layout']}" for r in rows]
    fig, ax = plt.subplots(figsize=(max(8, len(rows) * 0.22), 5))
    colors = {t: f"C{i}" for i, t in enumerate(sorted({r["dtype"] for r in rows}))}
    ax.bar(range(len(rows)), [r["ratio"] for r in rows], color=[colors[r["dtype"]] for r in rows])
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xticks(range(len(rows)), labels, rotation=90, fontsize=6)
    ax.set_ylabel("torch GPU time / blasdx GPU time")
    ax.set_title("LLM layer shapes (M x N x K, weight nk or kn): above 1, blasdx is faster")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print(f"plot: {path}")


def geomeans(rows: list[dict]) -> dict[str, float]:
    """Geometric mean of the GPU-time ratios (torch / blasdx) per type."""
    out = {}
    for t in sorted({r["dtype"] for r in rows}):
        ratios = [r["ratio"] for r in rows if r["dtype"] == t and "ratio" in r]
        if ratios:
            out[t] = float(math.exp(sum(math.log(v) for v in ratios) / len(ratios)))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a few shapes per class (bf16, tf32, fp8, f32, f64)")
    parser.add_argument("--core", action="store_true", help="bf16 in depth, tf32 and fp8 skinny (CORE)")
    parser.add_argument("--types", nargs="*", default=list(TYPES), choices=list(TYPES))
    parser.add_argument("--ms", nargs="*", type=int, default=None, help="M values (default: the suite's)")
    parser.add_argument("--layouts", nargs="*", default=list(LAYOUTS), choices=list(LAYOUTS))
    parser.add_argument("--kn", nargs="*", default=None, metavar="KxN", help="only these weight shapes (K x N)")
    parser.add_argument("--shapes", nargs="*", default=None, metavar="MxNxK",
                        help="exactly these shapes (M x N x K) for each type and layout asked for")
    parser.add_argument("--sweep", action="store_true", help="time the engine's candidate configurations first")
    parser.add_argument("--sweep-transposition", action="store_true",
                        help="time tf32 / e4m3 [K, N] weights transposed in shared memory against repacked")
    parser.add_argument("--no-suite", action="store_true", help="only the sweep")
    parser.add_argument("--budget", type=float, default=1e9, help="seconds: stop starting new cases after this")
    parser.add_argument("--workers", type=int, default=12, help="threads compiling kernels at once")
    parser.add_argument("--json", default="benchmarks/results/llm_shapes.json")
    args = parser.parse_args()
    sm = cuda_sm()
    if sm is None:
        return 0
    import torch

    begin = time.monotonic()
    deadline = begin + args.budget
    gen = torch.Generator(device="cuda").manual_seed(0)
    out = Path(args.json)
    out.parent.mkdir(parents=True, exist_ok=True)
    meta = {"gpu": torch.cuda.get_device_name(), "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "torch": torch.__version__, "blasdx": bx.__version__,
            "timing": f"GPU: CUDA-graph replay aiming at {TARGET_REPLAY_MS} ms, median of 5; call: 10 back-to-back "
                      "calls between CUDA events, median of 3"}
    result: dict[str, Any] = {"meta": meta, "rows": [], "geomean": {}, "sweep": []}

    def save() -> None:
        result["geomean"] = geomeans(result["rows"])
        out.write_text(json.dumps(result, indent=1))

    kn = None if args.kn is None else [tuple(int(v) for v in text.lower().split("x")) for text in args.kn]
    shapes = None if args.shapes is None else [tuple(int(v) for v in text.lower().split("x")) for text in args.shapes]
    cases = [] if args.no_suite else suite(args.types, args.ms, args.layouts, CORE if args.core else args.quick, kn,
                                           shapes)
    if cases and sm == 90:
        t0 = time.monotonic()
        warm(cases, args.workers)
        print(f"compiled {len(cases)} cases' kernels in {time.monotonic() - t0:.1f} s", flush=True)
    print("\n| type | model | M x N x K | w | blasdx GPU us | torch GPU us | GPU ratio | call ratio | plan |")
    print("|---|---|---|---|---|---|---|---|---|")
    for case in cases:
        if time.monotonic() > deadline:
            print(f"out of time: {len(cases) - len(result['rows'])} cases not run")
            break
        try:
            row = measure(case, build(case, gen))
        except Exception as exc:
            row = {"case": case.model, "dtype": case.dtype, "shape": [case.m, case.n, case.k], "layout": case.layout,
                   "blasdx_error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}"}
        result["rows"].append(row)
        ours = f"{row['blasdx_gpu_ms'] * 1e3:.1f}" if "blasdx_gpu_ms" in row else row.get("blasdx_error", "?")[:60]
        theirs = f"{row['torch_gpu_ms'] * 1e3:.1f}" if "torch_gpu_ms" in row else row.get("torch_error", "?")[:60]
        ratio = f"{row['ratio']:.2f}x" if "ratio" in row else "n/a"
        cratio = f"{row['call_ratio']:.2f}x" if "call_ratio" in row else "n/a"
        extra = "".join(f"; {k[:-7]} {v * 1e3:.1f} us" for k, v in row.items()
                        if k.endswith("_gpu_ms") and not k.startswith(("blasdx", "torch_gpu")))
        print(f"| {case.dtype} | {case.model} | {case.m}x{case.n}x{case.k} | {case.layout} | {ours} | {theirs} | "
              f"{ratio} | {cratio} | {row.get('plan', '')[:90]}{extra} |", flush=True)
        save()
        torch.cuda.empty_cache()
    if args.sweep and sm == 90:
        result["sweep"] = sweep(gen, deadline=deadline)
    if args.sweep_transposition and sm == 90:
        result["sweep"] += sweep(gen, TRANSPOSITION_SHAPES, TRANSPOSITION_CONFIGS, (1,), deadline=deadline)
    save()
    print("\ngeomean GPU-time ratio (torch / blasdx): "
          + ", ".join(f"{t} {v:.2f}x" for t, v in result["geomean"].items()))
    print(f"JSON: {out} ({time.monotonic() - begin:.0f} s)")
    plot(result["rows"], out.with_suffix(".png"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
