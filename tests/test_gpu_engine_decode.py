"""The engine's decode and medium paths on the GPU: products of at most 64 rows of 16-bit x computed transposed
(D^T = y^T x^T, blasdx.engine.hopper.DECODE), checked element by element against float64.

Rows 1 to 64 (and 65 and 128, past the path: the medium tile or whole 64-row tiles), N and K odd and even, weights
stored [N, K] (read transposed) and [K, N], split K and not, bx.mma with alpha / beta into a poisoned, padded out= whose padding must stay.
"""

from __future__ import annotations

import pytest

import blasdx as bx
from blasdx.base import dtypes as dt
from blasdx.calls.matmul import call_plan
from blasdx.engine import hopper
from blasdx.reference import rounding, tolerance

from .gpu_support import poisoned_new_tensors, torch_dtype
from .hopper_support import check_product, engine_call, hopper_torch, operand, poisoned

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def torch():
    return hopper_torch()


def _check(torch, got, x, y, a, c, k, acc=None, alpha=1.0, beta=1.0, what=""):
    tol = tolerance(a, c, max(k, 1), dt.float32, rounding_apart=True)
    check_product(torch, got, x, y, tol, acc, alpha, beta, what, rounding(c))


@pytest.mark.parametrize("m", [1, 5, 16, 17, 32, 33, 64, 65, 128])
@pytest.mark.parametrize(("n", "k"), [(256, 64), (4097, 1000), (4096, 4096)])
@pytest.mark.parametrize("weights", ["NK", "KN"])
@pytest.mark.parametrize(("a", "c"), [(dt.bfloat16, dt.float32), (dt.float16, dt.float16), (dt.float16, dt.float32)],
                         ids=lambda t: t.name)
def test_decode_products(torch, m, n, k, weights, a, c):
    gen = torch.Generator(device="cuda").manual_seed(m * 131 + n + k + len(weights))
    x = operand(torch, (m, k), a, gen)
    y = operand(torch, (n, k), a, gen).t() if weights == "NK" else operand(torch, (k, n), a, gen)
    acc = operand(torch, (m, n), c, gen)
    out = poisoned(torch, (m, n), c)
    engine = engine_call(torch, x, y, acc, out, c, a, alpha=0.75, beta=-0.5)
    repacked = weights == "KN" and n % 8  # y's rows not whole 16 bytes: TMA reads a repacked copy, unswapped
    config = engine.config  # whole 64-row tiles where they fit one wave (hopper.whole_rows): x as A, unswapped
    whole = m % 64 == 0 and config.bm == 64 and config.bn in (32, 64) and not config.swap_ab
    if weights == "KN" and whole and not repacked:
        assert config.bn == 64, engine.describe()  # [K, N] weights are read in whole 64-wide panels
    assert engine.swapped == (m <= hopper.SWAP_MAX_M and not repacked and not whole), engine.describe()
    _check(torch, out, x, y, a, c, k, acc, alpha=0.75, beta=-0.5, what=f"{m}x{n}x{k} {weights}: {engine.describe()}")


@pytest.mark.parametrize("m", [1, 16, 17, 32, 33, 64])
@pytest.mark.parametrize(("n", "k"), [(10240, 1000), (32768, 136)])
@pytest.mark.parametrize("weights", ["NK", "KN"])
@pytest.mark.parametrize(("a", "c"), [(dt.bfloat16, dt.float32), (dt.float16, dt.float16)], ids=lambda t: t.name)
def test_products_past_a_wave_of_decode_tiles(torch, m, n, k, weights, a, c):
    """The tiles the rule takes past a wave of decode tiles on 132 SMs (128 weight rows on two consumers up to 32
    rows; from 33, `medium` or `narrow` with x as A), run on this GPU whatever its SM count: alpha / beta into a
    poisoned out, element by element against float64."""
    config, splits = hopper.decode_config(a, m, n, k, 1, 132, 64, 0)
    assert (config.bm, config.consumers) == (128, 2) if m <= 32 else not config.swap_ab, config
    gen = torch.Generator(device="cuda").manual_seed(m * 17 + n + k + len(weights))
    x = operand(torch, (m, k), a, gen)
    y = operand(torch, (n, k), a, gen).t() if weights == "NK" else operand(torch, (k, n), a, gen)
    acc = operand(torch, (m, n), c, gen)
    out = poisoned(torch, (m, n), c)
    engine = engine_call(torch, x, y, acc, out, c, a, alpha=0.75, beta=-0.5, config=config, splits=splits)
    assert engine.swapped == config.swap_ab, engine.describe()
    _check(torch, out, x, y, a, c, k, acc, alpha=0.75, beta=-0.5, what=f"{m}x{n}x{k} {weights}: {engine.describe()}")


@pytest.mark.parametrize("m", [1, 16, 17, 33, 64])
@pytest.mark.parametrize(("n", "k"), [(256, 128), (4096, 1040), (3000, 4096)])  # 8-bit rows of whole 16 bytes
@pytest.mark.parametrize(("a", "c"), [(dt.float8_e4m3, dt.float16), (dt.float8_e5m2, dt.float32),
                                      (dt.tfloat32, dt.float32), (dt.int8, dt.int32)], ids=lambda t: t.name)
def test_decode_products_of_k_major_types(torch, m, n, k, a, c):
    """8-bit and tf32 operands (K-major only: weights stored [N, K]) swapped too; fp8 promoted every 128 K
    (its own allowance), int8 exact."""
    gen = torch.Generator(device="cuda").manual_seed(m * 7 + n + k)
    x, y = operand(torch, (m, k), a, gen), operand(torch, (n, k), a, gen).t()
    acc = operand(torch, (m, n), c, gen)
    out = poisoned(torch, (m, n), c)
    engine = engine_call(torch, x, y, acc, out, c, a, alpha=1, beta=1)
    assert engine.swapped and ("promotion" in engine.describe()) == (a.size == 1 and not a.integral), engine.describe()
    what = f"{a.name} {m}x{n}x{k}: {engine.describe()}"
    if c.integral:
        ref = torch.matmul(x.to(torch.float64), y.to(torch.float64)) + acc.to(torch.float64)
        bad = int((out.to(torch.float64) != ref).sum())
        assert bad == 0, f"{what}: {bad} elements differ from the exact product"
    else:
        _check_promoted(torch, out, x, y, a, c, k, acc, what)


def _check_promoted(torch, got, x, y, a, c, k, acc, what):
    promotion = hopper.promotion_of(a) or None
    tol = tolerance(a, c, max(k, 1), dt.float32, "wgmma", promotion, rounding_apart=True)
    check_product(torch, got, x, y, tol, acc, 1.0, 1.0, what, rounding(c))


@pytest.mark.parametrize("splits", [1, 3])
def test_decode_into_a_padded_out(torch, splits):
    """A swapped plan stores D's columns as the kernel's rows: the padding past N and the rows past M stay."""
    a, c = dt.bfloat16, dt.float32
    gen = torch.Generator(device="cuda").manual_seed(40 + splits)
    m, n, k = 13, 1000, 2048
    x, y = operand(torch, (m, k), a, gen), operand(torch, (n, k), a, gen).t()
    storage = torch.full((m + 3, n + 7), float("nan"), device="cuda", dtype=torch_dtype(c))
    out = storage[:m, :n]
    engine = engine_call(torch, x, y, None, out, c, a, beta=0.0, config=hopper.replace(hopper.DECODE, bk=64),
                         splits=splits)
    assert engine.swapped and engine.splits == splits
    _check(torch, out, x, y, a, c, k, what=engine.describe())
    assert torch.isnan(storage[:, n:]).all() and torch.isnan(storage[m:]).all(), "padding written"


def test_matmul_takes_the_decode_path(torch):
    """bx.matmul on a Llama-like decode shape: the new result fully written (allocations poisoned)."""
    gen = torch.Generator(device="cuda").manual_seed(7)
    x = operand(torch, (16, 4096), dt.bfloat16, gen)
    w = operand(torch, (6144, 4096), dt.bfloat16, gen)
    with poisoned_new_tensors():
        got = bx.matmul(x, w.t())
    assert "A and B swapped" in call_plan(x, w.t()).describe()
    _check(torch, got, x, w.t(), dt.bfloat16, dt.float32, 4096, what="bx.matmul 16x6144x4096")
