"""MN-major tf32 and 8-bit B transposed in shared memory on the GPU (kernels/blasdx/hopper/transpose.cuh).

Against the float64 product (exact for int8) on fresh random data, results poisoned with NaN
first: bx.matmul / bx.mma / bx.scaled_mm with a row-major y (the layout of a [K, N] weight),
odd sizes, every base configuration forced to transpose (clusters, ping-pong, split K, both
epilogues), M from 1 to 16384, batches with a broadcast B.
"""

from __future__ import annotations

import math

import pytest

import blasdx as bx
from blasdx.base import dtypes as dt
from blasdx.calls import matmul as array_gemm
from blasdx.engine import hopper
from blasdx.reference import tolerance

from .gpu_support import torch_dtype, type_id
from .hopper_support import check_norm, engine_call, hopper_torch, norm_error

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def torch():
    return hopper_torch()


def _operand(torch, shape, a: dt.DType, gen):
    """Fresh random row-major values of type ``a`` (float32 storage for tf32; small integers for int8)."""
    if a.integral:
        return torch.randint(-128, 128, shape, device="cuda", generator=gen, dtype=torch.int32).to(torch_dtype(a))
    return (2 * torch.randn(shape, device="cuda", generator=gen)).to(torch_dtype(a))


#: (input, result, size): every type the transposition serves, sizes from 1 to past the rule's 4 tile rows
CASES = [(dt.tfloat32, dt.float32, 1), (dt.tfloat32, dt.float32, 255), (dt.tfloat32, dt.float32, 4097),
         (dt.float8_e4m3, dt.float16, 17), (dt.float8_e4m3, dt.float16, 1000), (dt.float8_e5m2, dt.float32, 255),
         (dt.int8, dt.int32, 17), (dt.int8, dt.int32, 1000)]


@pytest.mark.parametrize(("a", "c", "size"), CASES, ids=type_id)
def test_row_major_y_every_type_and_odd_size(torch, a, c, size):
    gen = torch.Generator(device="cuda").manual_seed(size + 13 * a.size)
    m, n, k = size, size + (7 if size > 1 else 0), size + (9 if size > 1 else 0)
    n += (-n) % (16 // a.size)  # TMA reads y's rows in place: whole 16 bytes
    x, y = _operand(torch, (m, k), a, gen), _operand(torch, (k, n), a, gen)
    if c == dt.int32:
        acc = torch.randint(-2**20, 2**20, (m, n), device="cuda", generator=gen, dtype=torch.int32)
        out = torch.full((m, n), -7, device="cuda", dtype=torch.int32)
    else:
        acc = _operand(torch, (m, n), c, gen)
        out = torch.full((m, n), float("nan"), device="cuda", dtype=torch_dtype(c))
    engine = engine_call(torch, x, y, acc, out, c, a, 1, 1)
    transposed = "y MN-major (transposed in shared memory)" in engine.describe()
    assert transposed == engine.config.transpose_b and (transposed or m > 512), engine.describe()
    check_norm(torch, out, x, y, a, c, acc, what=f"{a.name}->{c.name} {m}x{n}x{k}: {engine.describe()}")


#: (input, result, base configuration, splits): every configuration with B transposed, with and without splits
FORCED = [(dt.tfloat32, dt.float32, "narrow", 4), (dt.tfloat32, dt.float32, "pingpong", 3),
          (dt.tfloat32, dt.float32, "wide clusters", 1), (dt.float8_e4m3, dt.float16, "wide", 1),
          (dt.float8_e4m3, dt.float16, "square", 2), (dt.int8, dt.int32, "narrow", 1),
          (dt.int8, dt.int32, "pingpong clusters", 1)]


@pytest.mark.parametrize(("a", "c", "name", "splits"), FORCED, ids=type_id)
def test_every_configuration_transposes(torch, a, c, name, splits):
    gen = torch.Generator(device="cuda").manual_seed(len(name) * 7 + splits)
    m, n, k = 515, 1040, 1168  # edge tiles in M, N and K
    x, y = _operand(torch, (m, k), a, gen), _operand(torch, (k, n), a, gen)
    base = hopper.CONFIGS["pingpong"] if name == "pingpong clusters" else hopper.CONFIGS[name]
    config = hopper.replace(base, bk=128 // a.size, promotion=hopper.promotion_of(a), transpose_b=True,
                            **({"cluster": 2} if name == "pingpong clusters" else {}))
    out = torch.full((m, n), float("nan") if c != dt.int32 else -7, device="cuda", dtype=torch_dtype(c))
    engine = engine_call(torch, x, y, None, out, c, a, 1, 0, config, splits)
    assert engine.config.transpose_b and engine.splits == splits, engine.describe()
    check_norm(torch, out, x, y, a, c, None, what=f"{name} x{splits} {a.name}: {engine.describe()}")


@pytest.mark.parametrize("m", [1, 2048, 16384])
def test_m_from_1_to_16384(torch, m):
    a, c = dt.tfloat32, dt.float32
    gen = torch.Generator(device="cuda").manual_seed(m)
    n, k = 384, 520
    x, y = _operand(torch, (m, k), a, gen), _operand(torch, (k, n), a, gen)
    out = torch.full((m, n), float("nan"), device="cuda")
    config = hopper.replace(hopper.PINGPONG, bk=32, transpose_b=True)  # deep M transposes when asked
    deep = m > 128 * hopper.TRANSPOSE_MAX_TILE_ROWS  # past the rule's tile rows the default repacks y
    engine = engine_call(torch, x, y, None, out, c, a, 1, 0, config if deep else None)
    assert engine.config.transpose_b, engine.describe()
    check_norm(torch, out, x, y, a, c, None, what=f"M = {m}: {engine.describe()}")


def test_batched_b_and_broadcast(torch):
    gen = torch.Generator(device="cuda").manual_seed(5)
    for a, c in [(dt.tfloat32, dt.float32), (dt.float8_e4m3, dt.float16)]:
        for batch_y in (3, 1):
            x = _operand(torch, (3, 130, 300), a, gen)
            y = _operand(torch, (batch_y, 300, 272), a, gen)
            out = torch.full((3, 130, 272), float("nan"), device="cuda", dtype=torch_dtype(c))
            engine = engine_call(torch, x, y, None, out, c, a, 1, 0)
            assert engine.config.transpose_b, engine.describe()
            check_norm(torch, out, x, y.expand(3, 300, 272), a, c, None, what=f"batch {batch_y} {a.name}")


def test_matmul_of_a_row_major_weight(torch):
    gen = torch.Generator(device="cuda").manual_seed(3)
    x = _operand(torch, (128, 4096), dt.tfloat32, gen)
    w = _operand(torch, (4096, 1024), dt.tfloat32, gen)
    got = bx.matmul(bx.tf32(x), bx.tf32(w))
    plan = next(p for p in reversed(list(array_gemm._CALLS.values())) if p.shape == (128, 1024))
    assert "transposed in shared memory" in plan.describe(), plan.describe()
    check_norm(torch, got, x, w, dt.tfloat32, dt.float32, None, what="bx.matmul tf32")
    x8, w8 = _operand(torch, (64, 2048), dt.float8_e4m3, gen), _operand(torch, (2048, 1536), dt.float8_e4m3, gen)
    check_norm(torch, bx.matmul(x8, w8), x8, w8, dt.float8_e4m3, dt.float16, None, what="bx.matmul e4m3")


@pytest.mark.parametrize("mode", ["tensor", "block"])
def test_scaled_mm_with_row_major_y(torch, mode):
    gen = torch.Generator(device="cuda").manual_seed(11)
    m, n, k = 200, 640, 1000
    x, y = _operand(torch, (m, k), dt.float8_e4m3, gen), _operand(torch, (k, n), dt.float8_e4m3, gen)

    def scales(shape):
        return torch.exp2(4 * torch.rand(shape, device="cuda", generator=gen) - 2)

    if mode == "tensor":
        sx, sy = torch.tensor(0.5, device="cuda"), torch.tensor(2.0, device="cuda")
        ex, ey = sx.to(torch.float64), sy.to(torch.float64)
    elif mode == "row":
        sx, sy = scales((m, 1)), scales((1, n))
        ex, ey = sx.to(torch.float64), sy.to(torch.float64)
    else:
        kb, nb = math.ceil(k / 128), math.ceil(n / 128)
        sx, sy = scales((m, kb)), scales((kb, nb))
        ex = sx.to(torch.float64).repeat_interleave(128, dim=1)[:, :k]
        ey = sy.to(torch.float64).repeat_interleave(128, dim=0)[:k].repeat_interleave(128, dim=1)[:, :n]
    got = bx.scaled_mm(x, y, sx, sy, out_dtype=bx.bfloat16)
    ref = (x.to(torch.float64) * ex) @ (y.to(torch.float64) * ey)
    tol = tolerance(dt.float8_e4m3, dt.bfloat16, k, dt.float32, "wgmma", 128)
    err = norm_error(torch, got, ref)
    assert err <= tol, f"scaled_mm {mode}: relative error {err:.3e} > {tol:.1e}"
