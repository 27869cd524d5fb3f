"""The blocked triangular solver (blasdx.calls.blocked_trsm), no GPU: its plans, and its steps run on the host.

Device arrays are host numpy buffers exposed through ``__cuda_array_interface__``; the three
launches the solver makes (the strided copy, the block TRSM kernel, the GEMM step) are
replaced by numpy versions that read and write the same memory through the same pointers,
strides and chunks the kernels get. So the offsets, the order of the steps, the transposition
of right solves, layouts, batches and broadcasts are checked against a float64 solve, while
the GPU tests (test_gpu_blocked_trsm.py) check the kernels themselves.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import blasdx as bx
from blasdx import arrays as arrays_module
from blasdx.calls import blocked_trsm as blocked
from blasdx.calls import gemm_steps as steps
from blasdx.calls import matmul as array_gemm
from blasdx.calls import solve_triangular as array_trsm
from blasdx.engine import layouts
from blasdx.base.errors import ExecutionError
from blasdx.launch import devices
from blasdx.launch import scratch as scratch_module
from blasdx.run import trsm as trsm_run

from .test_execute_validation import Fake

_BUFFERS: list[np.ndarray] = []


def _memory(ptr: int, itemsize: int) -> tuple[np.ndarray, int]:
    """The registered buffer holding ``ptr`` and the element index of ptr in it."""
    for buf in _BUFFERS:
        base = buf.ctypes.data
        if base <= ptr < base + buf.nbytes:
            assert (ptr - base) % itemsize == 0
            return buf.reshape(-1).view(np.uint8), ptr - base
    raise AssertionError(f"pointer {ptr:#x} is in no buffer")


def at(ptr: int, shape, strides, dtype) -> np.ndarray:
    """A writable numpy view of device memory: ``shape`` with element ``strides`` from ``ptr``."""
    npd = np.dtype(dtype)
    raw, offset = _memory(ptr, npd.itemsize)
    return np.lib.stride_tricks.as_strided(raw[offset:].view(npd), tuple(shape),
                                           tuple(s * npd.itemsize for s in strides))


def device(host: np.ndarray, order: str = "C", pad: int = 0) -> tuple[Fake, np.ndarray]:
    """A Fake device array over a registered host buffer holding ``host`` (rows or columns padded by ``pad``)."""
    shape = host.shape
    rows, cols = shape[-2:]
    batch = shape[0] if host.ndim == 3 else 1
    ld = (cols if order == "C" else rows) + pad
    outer = rows if order == "C" else cols
    buf = np.full(batch * outer * ld + 64, np.nan, dtype=host.dtype)
    _BUFFERS.append(buf)
    strides = (ld, 1) if order == "C" else (1, ld)
    if host.ndim == 3:
        strides = (outer * ld, *strides)
    view = at(buf.ctypes.data, shape, strides, host.dtype)
    view[...] = host
    return Fake(shape, host.dtype, strides, buf.ctypes.data), view


@pytest.fixture(autouse=True, params=[True, False], ids=["inverses", "substitution"])
def host_gpu(monkeypatch, request):
    """An sm_80 device whose copies, TRSM launches and GEMM steps run in numpy on registered buffers; the
    diagonal blocks by their inverses and by substitution (blasdx.calls.blocked_trsm.INVERT_DIAGONAL)."""
    _BUFFERS.clear()
    counts = {"copy": 0, "leaf": 0, "gemm": 0}

    def copy(device_id, sm, stream, itemsize, src, dst, rows, cols, src_strides, dst_strides, batch):
        counts["copy"] += 1
        npd = _ITEM[itemsize]
        for p in range(batch):
            s = at(src + p * src_strides[2] * itemsize, (rows, cols), src_strides[:2], npd)
            at(dst + p * dst_strides[2] * itemsize, (rows, cols), dst_strides[:2], npd)[...] = s

    def leaf(self, stream, device_id, pointers, alpha, strides, chunks, batch):
        counts["leaf"] += 1
        desc = self.desc
        assert desc.side is bx.Side.left
        m, w = desc.size
        npd = np.dtype(desc.b_value_type.numpy)
        lda, ldb = desc.leading_dimension
        a_strides = (lda, 1) if desc.arrangement.a is bx.row_major else (1, lda)
        b_strides = (ldb, 1) if desc.arrangement.b is bx.row_major else (1, ldb)
        x_strides = (self.out.ld, 1) if self.out.row_major else (1, self.out.ld)
        lower, unit = desc.fill_mode is bx.FillMode.lower, desc.diag is bx.Diag.unit
        for p, c in itertools.product(range(batch), range(chunks[0])):
            a = at(pointers[0] + p * strides[0] * npd.itemsize, (m, m), a_strides, npd).astype(np.complex128)
            a = np.tril(a) if lower else np.triu(a)
            if unit:
                np.fill_diagonal(a, 1)
            b = at(pointers[1] + (p * strides[1] + c * chunks[1]) * npd.itemsize, (m, w), b_strides, npd)
            x = at(pointers[2] + (p * strides[2] + c * chunks[2]) * npd.itemsize, (m, w), x_strides, npd)
            x[...] = np.linalg.solve(a, b.astype(np.complex128)).astype(npd) if npd.kind == "c" else \
                np.linalg.solve(a.real, b.astype(np.float64)).astype(npd)

    buffers = {}

    class Scratch:  # the call's scratch: host buffers the fakes can reach
        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return None

        def get(self, use, nbytes, zero=False):
            buf = buffers.get(use)
            if buf is None or buf.nbytes < nbytes + 256:
                buf = buffers[use] = np.full(nbytes + 256, 0xFF, np.uint8)  # NaN-like garbage
                _BUFFERS.append(buf)
            return buf.ctypes.data + (-buf.ctypes.data) % 256

    class Held:
        def __init__(self, host):
            self.host = host
            _BUFFERS.append(host)
            self.ptr = host.ctypes.data

    monkeypatch.setattr(scratch_module, "call_scratch", lambda device_id, stream: Scratch())
    monkeypatch.setattr(arrays_module, "to_device", lambda array, device=None, stream=None: Held(np.array(array)))
    blocked._IDENTITY.clear()

    def gemm(self, core, handle, x, y, d, alpha, beta):
        counts["gemm"] += 1
        npd = np.dtype(d.dtype.host_dtype)
        xs, ys, ds = (at(v.ptr, v.shape, v.strides, npd) for v in (x, y, d))
        ds[...] = alpha * np.matmul(xs, ys) + (beta * ds if beta else 0)  # beta 0 never reads D

    monkeypatch.setattr(devices, "pointer_device_id", lambda ptr, argument="array": 0)
    monkeypatch.setattr(devices, "current_device_id", lambda: 0)
    monkeypatch.setattr(devices, "enter", lambda device_id: None)
    monkeypatch.setattr(devices, "check_stream_device", lambda *args, **kwargs: None)
    monkeypatch.setattr(array_trsm._arrays, "as_core_stream", lambda stream, handle: None)
    monkeypatch.setattr(trsm_run.TrsmKernel, "on_device", lambda self, device_id: None)
    monkeypatch.setattr(trsm_run.TrsmKernel, "launch", leaf)
    monkeypatch.setattr(steps.GemmStep, "run", gemm)
    monkeypatch.setattr(layouts, "copy", copy)
    monkeypatch.setattr(blocked, "INVERT_DIAGONAL", request.param)
    monkeypatch.setattr(array_trsm, "_allocate", lambda like, shape, dtype, device_id, stream: device(
        np.full(shape, np.nan, dtype=dtype.host_dtype))[0])
    monkeypatch.setitem(array_gemm._DEVICES, 0, array_gemm._DeviceInfo(80, 108))
    array_trsm._CALLS.clear()
    yield counts
    _BUFFERS.clear()
    blocked._IDENTITY.clear()


_ITEM = {4: np.float32, 8: np.float64, 16: np.complex128}


def triangular(rng, shape, lower, dtype):
    """A well-conditioned triangular matrix (batch) with NaN in the triangle that must not be read."""
    dim = shape[-1]
    a = rng.standard_normal(shape) / dim
    if np.dtype(dtype).kind == "c":
        a = a + 1j * rng.standard_normal(shape) / dim
    idx = np.arange(dim)
    a[..., idx, idx] += 2.0
    keep = np.tril(np.ones((dim, dim), bool)) if lower else np.triu(np.ones((dim, dim), bool))
    return np.where(keep, a, np.nan).astype(dtype), np.where(keep, a, 0)


def solve64(exact, b, left, unit):
    t = exact.astype(np.complex128)
    if unit:
        idx = np.arange(t.shape[-1])
        t[..., idx, idx] = 1
    if left:
        return np.linalg.solve(t, b.astype(np.complex128))
    return np.swapaxes(np.linalg.solve(np.swapaxes(t, -1, -2), np.swapaxes(b, -1, -2).astype(np.complex128)), -1, -2)


def result(x) -> np.ndarray:
    cai = x.__cuda_array_interface__
    npd = np.dtype(cai["typestr"])
    strides = tuple(s // npd.itemsize for s in cai["strides"])
    return np.array(at(cai["data"][0], cai["shape"], strides, npd))


VARIANTS = list(itertools.product([True, False], [True, False], [False, True]))


@pytest.mark.parametrize("left, lower, unit", VARIANTS,
                         ids=[f"{'left' if a else 'right'}-{'lower' if b else 'upper'}-{'unit' if c else 'non_unit'}"
                              for a, b, c in VARIANTS])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_steps_solve_every_variant(host_gpu, left, lower, unit, dtype):
    rng = np.random.default_rng(1)
    dim, rhs = 333, 21
    stored, exact = triangular(rng, (2, dim, dim), lower, dtype)
    b_host = rng.standard_normal((2, dim, rhs) if left else (2, rhs, dim)).astype(dtype)
    a, _ = device(stored)
    b, _ = device(b_host, order="F")
    x = bx.solve_triangular(a, b, lower=lower, left=left, unit_diagonal=unit)
    plan = array_trsm.solve_plan(a, b, lower=lower, left=left, unit_diagonal=unit)
    assert plan.blocked is not None
    if plan.blocked.inverse:  # inversion launches, then a GEMM per leaf and per update
        assert host_gpu["leaf"] >= 1 and host_gpu["gemm"] == plan.blocked.leaves + plan.blocked.updates
    else:
        assert host_gpu["leaf"] >= plan.blocked.leaves and host_gpu["gemm"] == plan.blocked.updates
    got, ref = result(x), solve64(exact, b_host, left, unit)
    tol = 1e-4 if dtype == np.float32 else 1e-11
    assert np.max(np.abs(got - ref)) / np.max(np.abs(ref)) < tol


def test_steps_broadcast_transposed_a_padded_b_and_out(host_gpu):
    rng = np.random.default_rng(2)
    dim, rhs = 200, 7
    stored, exact = triangular(rng, (dim, dim), True, np.float64)
    a, _ = device(stored, order="F")  # the lower triangle stored column-major (a transposed upper one)
    b_host = rng.standard_normal((3, rhs, dim))
    b, _ = device(b_host, pad=5)
    out, _ = device(np.full((3, rhs, dim), np.nan), order="F", pad=3)
    assert bx.solve_triangular(a, b, lower=True, left=False, out=out) is out
    assert host_gpu["copy"] == 1
    ref = solve64(exact[None], b_host, False, False)
    assert np.max(np.abs(result(out) - ref)) < 1e-12
    same, _ = device(b_host)
    host_gpu["copy"] = 0
    assert bx.solve_triangular(a, same, lower=True, left=False, out=same) is same
    inverse = array_trsm.solve_plan(a, same, lower=True, left=False, out=same).blocked.inverse
    assert host_gpu["copy"] == (1 if inverse else 0)  # in place: nothing to copy, except B into the work array
    assert np.max(np.abs(result(same) - ref)) < 1e-12


def test_steps_broadcast_b(host_gpu):
    rng = np.random.default_rng(3)
    stored, exact = triangular(rng, (4, 150, 150), False, np.float64)
    b_host = rng.standard_normal((1, 150, 9))
    a, _ = device(stored)
    b, _ = device(b_host)
    x = bx.solve_triangular(a, b, upper=True)
    assert result(x).shape == (4, 150, 9)
    assert np.max(np.abs(result(x) - solve64(exact, b_host, True, False))) < 1e-12


def test_plan_shape(host_gpu):
    a = Fake((1000, 1000), np.float64, (1000, 1), 0x7F10_0000_0000)
    b = Fake((1000, 512), np.float64, (512, 1), 0x7F20_0000_0000)
    plan = array_trsm.solve_plan(a, b, lower=True)
    leaf = (blocked.INVERSE_LEAF if blocked.INVERT_DIAGONAL else blocked.LEAF)["float64"]
    assert plan.kernel is None and plan.blocked.leaf == leaf
    assert plan.blocked.leaves == -(-1000 // leaf) and plan.blocked.updates == plan.blocked.leaves - 1
    assert plan.describe().startswith(f"blocked TRSM, K = 1000, leaves of {leaf}")
    assert plan.blocked.inverse == blocked.INVERT_DIAGONAL
    small = array_trsm.solve_plan(Fake((64, 64), np.float64, (64, 1), 0x7F10_0000_0000), b[:64] if False else
                                  Fake((64, 8), np.float64, (8, 1), 0x7F20_0000_0000), lower=True)
    assert small.blocked is None and small.describe().startswith("one block TRSM per problem")


def test_split_points_are_aligned():
    for lo, hi in ((0, 1000), (16, 81), (0, 33), (512, 8192)):
        mid = blocked.split_point(lo, hi)
        assert lo < mid < hi and (mid - lo) % 16 == 0


def test_mantissa_bits_are_checked(host_gpu):
    a = Fake((300, 300), np.float32, (300, 1), 0x7F10_0000_0000)
    b = Fake((300, 4), np.float32, (4, 1), 0x7F20_0000_0000)
    with pytest.raises(ExecutionError, match="mantissa_bits"):
        array_trsm.solve_plan(a, b, lower=True, mantissa_bits=30)
