"""GPU correctness of complex bx.matmul / bx.mma (complex64, complex128) on the real GEMMs.

Fresh random operands per case, results poisoned with NaN beforehand where the call writes
into a given array; every result against the complex128 reference within blasdx.reference's
tolerance for its type: every layout of x and y, odd sizes, sizes that take the Hopper engine,
batches and broadcasts, acc and out, mantissa_bits on complex64, torch and CuPy arrays.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import blasdx as bx
from blasdx.base import dtypes as dt
from blasdx.reference import assert_close, random_operand, reference_gemm, tolerance

from .gpu_support import require_gpu

pytestmark = pytest.mark.gpu

TYPES = [dt.complex_of(dt.float32), dt.complex_of(dt.float64)]


@pytest.fixture(scope="module")
def sm() -> int:
    return require_gpu()


def operand(rng, value, shape, order="C"):
    """A torch tensor of ``value`` with host copy; order "F" stores each matrix column-major."""
    import torch

    host = random_operand(dt.as_dtype(value.real_name), shape, rng, is_complex=True)
    if order == "F":
        t = torch.from_numpy(np.ascontiguousarray(np.swapaxes(host, -1, -2))).cuda().transpose(-1, -2)
    else:
        t = torch.from_numpy(host).cuda()
    return t, host


CASES = list(itertools.product(TYPES, ["C", "F"], ["C", "F"], [(77, 45, 61), (512, 384, 320)]))


@pytest.mark.parametrize("value, xo, yo, size", CASES,
                         ids=[f"{v.name}-{a}{b}-{s[0]}" for v, a, b, s in CASES])
def test_matmul(sm, value, xo, yo, size):
    pytest.importorskip("torch")
    rng = np.random.default_rng(21)
    m, n, k = size
    x, xh = operand(rng, value, (m, k), xo)
    y, yh = operand(rng, value, (k, n), yo)
    got = bx.matmul(x, y)
    assert got.dtype == x.dtype and tuple(got.shape) == (m, n) and got.is_contiguous()
    assert_close(got.cpu().numpy(), reference_gemm(xh, yh), tolerance(value, value, k), f"{value.name} {xo}{yo}")


@pytest.mark.parametrize("value", TYPES, ids=lambda v: v.name)
def test_batches_broadcast_and_mma(sm, value):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(22)
    x, xh = operand(rng, value, (5, 33, 70), "F")
    y, yh = operand(rng, value, (1, 70, 29))
    tol = tolerance(value, value, 70)
    assert_close(bx.matmul(x, y).cpu().numpy(), reference_gemm(xh, yh), tol, "broadcast y")
    acc, ah = operand(rng, value, (5, 33, 29), "F")
    assert_close(bx.mma(x, y, acc).cpu().numpy(), reference_gemm(xh, yh, ah, 1, 1), tol, "mma")
    out = torch.full((5, 29, 33), float("nan"), dtype=x.dtype, device="cuda").transpose(1, 2)
    assert bx.mma(x, y, acc, out=out) is out
    assert_close(out.cpu().numpy(), reference_gemm(xh, yh, ah, 1, 1), tol, "mma out= column-major")
    assert bx.mma(x, y, acc, out=acc) is acc
    assert_close(acc.cpu().numpy(), reference_gemm(xh, yh, ah, 1, 1), tol, "mma in place")


def test_mantissa_bits_on_complex64(sm):
    pytest.importorskip("torch")
    rng = np.random.default_rng(23)
    value = TYPES[0]
    x, xh = operand(rng, value, (256, 512))
    y, yh = operand(rng, value, (512, 192))
    got = bx.matmul(x, y, mantissa_bits=23).cpu().numpy()
    assert_close(got, reference_gemm(xh, yh), tolerance(value, value, 512, scheme="3xtf32"), "3xtf32 parts")
    got = bx.matmul(x, y, mantissa_bits=10).cpu().numpy()
    assert_close(got, reference_gemm(xh, yh), tolerance(dt.tfloat32, dt.float32, 1024), "tf32 parts")


def test_cupy_arrays(sm):
    cp = pytest.importorskip("cupy")
    rng = np.random.default_rng(24)
    xh = random_operand(dt.float64, (40, 50), rng, is_complex=True)
    yh = random_operand(dt.float64, (50, 30), rng, is_complex=True)
    got = bx.matmul(cp.asarray(xh), cp.asarray(yh))
    assert isinstance(got, cp.ndarray) and got.dtype == np.complex128
    assert_close(cp.asnumpy(got), reference_gemm(xh, yh), tolerance(TYPES[1], TYPES[1], 50), "cupy")


@pytest.mark.parametrize("value", TYPES, ids=lambda v: v.name)
@pytest.mark.parametrize("left", [True, False], ids=["left", "right"])
def test_blocked_complex_solve(sm, value, left):
    pytest.importorskip("torch")
    from blasdx.reference.trsm import backward_error, random_triangular, residual_bound

    from .gpu_support import host_to_torch, torch_to_host

    rng = np.random.default_rng(25)
    part = dt.as_dtype(value.real_name)
    dim = 200
    system = random_triangular(rng, 2, dim, part, is_complex=True, lower=not left, unit=False)
    b_host = random_operand(part, (2, dim, 24) if left else (2, 24, dim), rng, is_complex=True)
    a, b = host_to_torch(system.stored, value), host_to_torch(b_host, value)
    x = bx.solve_triangular(a, b, upper=left, left=left)
    got = torch_to_host(x, value)
    eta = backward_error(system.exact, got, b_host, left=left)
    assert eta <= residual_bound(part, dim), f"backward error {eta:.2e}"


@pytest.mark.parametrize("value", TYPES, ids=lambda v: v.name)
@pytest.mark.parametrize("batch", [None, 2], ids=["matrix", "batch2"])
def test_gauss_three_products(sm, value, batch):
    """Large products on the Hopper engine run as three real products (Gauss), within the same tolerance."""
    pytest.importorskip("torch")
    from blasdx.calls import complex_matmul

    rng = np.random.default_rng(26)
    lead = () if batch is None else (batch,)
    m, n, k = 560, 530, 520
    x, xh = operand(rng, value, (*lead, m, k), "F")
    y, yh = operand(rng, value, (*lead, k, n))
    acc, ah = operand(rng, value, (*lead, m, n), "F")
    got = bx.mma(x, y, acc)
    assert_close(got.cpu().numpy(), reference_gemm(xh, yh, ah, 1, 1), tolerance(value, value, k), "gauss mma")
    assert_close(bx.matmul(x, y).cpu().numpy(), reference_gemm(xh, yh), tolerance(value, value, k), "gauss matmul")
    steps = [c.step.describe() for c in complex_matmul._CALLS.values()]
    if sm == 90:
        assert any(s.startswith("complex as three real products (Gauss)") for s in steps), steps
