"""GPU accuracy of float32 products emulated on tf32 tensor cores (mantissa_bits -> 3xtf32).

Results are checked against the float64 product of the same float32 values with
reference.tolerance(..., scheme="3xtf32"), which is 100 times below plain tf32's: a kernel
that dropped a low part would fail. Every element is held to the bound times its own scale
(|x| @ |y| + |acc|). Outputs are poisoned with NaN before each call.
"""

from __future__ import annotations

import pytest

import blasdx as bx
from blasdx.base import dtypes as dt
from blasdx.calls.matmul import call_plan
from blasdx.reference import tolerance

from .gpu_support import poisoned_new_tensors
from .hopper_support import check_product, engine_call, hopper_torch

pytestmark = pytest.mark.gpu

LAYOUTS = ["RR", "RC", "CR", "CC"]


@pytest.fixture(scope="module")
def torch():
    return hopper_torch("3xtf32 runs on the Hopper engine (sm_90)")


def _random(torch, shape, gen, order="R", scale_range=0):
    if order == "C":
        shape = shape[:-2] + (shape[-1], shape[-2])
    t = torch.randn(shape, device="cuda", generator=gen)
    if scale_range:
        t = t * torch.exp2(torch.randint(-scale_range, scale_range + 1, shape, device="cuda", generator=gen).float())
    return t if order == "R" else t.transpose(-1, -2)


def _error(torch, got, x, y, acc=None):
    """Normwise relative error (to compare schemes), after the element-wise check of the tolerance."""
    ref = torch.matmul(x.double(), y.double())
    if acc is not None:
        ref = ref + acc.double()
    assert not torch.isnan(got).any(), "NaN in the result (an element was never written)"
    return (torch.linalg.norm(got.double() - ref) / torch.linalg.norm(ref)).item()


def _check(torch, got, x, y, k: int, acc=None, what: str = "") -> None:
    check_product(torch, got, x, y, tolerance(dt.float32, dt.float32, k, scheme="3xtf32"), acc, what=what)


@pytest.mark.parametrize("size", [1, 17, 255, 1000, 2049])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_matmul_keeps_float32_accuracy(torch, layout, size):
    gen = torch.Generator(device="cuda").manual_seed(size + 100 * LAYOUTS.index(layout))
    m, n, k = size, size + (3 if size > 1 else 0), size + (5 if size > 1 else 0)
    x, y = _random(torch, (m, k), gen, layout[0]), _random(torch, (k, n), gen, layout[1])
    with poisoned_new_tensors():  # the result matmul allocates starts as NaN
        got = bx.matmul(x, y, mantissa_bits=21)
    plan = call_plan(x, y, mantissa_bits=21)
    # one output tile: the one-block kernel's mma.sync split (MantissaBits); else the engine's
    assert (plan.kind == "hopper" and plan.kernel.config.split_tf32) or (
        plan.kind == "block" and plan.desc.scheme.name == "3xtf32"), plan.describe()
    _check(torch, got, x, y, k, what=f"{layout} {m}x{n}x{k}")


def test_split_beats_plain_tf32_by_orders_of_magnitude(torch):
    gen = torch.Generator(device="cuda").manual_seed(5)
    x, y = _random(torch, (512, 1024), gen), _random(torch, (1024, 384), gen)
    got = bx.matmul(x, y, mantissa_bits=21)
    _check(torch, got, x, y, 1024, what="3xtf32")
    split = _error(torch, got, x, y)
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
    bx.mma(x, y, acc, out=out, mantissa_bits=21)
    assert call_plan(x, y, acc, out=out, mantissa_bits=21).kernel.config.split_tf32
    _check(torch, out, x, y, k, acc, what=f"mma, broadcast {broadcast}")


def test_wide_dynamic_range(torch):
    """Each element scaled by its own power of two in 2^-30 .. 2^30: the split is relative to each value."""
    gen = torch.Generator(device="cuda").manual_seed(13)
    x, y = _random(torch, (640, 768), gen, scale_range=30), _random(torch, (768, 320), gen, scale_range=30)
    with poisoned_new_tensors():
        got = bx.matmul(x, y, mantissa_bits=21)
    _check(torch, got, x, y, 768, what="wide dynamic range")


def test_infinities_and_nan_stay_non_finite(torch):
    """NaN stays NaN; an infinity stays non-finite (inf, or NaN where the other operand's low part is 0:
    inf * 0, documented in docs/index.md); every finite element keeps float32 accuracy."""
    gen = torch.Generator(device="cuda").manual_seed(17)
    x, y = _random(torch, (130, 96), gen), _random(torch, (96, 140), gen)
    x[3, 5] = float("inf")
    y[7, 9] = float("nan")
    y[5, 20] = 0.5  # exact in tf32: its low part is 0, so inf * 0 makes element (3, 20) NaN
    got = bx.matmul(x, y, mantissa_bits=21)
    ref = torch.matmul(x.double(), y.double())
    assert torch.equal(torch.isfinite(got), torch.isfinite(ref))
    assert not (torch.isnan(ref) & ~torch.isnan(got)).any()
    finite = torch.isfinite(ref)
    scale = torch.matmul(x.double().abs(), y.double().abs())
    err = (got.double() - ref).abs()[finite]
    bound = tolerance(dt.float32, dt.float32, 96, scheme="3xtf32") * scale[finite]
    assert (err <= bound).all(), f"{int((err > bound).sum())} finite elements beyond the bound"


@pytest.mark.parametrize("name", ["split square p1", "split square", "split square p4"])
def test_every_promotion_interval(torch, name):
    """Each split configuration (stages between promotions) on an odd-shaped product, split K too."""
    from blasdx.engine import hopper

    gen = torch.Generator(device="cuda").manual_seed(23)
    m, n, k = 259, 390, 1100
    for splits in (1, 3):
        x, y = _random(torch, (m, k), gen), _random(torch, (k, n), gen, "C")
        out = torch.full((m, n), float("nan"), device="cuda")
        engine_call(torch, x, y, None, out, dt.float32, alpha=1.0, beta=0.0, config=hopper.CONFIGS[name],
                    splits=splits, scheme="3xtf32")
        _check(torch, out, x, y, k, what=f"{name}, {splits} splits")


def test_split_k_shapes(torch):
    gen = torch.Generator(device="cuda").manual_seed(21)
    x, y = _random(torch, (64, 8192), gen), _random(torch, (8192, 640), gen, "C")
    with poisoned_new_tensors():
        got = bx.matmul(x, y, mantissa_bits=21)
    plan = call_plan(x, y, mantissa_bits=21)
    assert plan.kernel.splits > 1, plan.describe()
    _check(torch, got, x, y, 8192, what="split K")


@pytest.mark.parametrize("k", [64, 256, 1024, 4096])
def test_all_float32_bits_stay_within_torch_float32s_error(torch, k):
    """mantissa_bits=23 on the engine (3xtf32 promoted every stage, K >= 64) keeps float32's accuracy: a
    normwise error within 1.5x torch float32's (FFMA) on the same normal operands, and the element bound."""
    gen = torch.Generator(device="cuda").manual_seed(k)
    x, y = _random(torch, (256, k), gen), _random(torch, (k, 256), gen)
    plan = call_plan(x, y, mantissa_bits=23)
    assert plan.kind == "hopper" and plan.kernel.config.split_tf32 and plan.kernel.config.promote_stages == 1
    with poisoned_new_tensors():
        got = bx.matmul(x, y, mantissa_bits=23)
    _check(torch, got, x, y, k, what=f"23 bits, K = {k}")
    allowed = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        theirs = _error(torch, torch.matmul(x, y), x, y)
    finally:
        torch.backends.cuda.matmul.allow_tf32 = allowed
    ours = _error(torch, got, x, y)
    assert ours <= 1.5 * theirs, f"K = {k}: error {ours:.2e} against torch float32's {theirs:.2e}"


@pytest.mark.parametrize("layout", LAYOUTS)
def test_all_float32_bits_on_odd_shapes(torch, layout):
    gen = torch.Generator(device="cuda").manual_seed(7 + LAYOUTS.index(layout))
    m, n, k = 259, 390, 1100
    x, y = _random(torch, (m, k), gen, layout[0]), _random(torch, (k, n), gen, layout[1])
    with poisoned_new_tensors():
        got = bx.matmul(x, y, mantissa_bits=23)
    assert call_plan(x, y, mantissa_bits=23).kernel.config.promote_stages == 1
    _check(torch, got, x, y, k, what=f"23 bits, {layout}")
    short = _random(torch, (300, 40), gen, layout[0]), _random(torch, (40, 200), gen, layout[1])
    with poisoned_new_tensors():
        got = bx.matmul(*short, mantissa_bits=23)  # K < 64: native float32 products
    assert call_plan(*short, mantissa_bits=23).scheme.name == "native"
    check_product(torch, got, *short, tolerance(dt.float32, dt.float32, 40), None, what="23 bits, K = 40")
