"""GPU accuracy of float64 products run as int8 residue products (mantissa_bits on float64 inputs).

Every result is checked element by element against an extended-precision product of the same
float64 values (long double on the host, 64-bit mantissa) within the bound that ``mantissa_bits``
states (docs/index.md): every element of x keeps ``bits`` bits relative to the largest of its row
(moves by at most 2^-(bits+1) of it), every element of y relative to the largest of its column,
plus 4 * 2^-53 of the result for putting it back together. Nothing of the scheme's own plan (its
grid, its moduli) enters the bound; a kernel that lost a residue or a carry would be off by far
more. Outputs are poisoned with NaN before each call.
"""

from __future__ import annotations

import numpy as np
import pytest

import blasdx as bx
from blasdx.calls.matmul import call_plan
from blasdx.engine import ozaki

from .gpu_support import poisoned_new_tensors, stable_seed
from .hopper_support import hopper_torch

pytestmark = pytest.mark.gpu

LAYOUTS = ["RR", "RC", "CR", "CC"]


@pytest.fixture(scope="module")
def torch():
    torch = hopper_torch("the int8 residue products run on the Hopper engine (sm_90)")
    if np.finfo(np.longdouble).nmant < 63:
        pytest.skip("the reference needs an extended-precision long double")
    return torch


def _random(torch, shape, gen, order="R", spread=0):
    """Normal values, times 2^[-spread, spread] per element when spread > 0 (wide ranges inside rows)."""
    if order == "C":
        shape = (shape[1], shape[0])
    t = torch.randn(shape, device="cuda", generator=gen, dtype=torch.float64)
    if spread:
        t = t * torch.exp2(torch.randint(-spread, spread + 1, shape, device="cuda", generator=gen).double())
    return t if order == "R" else t.T


def stated_bound(x: np.ndarray, y: np.ndarray, bits: int) -> np.ndarray:
    """What ``bits`` promises of x @ y, element by element: x's elements move by at most
    d_i = 2^-(bits+1) max_k |x_ik|, y's by g_j = 2^-(bits+1) max_k |y_kj|, so the product by at most
    d_i sum_k |y_kj| + g_j sum_k |x_ik| + K d_i g_j, plus 4 * 2^-53 of it (putting it back together)."""
    d = 2.0 ** -(bits + 1) * np.abs(x).max(axis=1, initial=0.0)
    g = 2.0 ** -(bits + 1) * np.abs(y).max(axis=0, initial=0.0)
    bound = d[:, None] * np.abs(y).sum(axis=0)[None, :] + g[None, :] * np.abs(x).sum(axis=1)[:, None]
    return bound + x.shape[1] * d[:, None] * g[None, :] + 4 * 2.0**-53 * np.abs(x @ y)


def sampled_rows(m: int, count: int, seed: int) -> np.ndarray:
    """``count`` random rows of m, plus the first and last row of every 64-row tile (tile edges)."""
    edges = [r for t in range(0, m, 64) for r in (t, min(t + 63, m - 1))]
    picked = np.random.default_rng(seed).choice(m, size=min(count, m), replace=False)
    return np.unique(np.concatenate([picked, edges]))


def _check(torch, got, x, y, bits, rows=None, acc=None):
    """got (rows of it) against the long double product within what ``bits`` states."""
    xh, yh = x.cpu().numpy(), y.cpu().numpy()
    gh = got.cpu().numpy()
    if rows is not None:
        xs, gh = xh[rows], gh[rows]
    else:
        xs = xh
    ref = xs.astype(np.longdouble) @ yh.astype(np.longdouble)
    bound = 2.0**-60 * (np.abs(xs) @ np.abs(yh))
    if acc is not None:
        ah = acc.cpu().numpy()[rows] if rows is not None else acc.cpu().numpy()
        ref = ref + ah
        bound += 2.0**-52 * np.abs(ah.astype(np.float64) + (xs @ yh))
    bound = bound + stated_bound(xs, yh, bits)  # per row of x: the sampled rows' bounds are those of all
    err = np.abs(gh.astype(np.longdouble) - ref).astype(np.float64)
    assert not np.isnan(gh).any(), "NaN in the result (an element was never written)"
    over = err > bound
    assert not over.any(), f"{over.sum()} elements beyond the bound, worst {np.max(err[over] / bound[over]):.3g} x"
    return float(np.max(err / np.maximum(np.abs(xs) @ np.abs(yh), 1e-300)))


@pytest.mark.parametrize("size", [1, 17, 100, 257, 1000])
@pytest.mark.parametrize("layout", LAYOUTS)
def test_matmul_within_the_bound(torch, layout, size):
    gen = torch.Generator(device="cuda").manual_seed(size + 1000 * LAYOUTS.index(layout))
    m, n, k = size, size + (3 if size > 1 else 0), size + (5 if size > 1 else 0)
    x, y = _random(torch, (m, k), gen, layout[0], 8), _random(torch, (k, n), gen, layout[1])
    with poisoned_new_tensors():  # the result matmul allocates starts as NaN
        got = bx.matmul(x, y, mantissa_bits=52)
    plan = call_plan(x, y, mantissa_bits=52)
    assert isinstance(plan.kernel, ozaki.OzakiPlan), plan.describe()
    relative = _check(torch, got, x, y, 52)
    assert relative < 2.0**-50


#: int8 products per bits at K = 777, pinned (the fewest moduli 256, 255, 253, ... whose product
#: exceeds 2 (T + sqrt(K) / 2)^2 with T >= sqrt(K) 2^(bits + 1), docs/index.md).
PRODUCTS_AT_777 = {5: 3, 20: 7, 40: 12, 52: 15}


@pytest.mark.parametrize("bits", list(PRODUCTS_AT_777))
def test_fewer_bits_keep_what_they_state(torch, bits):
    gen = torch.Generator(device="cuda").manual_seed(bits)
    x, y = _random(torch, (300, 777), gen, "R", 4), _random(torch, (777, 200), gen, "C", 4)
    with poisoned_new_tensors():
        got = bx.matmul(x, y, mantissa_bits=bits)
    assert call_plan(x, y, mantissa_bits=bits).scheme.products == PRODUCTS_AT_777[bits]
    _check(torch, got, x, y, bits)
    if bits < 52:  # it keeps what it states, and not all 52 bits (else the bound above would say little)
        xh, yh = x.cpu().numpy(), y.cpu().numpy()
        err = np.abs(got.cpu().numpy().astype(np.longdouble) - xh.astype(np.longdouble) @ yh.astype(np.longdouble))
        assert float(err.max()) > 2.0**-64 * float((np.abs(xh) @ np.abs(yh)).max()) * 2.0 ** (52 - bits)


@pytest.mark.parametrize("k", [64, 4096, 16384, 65536])
def test_deep_products(torch, k):
    gen = torch.Generator(device="cuda").manual_seed(k)
    m, n = 256, 192
    x, y = _random(torch, (m, k), gen), _random(torch, (k, n), gen, "C")
    with poisoned_new_tensors():
        got = bx.matmul(x, y, mantissa_bits=52)
    rows = None if k <= 16384 else sampled_rows(m, 48, stable_seed("deep", k))  # the host reference is slow
    _check(torch, got, x, y, 52, rows=rows)


def test_large_square_on_sampled_rows(torch):
    gen = torch.Generator(device="cuda").manual_seed(7)
    x, y = _random(torch, (4096, 4096), gen, spread=3), _random(torch, (4096, 4096), gen)
    with poisoned_new_tensors():
        got = bx.matmul(x, y, mantissa_bits=52)
    _check(torch, got, x, y, 52, rows=sampled_rows(4096, 64, stable_seed("large square")))


def test_mma_adds_acc_into_out(torch):
    gen = torch.Generator(device="cuda").manual_seed(3)
    x, y = _random(torch, (130, 513), gen), _random(torch, (513, 70), gen, "C")
    acc = torch.randn((130, 70), device="cuda", dtype=torch.float64, generator=gen)
    out = torch.full((130, 70), float("nan"), device="cuda", dtype=torch.float64)
    got = bx.mma(x, y, acc, out=out, mantissa_bits=52)
    assert got is out
    _check(torch, out, x, y, 52, acc=acc)
    before = acc.clone()
    bx.mma(x, y, acc, out=acc, mantissa_bits=52)  # in place
    _check(torch, acc, x, y, 52, acc=before)


def test_zero_rows_and_columns(torch):
    gen = torch.Generator(device="cuda").manual_seed(4)
    x, y = _random(torch, (64, 96), gen), _random(torch, (96, 48), gen)
    x[5] = 0
    y[:, 7] = 0
    got = bx.matmul(x, y, mantissa_bits=52)
    assert (got[5] == 0).all() and (got[:, 7] == 0).all()
    _check(torch, got, x, y, 52)


def test_inf_and_nan_give_nan_in_their_row_and_column(torch):
    gen = torch.Generator(device="cuda").manual_seed(5)
    x, y = _random(torch, (40, 64), gen), _random(torch, (64, 30), gen)
    x[3, 10] = float("inf")
    y[20, 4] = float("nan")
    got = bx.matmul(x, y, mantissa_bits=52).cpu()
    assert got[3].isnan().all() and got[:, 4].isnan().all()
    keep = [i for i in range(40) if i != 3]
    cols = [j for j in range(30) if j != 4]
    assert not got[keep][:, cols].isnan().any()


def test_tiny_and_huge_magnitudes(torch):
    gen = torch.Generator(device="cuda").manual_seed(6)
    x, y = _random(torch, (64, 128), gen), _random(torch, (128, 64), gen)
    x[:32] *= 2.0**-900
    y[:, :16] *= 2.0**900
    got = bx.matmul(x, y, mantissa_bits=52)
    _check(torch, got, x, y, 52)
