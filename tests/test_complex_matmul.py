"""Complex bx.matmul / bx.mma on the real GEMMs (blasdx.calls.complex_matmul), no GPU.

The plan of a call (orientation, packing, the real GEMM's views) is run on host memory: the
layout kernels and the real GEMM are replaced by numpy versions working through the same
pointers and strides (test_blocked_trsm's fixture), and the expansion by the formula its
kernel documents, so every layout, batch, broadcast, acc / out combination is checked against
numpy's complex product. The kernels themselves compile here (NVRTC, no spills) and run in
test_gpu_complex_matmul.py; blocked complex triangular solves run through the same steps.
"""

from __future__ import annotations

import itertools
import re

import numpy as np
import pytest

import blasdx as bx
from blasdx.base import dtypes as dt
from blasdx.calls import complex_matmul
from blasdx.calls import solve_triangular as array_trsm
from blasdx.compile.cache import cached_compile
from blasdx.engine import layouts
from blasdx.base.errors import ExecutionError

from .test_blocked_trsm import at, device, host_gpu, result, solve64, triangular  # noqa: F401 (fixture)

C64, C128 = np.complex64, np.complex128


@pytest.fixture(autouse=True)
def host_expand(host_gpu, monkeypatch):  # noqa: F811
    """The expansion kernel's formula on host memory: B^[2k:2k+2, 2n:2n+2] = [[re, im], [-im, re]]."""

    def sources(part, src, rows, cols, src_strides, batch):
        """The real type and each problem's complex source matrix (host views of the fake device memory)."""
        real = np.dtype(part.host_dtype)
        cplx = np.complex64 if real == np.float32 else np.complex128
        return real, [at(src + p * src_strides[2] * real.itemsize * 2, (rows, cols), src_strides[:2], cplx)
                      for p in range(batch)]

    def expand(device_id, sm, stream, part, src, dst, rows, cols, src_strides, dst_ld, dst_batch, batch):
        host_gpu["expand"] = host_gpu.get("expand", 0) + 1
        real, problems = sources(part, src, rows, cols, src_strides, batch)
        for p, b in enumerate(problems):
            t = at(dst + p * dst_batch * real.itemsize, (2 * rows, 2 * cols), (1, dst_ld), real)
            t[0::2, 0::2], t[1::2, 0::2] = b.real, -b.imag
            t[0::2, 1::2], t[1::2, 1::2] = b.imag, b.real

    monkeypatch.setattr(layouts, "expand", expand)

    def planes(device_id, sm, stream, part, src, dst, rows, cols, src_strides, dst_strides, plane, batch):
        host_gpu["planes"] = host_gpu.get("planes", 0) + 1
        real, problems = sources(part, src, rows, cols, src_strides, batch)
        for p, b in enumerate(problems):
            for i, values in enumerate((b.real, b.imag, b.real + b.imag)):
                at(dst + (p * dst_strides[2] + i * plane) * real.itemsize, (rows, cols), dst_strides[:2],
                   real)[...] = values

    def combine(device_id, sm, stream, part, t, d, rows, cols, ld_t, t_batch, plane, d_strides, batch, alpha, beta,
                multiprocessors):
        host_gpu["combine"] = host_gpu.get("combine", 0) + 1
        real = np.dtype(part.host_dtype)
        cplx = np.complex64 if real == np.float32 else np.complex128
        for p in range(batch):
            t1, t2, t3 = (at(t + (p * t_batch + i * plane) * real.itemsize, (rows, cols), (ld_t, 1), real)
                          .astype(np.float64) for i in range(3))
            out = at(d + p * d_strides[2] * 2 * real.itemsize, (rows, cols), d_strides[:2], cplx)
            value = alpha * ((t1 - t2) + 1j * (t3 - t1 - t2))
            out[...] = value + (beta * out if beta else 0)

    monkeypatch.setattr(layouts, "planes", planes)
    monkeypatch.setattr(layouts, "combine", combine)
    monkeypatch.setattr(complex_matmul._steps, "allocate", lambda like, shape, dtype, device_id, stream: device(
        np.full(shape, np.nan, dtype=dtype.host_dtype))[0])
    complex_matmul._CALLS.clear()
    return host_gpu


def rand(rng, shape, dtype):
    return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dtype)


CASES = list(itertools.product([C64, C128], ["C", "F"], ["C", "F"]))


@pytest.mark.parametrize("dtype, x_order, y_order", CASES, ids=[f"{np.dtype(d).name}-{a}{b}" for d, a, b in CASES])
def test_matmul_every_layout(host_expand, dtype, x_order, y_order):
    rng = np.random.default_rng(5)
    xh, yh = rand(rng, (37, 19), dtype), rand(rng, (19, 23), dtype)
    x, _ = device(xh, order=x_order, pad=3)
    y, _ = device(yh, order=y_order, pad=1)
    got = result(bx.matmul(x, y))
    ref = xh.astype(C128) @ yh.astype(C128)
    tol = 1e-5 if dtype == C64 else 1e-13
    assert got.dtype == dtype and np.max(np.abs(got - ref)) <= tol * np.max(np.abs(ref))


def test_matmul_batches_and_broadcast(host_expand):
    rng = np.random.default_rng(6)
    xh, yh = rand(rng, (4, 9, 12), C64), rand(rng, (1, 12, 5), C64)
    x, _ = device(xh, order="F")
    y, _ = device(yh)
    got = result(bx.matmul(x, y))
    assert got.shape == (4, 9, 5)
    assert np.max(np.abs(got - xh.astype(C128) @ yh.astype(C128))) < 1e-4
    shared, _ = device(xh[0])
    got = result(bx.matmul(shared, device(rand(rng, (3, 12, 5), C64))[0]))
    assert got.shape == (3, 9, 5)


@pytest.mark.parametrize("out_kind", ["new", "acc", "separate-F"])
def test_mma_acc_and_out(host_expand, out_kind):
    rng = np.random.default_rng(7)
    xh, yh, ah = rand(rng, (2, 17, 8), C128), rand(rng, (2, 8, 11), C128), rand(rng, (2, 17, 11), C128)
    x, _ = device(xh)
    y, _ = device(yh, order="F")
    acc, _ = device(ah, order="F")
    ref = xh @ yh + ah
    if out_kind == "new":
        got = result(bx.mma(x, y, acc))
    elif out_kind == "acc":
        assert bx.mma(x, y, acc, out=acc) is acc
        got = result(acc)
    else:
        out, _ = device(np.full((2, 17, 11), np.nan, C128), order="F", pad=2)
        assert bx.mma(x, y, acc, out=out) is out
        got = result(out)
        assert np.array_equal(result(acc), ah)  # acc is only read
    assert np.max(np.abs(got - ref)) < 1e-12


def test_plan_says_how_the_product_runs(host_expand):
    rng = np.random.default_rng(8)
    x, _ = device(rand(rng, (30, 20), C64), order="F")
    y, _ = device(rand(rng, (20, 10), C64))
    bx.matmul(x, y)
    [call] = complex_matmul._CALLS.values()
    assert call.step.describe().startswith("complex as real 2K x 2N: A packed, ")
    out, _ = device(np.zeros((30, 10), C64), order="F")
    acc, _ = device(np.zeros((30, 10), C64), order="F")
    bx.mma(x, y, acc, out=out)
    steps = [c.step for c in complex_matmul._CALLS.values()]
    assert any(s.describe().startswith("complex as real 2K x 2N: C^T = B^T A^T, ") for s in steps)


BAD = [
    ("mixed", lambda x, y, a: bx.matmul(x, device(np.zeros((6, 3), C128))[0]), "x: complex64 and y: complex128 differ"),
    ("real-y", lambda x, y, a: bx.matmul(x, device(np.zeros((6, 3), np.float32))[0]), "x: complex64 and y: float32"),
    ("inner", lambda x, y, a: bx.matmul(x, device(np.zeros((5, 3), C64))[0]), "do not multiply"),
    ("acc-type", lambda x, y, a: bx.mma(x, y, device(np.zeros((4, 3), C128))[0]), "complex products accumulate"),
    ("acc-shape", lambda x, y, a: bx.mma(x, y, device(np.zeros((3, 3), C64))[0]), "acc: shape (3, 3)"),
    ("bits", lambda x, y, a: bx.matmul(x, y, mantissa_bits=40), "mantissa_bits"),
    ("out-shape", lambda x, y, a: bx.mma(x, y, a, out=x), "out: shape (4, 6) and type complex64 do not match"),
    ("fast", lambda x, y, a: bx.matmul(x, y, fast_accumulation=True), "fast_accumulation=True with complex64"),
    ("out-dtype", lambda x, y, a: bx.matmul(x, y, out_dtype="float32"), "complex64 inputs give complex64 results"),
]


@pytest.mark.parametrize("name, call, words", BAD, ids=[b[0] for b in BAD])
def test_refusals_launch_nothing(host_expand, name, call, words):
    rng = np.random.default_rng(9)
    x, _ = device(rand(rng, (4, 6), C64))
    y, _ = device(rand(rng, (6, 3), C64))
    acc, _ = device(rand(rng, (4, 3), C64))
    before = dict(host_expand)
    with pytest.raises(ExecutionError, match=re.escape(words)):
        call(x, y, acc)
    assert dict(host_expand) == before


@pytest.mark.parametrize("dtype", [C64, C128])
@pytest.mark.parametrize("left", [True, False])
def test_blocked_complex_solve(host_expand, dtype, left):
    rng = np.random.default_rng(10)
    dim, rhs = 150, 6
    stored, exact = triangular(rng, (2, dim, dim), left, dtype)
    b_host = rand(rng, (2, dim, rhs) if left else (2, rhs, dim), dtype)
    a, _ = device(stored)
    b, _ = device(b_host)
    x = bx.solve_triangular(a, b, lower=left, left=left)
    assert array_trsm.solve_plan(a, b, lower=left, left=left).blocked is not None
    ref = solve64(exact, b_host, left, False)
    tol = 1e-4 if dtype == C64 else 1e-11
    assert np.max(np.abs(result(x) - ref)) / np.max(np.abs(ref)) < tol


@pytest.mark.parametrize("kind, key", [("copy", 16), ("copy", 8), ("expand", dt.float32), ("expand", dt.float64)])
def test_layout_kernels_compile_without_spills(kind, key):
    source = layouts.copy_source(key) if kind == "copy" else layouts.expand_source(key)
    name = layouts.COPY_NAME if kind == "copy" else layouts.EXPAND_NAME
    compiled = cached_compile(source, name, "sm_90")
    assert compiled.local_memory == 0
    sass = compiled.sass()
    assert "STS" in sass and "LDS" in sass  # tiles move through shared memory


@pytest.mark.parametrize("d_order, batch", [("C", None), ("F", None), ("C", 3)])
def test_gauss_three_products(host_expand, monkeypatch, d_order, batch):
    """Large products (here: forced) run as T1 = Ar Br, T2 = Ai Bi, T3 = (Ar + Ai)(Br + Bi)."""
    monkeypatch.setattr(complex_matmul, "_gauss_serves", lambda x, y, d, device_id: True)
    rng = np.random.default_rng(11)
    lead = () if batch is None else (batch,)
    xh, yh, ah = rand(rng, (*lead, 21, 13), C64), rand(rng, (*lead, 13, 17), C64), rand(rng, (*lead, 21, 17), C64)
    x, _ = device(xh, order="F")
    y, _ = device(yh)
    acc, _ = device(ah, order=d_order, pad=1)
    assert bx.mma(x, y, acc, out=acc) is acc
    got = result(acc)
    assert np.max(np.abs(got - (xh.astype(C128) @ yh + ah))) < 1e-4
    assert host_expand.get("planes") == 2 and host_expand.get("combine") == 1 and "expand" not in host_expand
    [call] = complex_matmul._CALLS.values()
    assert call.step.describe().startswith("complex as three real products (Gauss): ")


def test_gauss_runs_large_products_on_the_engine_only(host_expand, monkeypatch):
    """Only shapes, batches and the device are read."""
    from blasdx.arrays import ArrayView

    def v(shape):
        return ArrayView(1 << 20, shape, (shape[-1], 1) if len(shape) == 2 else (shape[1] * shape[2], shape[2], 1),
                         dt.complex_of(dt.float32), 0, False, None)

    big = complex_matmul.GAUSS_MIN
    assert not complex_matmul._gauss_serves(v((big, big)), v((big, big)), v((big, big)), 0)  # sm_80 here
    monkeypatch.setitem(complex_matmul._ag._DEVICES, 0, complex_matmul._ag._DeviceInfo(90, 132))
    assert complex_matmul._gauss_serves(v((big, big)), v((big, big)), v((big, big)), 0)
    assert not complex_matmul._gauss_serves(v((big, big - 1)), v((big - 1, big)), v((big, big)), 0)
    assert not complex_matmul._gauss_serves(v((1, big, big)), v((2, big, big)), v((2, big, big)), 0)


@pytest.mark.parametrize("name", [layouts.PLANES_NAME, layouts.COMBINE_NAME])
@pytest.mark.parametrize("part", [dt.float32, dt.float64])
def test_gauss_kernels_compile_without_spills(name, part):
    compiled = cached_compile(layouts.planes_source(part), name, "sm_90")
    assert compiled.local_memory == 0
