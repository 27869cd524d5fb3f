"""GPU correctness of the Hopper engine's f64 (DMMA) and f32 (FFMA) path (sm_90 only).

Both types x every A/B layout x sizes 1 to 4097, batches and broadcasts, split K, repacked
operands, alpha / beta with C and D of other layouts, every sweep configuration: each result
against a float64 product of the same operand values (torch float64 on the GPU), with
reference.tolerance for the type's own accumulation. Outputs are poisoned with NaN first.
"""

from __future__ import annotations

import pytest

import blasdx as bx
from blasdx.base import dtypes as dt
from blasdx.calls.matmul import call_plan
from blasdx.engine import wide as hopper_wide
from blasdx.reference import tolerance

from .gpu_support import poisoned_new_tensors, torch_dtype
from . import hopper_support as hs

pytestmark = pytest.mark.gpu

WIDE = [dt.float64, dt.float32]


@pytest.fixture(scope="module")
def torch():
    return hs.hopper_torch()


def _check(torch, got, x, y, a: dt.DType, k: int, acc=None, alpha=1.0, beta=1.0, what=""):
    """Every element of ``got`` against alpha * x @ y + beta * acc within the type's own allowance."""
    hs.check_product(torch, got, x, y, tolerance(a, a, max(k, 1), a), acc, alpha, beta, what)


@pytest.mark.parametrize("size", [1, 17, 255, 1000, 4097])
@pytest.mark.parametrize("layout", hs.LAYOUTS)
@pytest.mark.parametrize("a", WIDE, ids=lambda t: t.name)
def test_types_layouts_sizes(torch, a, layout, size):
    x, y, acc, out = hs.layout_operands(torch, size, layout, a, a)
    (m, k), n = x.shape, y.shape[1]
    engine = hs.engine_call(torch, x, y, acc, out, a)
    assert isinstance(engine, hopper_wide.WidePlan)
    _check(torch, out, x, y, a, k, acc, what=f"{a.name} {layout} {m}x{n}x{k}: {engine.describe()}")


@pytest.mark.parametrize("a", WIDE, ids=lambda t: t.name)
def test_matmul_takes_the_wide_path(torch, a):
    gen = torch.Generator(device="cuda").manual_seed(11)
    x, y = hs.operand(torch, (640, 384), a, gen), hs.operand(torch, (384, 520), a, gen, "C")
    with poisoned_new_tensors():  # the result matmul allocates starts as NaN
        got = bx.matmul(x, y)
    assert got.dtype == torch_dtype(a)
    _check(torch, got, x, y, a, 384, what=f"matmul {a.name}")
    unit = "DMMA" if a == dt.float64 else "FFMA"
    assert f"hopper {unit}+TMA" in call_plan(x, y).describe()


@pytest.mark.parametrize("broadcast", ["none", "x", "y"])
@pytest.mark.parametrize("layout", ["RR", "CC"])
@pytest.mark.parametrize("a", WIDE, ids=lambda t: t.name)
def test_batched_and_broadcast(torch, a, broadcast, layout):
    x, y, acc, out = hs.batched_mma(torch, a, a, broadcast, layout)
    _check(torch, out, x, y, a, x.shape[-1], acc, what=f"{a.name} batch {broadcast} {layout}")


#: K splits of the wide path's plans (either type) on a GPU of 132 SMs (H100 SXM, H200), pinned.
SPLITS_AT_132_SMS = {(16, 4096, 8192): 4, (100, 1000, 9000): 16, (8192, 1024, 512): 1}


@pytest.mark.parametrize("shape", list(SPLITS_AT_132_SMS))
@pytest.mark.parametrize("a", WIDE, ids=lambda t: t.name)
def test_split_k_shapes(torch, a, shape):
    m, n, k = shape
    x, y, acc, out, plan = hs.split_k_mma(torch, shape, a, a, SPLITS_AT_132_SMS[shape])
    _check(torch, out, x, y, a, k, acc, what=f"{a.name} {m}x{n}x{k} ({plan.kernel.splits} splits)")


@pytest.mark.parametrize("case", ["odd ld", "odd offset", "odd batch stride"])
@pytest.mark.parametrize("a", WIDE, ids=lambda t: t.name)
def test_repacked_operands(torch, a, case):
    gen = torch.Generator(device="cuda").manual_seed(9)
    if case == "odd ld":
        x = hs.operand(torch, (301, 203), a, gen)[:, :201]  # rows of 203 elements: not whole 16 bytes
        y = hs.operand(torch, (201, 150), a, gen, "C")
    elif case == "odd offset":
        x = hs.operand(torch, (301 * 200 + 1,), a, gen)[1:].view(301, 200)  # starts one element in
        y = hs.operand(torch, (200, 150), a, gen)
    else:
        x = hs.operand(torch, (3, 301, 200), a, gen)
        y = hs.operand(torch, (3 * 200 * 150 + 3,), a, gen).as_strided((3, 200, 150), (200 * 150 + 1, 150, 1))
    acc, out = hs.repacked_mma(torch, x, y, a, a, gen)
    _check(torch, out, x, y, a, x.shape[-1], acc, what=f"{a.name} {case}")


@pytest.mark.parametrize("a", WIDE, ids=lambda t: t.name)
def test_alpha_beta_and_strided_c_d(torch, a):
    """alpha / beta in the type itself, column-major C, padded D, with and without split K."""
    gen = torch.Generator(device="cuda").manual_seed(12)
    m, n, k = 333, 257, 1000
    x, y = hs.operand(torch, (m, k), a, gen), hs.operand(torch, (k, n), a, gen, "C")
    cin = hs.operand(torch, (n, m), a, gen).t()
    storage = torch.full((m, n + 7), float("nan"), device="cuda", dtype=torch_dtype(a))
    d = storage[:, :n]  # padded D: its padding must stay NaN
    for splits in (1, 3):
        engine = None
        for alpha, beta in ((0.5, -2.0), (1.0, 0.0), (0.5, -2.0), (-1.5, 1.0)):
            if engine is None:
                engine = hs.engine_call(torch, x, y, cin, d, a, alpha=alpha, beta=beta, splits=splits)
                assert engine.splits == splits
            else:
                hs.run_again(engine, x, y, cin, d, alpha, beta)
            what = f"{a.name} alpha {alpha} beta {beta}, {splits} splits"
            _check(torch, d, x, y, a, k, cin, alpha=alpha, beta=beta, what=what)
            assert torch.isnan(storage[:, n:]).all(), f"{what}: D's padding was written"
            storage.fill_(float("nan"))


@pytest.mark.parametrize("a", WIDE, ids=lambda t: t.name)
def test_every_sweep_configuration(torch, a):
    gen = torch.Generator(device="cuda").manual_seed(14)
    m, n, k = 259, 390, 1100  # 3 tile rows: the last cluster's second block lies past M
    for name, config in hopper_wide.sweep_configs(a).items():
        for layout in ("RC", "CR"):
            x = hs.operand(torch, (m, k), a, gen, layout[0])
            y = hs.operand(torch, (k, n), a, gen, layout[1])
            d = hs.poisoned(torch, (m, n), a)
            engine = hs.engine_call(torch, x, y, None, d, a, config=config, splits=1)
            assert engine.config == config
            _check(torch, d, x, y, a, k, what=f"{a.name} {name} {layout}")


@pytest.mark.parametrize("a", WIDE, ids=lambda t: t.name)
def test_every_small_tile(torch, a):
    """Each of the rule's smaller tiles (hopper_wide.SMALL) on every layout it reads, odd sizes, unsplit and split."""
    gen = torch.Generator(device="cuda").manual_seed(15)
    for config, _ in hopper_wide.SMALL[a.name]:
        for layout in hs.LAYOUTS:
            if not hopper_wide.reads(a, config, layout[0] == "R", layout[1] == "C"):
                continue
            for (m, n, k), splits in (((129, 197, 300), 1), ((65, 63, 1100), 3), ((1, 17, 255), 1)):
                x = hs.operand(torch, (m, k), a, gen, layout[0])
                y = hs.operand(torch, (k, n), a, gen, layout[1])
                d = hs.poisoned(torch, (m, n), a)
                engine = hs.engine_call(torch, x, y, None, d, a, config=config, splits=splits)
                assert engine.config == config and engine.splits == splits
                _check(torch, d, x, y, a, k, what=f"{a.name} {config} {layout} {m}x{n}x{k} in {splits}")


def test_small_tiles_take_a_blocked_solves_leaves(torch):
    """bx.matmul of a 128-row leaf shape takes a small tile by the rule and is right."""
    gen = torch.Generator(device="cuda").manual_seed(16)
    for a in WIDE:
        x, y = hs.operand(torch, (128, 128), a, gen), hs.operand(torch, (128, 1024), a, gen)
        with poisoned_new_tensors():
            got = bx.matmul(x, y)
        _check(torch, got, x, y, a, 128, what=f"matmul {a.name} 128x1024x128")
        if torch.cuda.get_device_properties(0).multi_processor_count >= 114:
            assert "64x64 tiles" in call_plan(x, y).describe()


def test_nan_in_c_stays_out_when_beta_is_zero(torch):
    a = dt.float64
    gen = torch.Generator(device="cuda").manual_seed(15)
    x, y = hs.operand(torch, (500, 300), a, gen), hs.operand(torch, (300, 400), a, gen)
    cin = torch.full((500, 400), float("nan"), device="cuda", dtype=torch.float64)
    d = hs.poisoned(torch, (500, 400), a)
    hs.engine_call(torch, x, y, cin, d, a, alpha=1.0, beta=0.0)
    _check(torch, d, x, y, a, 300, what="beta 0 with NaN in C")
