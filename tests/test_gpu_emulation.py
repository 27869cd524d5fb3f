"""GPU accuracy of float32 products emulated on tf32 tensor cores (mantissa_bits -> 3xtf32).

Results are checked against the float64 product of the same float32 values with
reference.tolerance(..., scheme="3xtf32"), which is 100 times below plain tf32's: a kernel
that dropped a low part would fail. Outputs are poisoned with NaN before each call.
"""

from __future__ import annotations

import pytest

import blasdx as bx
from blasdx.calls import matmul as array_gemm
from blasdx import dtypes as dt
from blasdx.reference import tolerance

from .gpu_support import require_gpu

pytestmark = pytest.mark.gpu

LAYOUTS = ["RR", "RC", "CR", "CC"]


@pytest.fixture(scope="module")
def torch():
    if require_gpu() != 90:
        pytest.skip("3xtf32 runs on the Hopper engine (sm_90)")
    import torch

    return torch


def _random(torch, shape, gen, order="R", scale_range=0):
    if order == "C":
        shape = shape[:-2] + (shape[-1], shape[-2])
    t = torch.randn(shape, device="cuda", generator=gen)
    if scale_range:
        t = t * torch.exp2(torch.randint(-scale_range, scale_range + 1, shape, device="cuda", generator=gen).float())
    return t if order == "R" else t.transpose(-1, -2)


def _error(torch, got, x, y, acc=None):
    ref = torch.matmul(x.double(), y.double())
    if acc is not None:
        ref = ref + acc.double()
    assert not torch.isnan(got).any(), "NaN in the result (an element was never written)"
    return (torch.linalg.norm(got.double() - ref) / torch.linalg.norm(ref)).item()


def _last_plan():
    return list(array_gemm._CALLS.values())[-1]


@pytest.mark.parametrize("size", [1, 17, 255, 1000, 2049])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_matmul_keeps_float32_accuracy(torch, layout, size):
    gen = torch.Generator(device="cuda").manual_seed(size + 100 * LAYOUTS.index(layout))
    m, n, k = size, size + (3 if size > 1 else 0), size + (5 if size > 1 else 0)
    x, y = _random(torch, (m, k), gen, layout[0]), _random(torch, (k, n), gen, layout[1])
    torch.empty((m, n), device="cuda").fill_(float("nan"))  # poison the allocator's next block
    got = bx.matmul(x, y, mantissa_bits=23)
    plan = _last_plan()
    # one output tile: the one-block kernel's mma.sync split (MantissaBits); else the engine's
    assert (plan.kind == "hopper" and plan.kernel.config.split_tf32) or (
        plan.kind == "block" and plan.desc.scheme.name == "3xtf32"), plan.describe()
    err = _error(torch, got, x, y)
    assert err <= tolerance(dt.float32, dt.float32, k, scheme="3xtf32"), f"{layout} {m}x{n}x{k}: {err:.2e}"


def test_split_beats_plain_tf32_by_orders_of_magnitude(torch):
    gen = torch.Generator(device="cuda").manual_seed(5)
    x, y = _random(torch, (512, 1024), gen), _random(torch, (1024, 384), gen)
    split = _error(torch, bx.matmul(x, y, mantissa_bits=23), x, y)
    plain = _error(torch, bx.matmul(bx.tf32(x), bx.tf32(y)), x, y)
    few = _error(torch, bx.matmul(x, y, mantissa_bits=10), x, y)  # resolves to one tf32 product
    assert split * 100 < plain and few == pytest.approx(plain, rel=0.5)


@pytest.mark.parametrize("broadcast", ["none", "x", "y"])
def test_mma_batched_broadcast_into_out(torch, broadcast):
    gen = torch.Generator(device="cuda").manual_seed(9)
    batch, m, n, k = 4, 300, 200, 520
    x = _random(torch, (1 if broadcast == "x" else batch, m, k), gen)
    y = _random(torch, (1 if broadcast == "y" else batch, k, n), gen, "C")
    acc = _random(torch, (batch, m, n), gen)
    out = torch.full((batch, m, n), float("nan"), device="cuda")
    bx.mma(x, y, acc, out=out, mantissa_bits=23)
    assert _last_plan().kernel.config.split_tf32
    assert _error(torch, out, x, y, acc) <= tolerance(dt.float32, dt.float32, k, scheme="3xtf32")


def test_wide_dynamic_range(torch):
    """Each element scaled by its own power of two in 2^-30 .. 2^30: the split is relative to each value."""
    gen = torch.Generator(device="cuda").manual_seed(13)
    x, y = _random(torch, (640, 768), gen, scale_range=30), _random(torch, (768, 320), gen, scale_range=30)
    err = _error(torch, bx.matmul(x, y, mantissa_bits=23), x, y)
    assert err <= tolerance(dt.float32, dt.float32, 768, scheme="3xtf32")


def test_infinities_and_nan_stay_non_finite(torch):
    """NaN stays NaN; an infinity stays non-finite (inf, or NaN where the other operand's low part is 0:
    inf * 0, documented in docs/index.md); every finite element keeps float32 accuracy."""
    gen = torch.Generator(device="cuda").manual_seed(17)
    x, y = _random(torch, (130, 96), gen), _random(torch, (96, 140), gen)
    x[3, 5] = float("inf")
    y[7, 9] = float("nan")
    y[5, 20] = 0.5  # exact in tf32: its low part is 0, so inf * 0 makes element (3, 20) NaN
    got = bx.matmul(x, y, mantissa_bits=23)
    ref = torch.matmul(x.double(), y.double())
    assert torch.equal(torch.isfinite(got), torch.isfinite(ref))
    assert not (torch.isnan(ref) & ~torch.isnan(got)).any()
    finite = torch.isfinite(ref)
    rel = (torch.linalg.norm((got.double() - ref)[finite]) / torch.linalg.norm(ref[finite])).item()
    assert rel <= tolerance(dt.float32, dt.float32, 96, scheme="3xtf32")


@pytest.mark.parametrize("name", ["split square p1", "split square", "split square p4"])
def test_every_promotion_interval(torch, name):
    """Each split configuration (stages between promotions) on an odd-shaped product, split K too."""
    from blasdx import arrays
    from blasdx.engine import hopper

    gen = torch.Generator(device="cuda").manual_seed(23)
    m, n, k = 259, 390, 1100
    for splits in (1, 3):
        x, y = _random(torch, (m, k), gen), _random(torch, (k, n), gen, "C")
        out = torch.full((m, n), float("nan"), device="cuda")
        vx, vy, vout = arrays.as_array(x, "x"), arrays.as_array(y, "y"), arrays.as_array(out, "out")
        mx, my = array_gemm._matrix(vx, "x"), array_gemm._matrix(vy, "y")
        device = array_gemm._device_info(out.device.index)
        engine, why = array_gemm._engine_plan(vx, vy, mx, my, dt.float32, m, n, k, 1, device, vout,
                                              hopper.CONFIGS[name], splits, "3xtf32")
        assert engine is not None, why
        handle = arrays.resolve_stream(None, (out,))
        engine.run(out.device.index, arrays.as_core_stream(None, handle), handle, vx, vy, None, vout, 1.0, 0.0)
        assert _error(torch, out, x, y) <= tolerance(dt.float32, dt.float32, k, scheme="3xtf32"), (name, splits)


def test_split_k_shapes(torch):
    gen = torch.Generator(device="cuda").manual_seed(21)
    x, y = _random(torch, (64, 8192), gen), _random(torch, (8192, 640), gen, "C")
    err = _error(torch, bx.matmul(x, y, mantissa_bits=23), x, y)
    plan = _last_plan()
    assert plan.kernel.splits > 1, plan.describe()
    assert err <= tolerance(dt.float32, dt.float32, 8192, scheme="3xtf32")
