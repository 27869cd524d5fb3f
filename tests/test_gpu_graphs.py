"""Every array call in CUDA graphs (PyTorch's ``torch.cuda.graph``): captured, dropped, replayed with new data.

* The sequence of the bug report, as it ran: in one process, per bf16 shape (split-K plans
  among them), one eager call, one on a side stream, then a capture of 1 and one of 20
  calls, each graph a local of a function that returns (no ``gc.collect()``), replayed 3
  times with new input data; every result checked against the float64 product.
* A graph is freed when its function returns: nothing of a capture stays in blasdx (a
  workspace address, a reference to the capture's frame or tensors).
* bx.matmul (engine, split K, a repacked operand, the wide f64 path), bx.mma(out=),
  bx.scaled_mm, bx.solve_triangular and a descriptor's execute(): many calls of several
  shapes in one graph, and graphs one after another with the earlier ones dropped, eager
  calls between and after.
"""

from __future__ import annotations

import gc
import weakref
from collections.abc import Callable
from typing import Any, NamedTuple

import pytest

import blasdx as bx
from blasdx.base import dtypes as dt
from blasdx.launch import scratch as _scratch
from blasdx.reference import tolerance

from .gpu_support import gpu_sm, gpu_torch, require_gpu, torch_relative_error

pytestmark = pytest.mark.gpu

#: The shapes of the report (M, N, K), bf16 -> f32: 16 x 8192 x 8192 is the first split-K plan.
REPORT_SHAPES = [(512, 512, 512), (16, 8192, 8192), (128, 8192, 28672), (64, 4096, 14336), (8192, 8192, 512)]


@pytest.fixture(scope="module")
def torch():
    return gpu_torch()


def _bf16_reference(torch, x, y):
    return x.to(torch.float64) @ y.to(torch.float64)


def _capture(torch, call: Callable[[], Any], count: int, refill: Callable[[], None], reference: Callable[[], Any],
             tol: Callable[[Any], float], replays: int, what: str) -> weakref.ref:
    """Capture ``count`` calls in a graph local to this function, replay it with new data and check every result.

    ``reference()`` is the float64 result of the current data, ``tol(out)`` the bound for a
    result. Returns a weak reference to the graph, which is gone once this returns unless
    something still holds the graph or this frame.
    """
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        outs = [call() for _ in range(count)]
    for replay in range(replays):
        refill()
        for out in outs:
            out.fill_(float("nan"))  # poisoned: each replay writes every result
        graph.replay()
        torch.cuda.synchronize()
        ref = reference()
        for i, out in enumerate(outs):
            _assert_close(torch, out, ref, tol(out), f"{what}, graph of {count}, replay {replay}, result {i}")
    return weakref.ref(graph)


def _assert_close(torch, out, ref, tol: float, label: str) -> None:
    err = torch_relative_error(torch, out, ref)
    assert err <= tol, f"{label}: relative error {err:.3e} exceeds {tol:.1e}"


def _report_sequence(torch, call: Callable[[Any, Any], Any]) -> list[weakref.ref]:
    """The report's steps for every shape; returns weak references to the graphs made."""
    gen = torch.Generator(device="cuda").manual_seed(32)
    dropped = []
    for m, n, k in REPORT_SHAPES:
        x = torch.randn(m, k, device="cuda", generator=gen).to(torch.bfloat16)
        y = torch.randn(k, n, device="cuda", generator=gen).to(torch.bfloat16)
        what = f"{m}x{n}x{k}"

        def tol(out, k=k) -> float:  # blasdx: f32 results; torch: bf16 results, which cuBLAS may sum in bf16
            return tolerance(dt.bfloat16, dt.float32, k) if out.dtype == torch.float32 else 2e-2

        def reference(x=x, y=y):
            return _bf16_reference(torch, x, y)

        def refill(x=x, y=y) -> None:
            x.normal_(generator=gen)
            y.normal_(generator=gen)

        out = call(x, y)
        _assert_close(torch, out, reference(), tol(out), f"{what}, eager")
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            out = call(x, y)
        torch.cuda.current_stream().wait_stream(side)
        _assert_close(torch, out, reference(), tol(out), f"{what}, side stream")
        for count in (1, 20):
            dropped.append(_capture(torch, lambda x=x, y=y: call(x, y), count, refill, reference, tol, 3, what))
        refill()
        out = call(x, y)
        _assert_close(torch, out, reference(), tol(out), f"{what}, eager after the graphs")
    return dropped


@pytest.mark.parametrize("library", ["torch", "blasdx"])
def test_report_sequence(torch, library):
    """The reported sequence passes for both libraries, and each dropped graph is freed at once."""
    if library == "blasdx" and (gpu_sm() or 0) < 80:
        pytest.skip("bf16 needs sm_80")
    call = torch.matmul if library == "torch" else bx.matmul
    dropped = _report_sequence(torch, call)
    alive = [i for i, ref in enumerate(dropped) if ref() is not None]
    assert not alive, f"graphs {alive} (of {len(dropped)}) outlived the functions that made them"
    x = torch.randn(64, 64, device="cuda", dtype=torch.bfloat16)
    assert torch_relative_error(torch, call(x, x), _bf16_reference(torch, x, x)) <= 2e-2
    torch.cuda.synchronize()  # the process's CUDA state is sound


def test_graph_freed_when_its_function_returns(torch):
    """Without the cycle collector, a graph of split-K calls is freed when its function returns."""
    if (gpu_sm() or 0) < 80:
        pytest.skip("bf16 needs sm_80")
    x = torch.randn(16, 8192, device="cuda", dtype=torch.bfloat16)
    y = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    bx.matmul(x, y)
    torch.cuda.synchronize()
    held = _scratch.POOL.held()

    tol = tolerance(dt.bfloat16, dt.float32, 8192)
    enabled = gc.isenabled()
    gc.disable()
    try:
        gc.collect()
        for count in (1, 3):
            ref = _capture(torch, lambda: bx.matmul(x, y), count, lambda: None, lambda: _bf16_reference(torch, x, y),
                           lambda out: tol, 2, "16x8192x8192")
            assert ref() is None, "the graph outlived its function: something still holds it or its frame"
        assert gc.collect() == 0, "the calls left reference cycles behind"
    finally:
        if enabled:
            gc.enable()
    assert _scratch.POOL.held() == held, "a capture changed the scratch pool (its buffers must stay the graph's)"


# ---- every array call, graphs one after another ---------------------------------------------------------


class Case(NamedTuple):
    """One kind of call: a call on fixed arrays, new data for them, the float64 result and the bound."""

    name: str
    call: Callable[[], Any]
    refill: Callable[[], None]
    reference: Callable[[], Any]
    tol: float

    def check(self, torch, out, label: str) -> None:
        _assert_close(torch, out, self.reference(), self.tol, label)


def _cases(torch, sm: int) -> list[Case]:
    gen = torch.Generator(device="cuda").manual_seed(7)
    f64 = torch.float64
    cases = []

    def normal(*tensors, scale=1.0):
        def refill() -> None:
            for t in tensors:
                t.copy_(scale * torch.randn(t.shape, device="cuda", generator=gen))
        return refill

    # execute(): one block per problem, a batch of 37 16-bit problems
    desc = (bx.Size(32, 32, 32) + bx.Precision(bx.float16, bx.float16, bx.float32) + bx.Function.MM
            + bx.SM(min(sm, 90)) + bx.Block())
    a = torch.randn(37, 32, 32, device="cuda", generator=gen).to(torch.float16)
    b = torch.randn(37, 32, 32, device="cuda", generator=gen).to(torch.float16).transpose(1, 2)  # column-major
    c = torch.zeros(37, 32, 32, device="cuda").transpose(1, 2)
    cases.append(Case("execute 37 x 32^3 f16", lambda: (desc.execute(a, b, c), c)[1], normal(a, b),
                      lambda: a.to(f64) @ b.to(f64), tolerance(dt.float16, dt.float32, 32)))
    # solve_triangular: a lower float32 triangle, well conditioned
    t = torch.randn(96, 96, device="cuda", generator=gen).tril() * 0.05 + 4 * torch.eye(96, device="cuda")
    rhs = torch.randn(96, 40, device="cuda", generator=gen)

    def refill_solve() -> None:
        t.copy_(torch.randn(96, 96, device="cuda", generator=gen).tril() * 0.05 + 4 * torch.eye(96, device="cuda"))
        rhs.normal_(generator=gen)

    cases.append(Case("solve_triangular 96 x 40 f32", lambda: bx.solve_triangular(t, rhs, lower=True), refill_solve,
                      lambda: torch.linalg.solve_triangular(t.to(f64), rhs.to(f64), upper=False), 1e-5))
    if sm < 90:
        return cases
    # the engine, split K; mma into a given out
    x = torch.randn(16, 8192, device="cuda", generator=gen).to(torch.float16)
    y = torch.randn(8192, 2048, device="cuda", generator=gen).to(torch.float16)
    acc = torch.randn(16, 2048, device="cuda", generator=gen)
    out = torch.empty(16, 2048, device="cuda")
    cases.append(Case("mma(out=) 16x2048x8192 f16 -> f32 (split K)", lambda: bx.mma(x, y, acc, out=out),
                      normal(x, y, acc),
                      lambda: x.to(f64) @ y.to(f64) + acc.to(f64), tolerance(dt.float16, dt.float32, 8192)))
    # tf32 with a row-major y: wgmma reads K-major tf32 only, so y is repacked into scratch first
    xt = torch.randn(200, 1024, device="cuda", generator=gen)
    yt = torch.randn(1024, 384, device="cuda", generator=gen)
    cases.append(Case("matmul tf32 200x384x1024 (y repacked)", lambda: bx.matmul(bx.tf32(xt), bx.tf32(yt)),
                      normal(xt, yt), lambda: xt.to(f64) @ yt.to(f64), tolerance(dt.tfloat32, dt.float32, 1024)))
    # the wide f64 path with split K
    xd = torch.randn(64, 16384, device="cuda", generator=gen, dtype=f64)
    yd = torch.randn(16384, 256, device="cuda", generator=gen, dtype=f64)
    cases.append(Case("matmul f64 64x256x16384", lambda: bx.matmul(xd, yd), normal(xd, yd),
                      lambda: xd @ yd, tolerance(dt.float64, dt.float64, 16384)))
    # scaled_mm: fp8, per-tensor scales, split K
    x8 = (2 * torch.randn(16, 8192, device="cuda", generator=gen)).to(torch.float8_e4m3fn)
    y8 = (2 * torch.randn(4096, 8192, device="cuda", generator=gen)).to(torch.float8_e4m3fn).t()  # column-major
    sx = torch.full((), 0.5, device="cuda")
    sy = torch.full((), 0.25, device="cuda")

    def refill_fp8() -> None:
        x8.copy_((2 * torch.randn(16, 8192, device="cuda", generator=gen)).to(torch.float8_e4m3fn))
        y8.copy_((2 * torch.randn(8192, 4096, device="cuda", generator=gen)).to(torch.float8_e4m3fn))

    cases.append(Case("scaled_mm e4m3 16x4096x8192 -> f32 (split K)",
                      lambda: bx.scaled_mm(x8, y8, sx, sy, out_dtype=bx.float32), refill_fp8,
                      lambda: (x8.to(f64) * 0.5) @ (y8.to(f64) * 0.25),
                      tolerance(dt.float8_e4m3, dt.float32, 8192, dt.float32, "wgmma", 128)))
    return cases


def test_every_call_in_graphs(torch):
    """Each call eager, in graphs one after another (earlier ones dropped, no collection), and all in one graph."""
    sm = require_gpu()
    cases = _cases(torch, sm)
    for case in cases:
        case.check(torch, case.call(), f"{case.name}, eager")
    dropped = []
    for case in cases:
        for count in (1, 4):
            dropped.append(_capture(torch, case.call, count, case.refill, case.reference, lambda out, c=case: c.tol,
                                    3, case.name))
        case.refill()
        case.check(torch, case.call(), f"{case.name}, eager between graphs")
    alive = [i for i, ref in enumerate(dropped) if ref() is not None]
    assert not alive, f"graphs {alive} (of {len(dropped)}) outlived the functions that made them"

    # all the calls in one graph, replayed with new data
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        outs = [(case, case.call()) for case in cases for _ in range(3)]
    for replay in range(3):
        for case in cases:
            case.refill()
        for _, out in outs:
            out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        refs = {case.name: case.reference() for case in cases}
        for case, out in outs:
            _assert_close(torch, out, refs[case.name], case.tol, f"{case.name}, one graph, replay {replay}")
    del graph, outs
    for case in cases:
        case.check(torch, case.call(), f"{case.name}, eager after the graphs")
