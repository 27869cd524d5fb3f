"""GPU correctness of blocked triangular solves (bx.solve_triangular with an A larger than one block).

Fresh random systems (blasdx.reference.trsm): the unread triangle of A, and its diagonal when
unit, hold NaN, so a read of them shows. Each result is checked for its backward error within
2 n u and its forward error against PyTorch's solution of the same system in float64 within
2 n u cond(A), over every side x triangle x diagonal x type, transposed (column-major) A,
column-major B, out=, in place, broadcast A, batches and an odd K.
"""

from __future__ import annotations

import numpy as np
import pytest

import blasdx as bx
from blasdx.base import dtypes as dt
from blasdx.calls.solve_triangular import solve_plan
from blasdx.reference import random_operand, relative_error
from blasdx.reference.trsm import (
    backward_error,
    condition_number,
    forward_bound,
    random_triangular,
    residual_bound,
)

from .gpu_support import host_to_torch, require_gpu, torch_to_host

pytestmark = pytest.mark.gpu

REAL = [dt.float32, dt.float64]
COMPLEX = [dt.complex_of(dt.float32), dt.complex_of(dt.float64)]


@pytest.fixture(scope="module")
def sm() -> int:
    return require_gpu()


def _real(value: dt.DType) -> dt.DType:
    return dt.as_dtype(value.real_name) if value.is_complex else value


def _system(rng, batch, dim, value, lower, unit):
    return random_triangular(rng, batch, dim, _real(value), is_complex=value.is_complex, lower=lower, unit=unit)


def check(system, b_host, got, value, left, what):
    """Backward error within 2 n u, forward error against float64 substitution within 2 n u cond(A)."""
    real, dim = _real(value), system.exact.shape[-1]
    eta = backward_error(system.exact, got, b_host, left=left)
    assert eta <= residual_bound(real, dim), f"{what}: backward error {eta:.2e} > {residual_bound(real, dim):.2e}"
    torch = pytest.importorskip("torch")
    t = torch.from_numpy(system.exact).cuda()
    rhs = torch.from_numpy(np.asarray(b_host).astype(system.exact.dtype if value.is_complex else np.float64)).cuda()
    lower = bool(np.all(np.triu(system.exact[0], 1) == 0))
    ref = torch.linalg.solve_triangular(t, rhs.to(t.dtype), upper=not lower, left=left).cpu().numpy()
    err, bound = relative_error(got, ref), forward_bound(real, dim, condition_number(system.exact))
    assert err <= bound, f"{what}: forward error {err:.2e} > {bound:.2e}"


@pytest.mark.parametrize("value", REAL, ids=lambda v: v.name)
@pytest.mark.parametrize("unit", [False, True], ids=["non_unit", "unit"])
@pytest.mark.parametrize("lower", [True, False], ids=["lower", "upper"])
@pytest.mark.parametrize("left", [True, False], ids=["left", "right"])
def test_every_variant(sm, left, lower, unit, value):
    rng = np.random.default_rng(11)
    dim, rhs = 300, 40
    system = _system(rng, 2, dim, value, lower, unit)
    b_host = random_operand(_real(value), (2, dim, rhs) if left else (2, rhs, dim), rng, is_complex=value.is_complex)
    a, b = host_to_torch(system.stored, value), host_to_torch(b_host, value)
    plan = solve_plan(a, b, lower=lower, left=left, unit_diagonal=unit)
    assert plan.blocked is not None, plan.describe()
    x = bx.solve_triangular(a, b, lower=lower, left=left, unit_diagonal=unit)
    assert x.shape == b.shape and x.is_contiguous()
    check(system, b_host, torch_to_host(x, value), value, left, f"{value.name} left={left} lower={lower} unit={unit}")


@pytest.mark.parametrize("value", REAL, ids=lambda v: v.name)
def test_layouts_out_and_broadcast(sm, value):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(12)
    dim, rhs = 333, 29
    system = _system(rng, 1, dim, value, True, False)
    b_host = random_operand(_real(value), (3, dim, rhs), rng)
    # A stored transposed: its upper triangle read as a column-major lower one
    a_t = host_to_torch(np.ascontiguousarray(np.swapaxes(system.stored[0], 0, 1)), value).T
    b_cm = host_to_torch(np.ascontiguousarray(np.swapaxes(b_host, 1, 2)), value).transpose(1, 2)
    x = bx.solve_triangular(a_t, b_cm, lower=True)
    check(system, b_host, torch_to_host(x, value), value, True, "column-major a and b, broadcast a")
    out = torch.full((3, rhs, dim), float("nan"), dtype=x.dtype, device="cuda").transpose(1, 2)
    assert bx.solve_triangular(a_t, b_cm, lower=True, out=out) is out
    check(system, b_host, torch_to_host(out, value), value, True, "out= column-major")
    same = host_to_torch(b_host, value)
    assert bx.solve_triangular(a_t, same, lower=True, out=same) is same
    check(system, b_host, torch_to_host(same, value), value, True, "in place")


@pytest.mark.parametrize("value, dim, rhs, batch", [(dt.float64, 1024, 48, 1), (dt.float32, 1500, 33, 1),
                                                    (dt.float32, 640, 64, 6)],
                         ids=["f64-1024", "f32-1500", "f32-640-batch6"])
def test_large(sm, value, dim, rhs, batch):
    rng = np.random.default_rng(13)
    system = _system(rng, batch, dim, value, False, False)
    b_host = random_operand(value, (batch, dim, rhs), rng)
    a, b = host_to_torch(system.stored, value), host_to_torch(b_host, value)
    x = bx.solve_triangular(a, b, upper=True)
    check(system, b_host, torch_to_host(x, value), value, True, f"{value.name} K={dim} batch={batch}")
