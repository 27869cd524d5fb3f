"""GPU correctness of the Hopper engine behind bx.matmul / bx.mma (sm_90 only).

Every served type x every A/B layout x sizes 1 to 4097, batches and broadcasts, split K,
offsets and padded leading dimensions, repacked operands, alpha / beta: each result is
checked against a float64 product of the same operand values (torch float64 on the GPU,
so 4097^3 stays quick), with the tolerance of reference.tolerance for the engine's f32
accumulation. Outputs are poisoned with NaN before every call.
"""

from __future__ import annotations

import pytest

import blasdx as bx
from blasdx.base import dtypes as dt
from blasdx.calls import matmul as array_gemm
from blasdx.calls.matmul import call_plan
from blasdx.engine import hopper
from blasdx.reference import rounding, tolerance

from .gpu_support import behind_a_delay, poisoned_new_tensors, side_stream, torch_dtype
from .hopper_support import (
    LAYOUTS,
    as_input,
    batched_mma,
    check_product,
    engine_call,
    hopper_torch,
    layout_operands,
    operand,
    poisoned,
    repacked_mma,
    run_again,
    scaled_kernel,
    split_k_mma,
)

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def torch():
    return hopper_torch()


# 16-bit and tf32 inputs here; 8-bit ones (exact int32, promoted fp8) in test_gpu_hopper_8bit.py
SERVED = sorted((p for p in hopper.SERVED if p[0].size > 1), key=lambda p: (p[0].name, p[1].name))


def _check(torch, got, x, y, a: dt.DType, c: dt.DType, k: int, acc=None, alpha=1.0, beta=1.0, what=""):
    """Every element of ``got`` against alpha * x @ y + beta * acc within the engine's f32-accumulation allowance."""
    tol = tolerance(a, c, max(k, 1), dt.float32, rounding_apart=True)  # C's rounding relative to C itself
    check_product(torch, got, x, y, tol, acc, alpha, beta, what, rounding(c))


# ---- every type x layout x size -----------------------------------------------------------------


@pytest.mark.parametrize("size", [1, 17, 255, 1000, 4097])
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("types", SERVED, ids=lambda p: f"{p[0].name}-{p[1].name}")
def test_types_layouts_sizes(torch, types, layout, size):
    a, c = types
    x, y, acc, out = layout_operands(torch, size, layout, a, c)
    (m, k), n = x.shape, y.shape[1]
    engine = engine_call(torch, x, y, acc, out, c, a)
    _check(torch, out, x, y, a, c, k, acc, what=f"{a.name}->{c.name} {layout} {m}x{n}x{k}: {engine.describe()}")


@pytest.mark.parametrize("types", SERVED, ids=lambda p: f"{p[0].name}-{p[1].name}")
def test_matmul_result_and_plan(torch, types):
    a, c = types
    out_dtype = None if array_gemm.RESULT_TYPES[a] == c else c  # another row of the table: out_dtype names it
    gen = torch.Generator(device="cuda").manual_seed(11)
    x, y = operand(torch, (640, 384), a, gen), operand(torch, (384, 520), a, gen)
    for _ in range(2):  # the full path, then the bound one
        with poisoned_new_tensors():  # the result matmul allocates starts as NaN
            got = bx.matmul(as_input(x, a), as_input(y, a), out_dtype=out_dtype)
        assert got.dtype == torch_dtype(c)
        _check(torch, got, x, y, a, c, 384, what=f"matmul {a.name} -> {c.name}")
    assert "hopper wgmma+TMA" in call_plan(as_input(x, a), as_input(y, a), out_dtype=out_dtype).describe()


# ---- batches, broadcasts, split K ---------------------------------------------------------------


@pytest.mark.parametrize("broadcast", ["none", "x", "y"])
@pytest.mark.parametrize("layout", ["RR", "CC"])
def test_batched_and_broadcast(torch, broadcast, layout):
    a, c = dt.bfloat16, dt.float32
    x, y, acc, out = batched_mma(torch, a, c, broadcast, layout)
    _check(torch, out, x, y, a, c, x.shape[-1], acc, what=f"batch {broadcast} {layout}")


#: K splits of the engine's plans on a GPU of 132 SMs (H100 SXM, H200), pinned: too few output tiles
#: to fill the GPU split K, enough do not (elsewhere only whether K is split is checked). Decode (up to
#: 64 rows, swapped) shapes split only below a third of the SMs' worth of tiles; medium ones and the 16-bit
#: tiles of the rest (128 x 128, 128 x 192, 128 x 256) up to one unit per SM in splits of at least 36 K steps.
SPLITS_AT_132_SMS = {(16, 8192, 8192): 1, (16, 2112, 7168): 4, (64, 4096, 14336): 1, (37, 1000, 9000): 8,
                     (128, 8192, 3072): 1, (128, 2048, 8192): 3, (512, 2112, 7168): 3, (512, 1024, 4096): 1,
                     (8192, 1024, 512): 1}


@pytest.mark.parametrize("shape", list(SPLITS_AT_132_SMS), ids=lambda s: "x".join(map(str, s)))
def test_split_k_shapes(torch, shape):
    m, n, k = shape
    a, c = dt.bfloat16, dt.float32
    x, y, acc, out, plan = split_k_mma(torch, shape, a, c, SPLITS_AT_132_SMS[shape])
    _check(torch, out, x, y, a, c, k, acc, what=f"{m}x{n}x{k} ({plan.kernel.splits} splits)")


def test_in_place_accumulation(torch):
    a, c = dt.float16, dt.float32
    gen = torch.Generator(device="cuda").manual_seed(5)
    x, y = operand(torch, (777, 555), a, gen), operand(torch, (555, 333), a, gen, "C")
    acc = operand(torch, (777, 333), c, gen)
    before = acc.clone()
    got = bx.mma(x, y, acc, out=acc)
    assert got is acc
    _check(torch, acc, x, y, a, c, 555, before, what="out=acc")


# ---- strides, offsets, repacking --------------------------------------------------------------


def test_padded_leading_dimensions_read_in_place(torch):
    a, c = dt.bfloat16, dt.float32
    gen = torch.Generator(device="cuda").manual_seed(8)
    big_x = operand(torch, (500, 1024), a, gen)
    big_y = operand(torch, (700, 512), a, gen)
    x, y = big_x[:, :600 - 100], big_y[:500, 8:400]  # ld 1024 and 512; y starts 16 bytes in
    acc = operand(torch, (500, 392), c, gen)
    out = poisoned(torch, (500, 392), c)
    bx.mma(x, y, acc, out=out)
    plan = call_plan(x, y, acc, out=out)
    assert plan.kind == "hopper" and "repacked" not in plan.describe(), plan.describe()
    _check(torch, out, x, y, a, c, 500, acc, what="padded")


@pytest.mark.parametrize("case", ["odd ld", "odd offset", "tf32 col-major", "odd batch stride"])
def test_repacked_operands(torch, case):
    gen = torch.Generator(device="cuda").manual_seed(9)
    a = dt.tfloat32 if case.startswith("tf32") else dt.float16
    c = dt.float32
    if case == "odd ld":
        x = operand(torch, (301, 203), a, gen)[:, :201]  # 203 x 2 bytes per row
        y = operand(torch, (201, 150), a, gen)
    elif case == "odd offset":
        x = operand(torch, (301 * 200 + 1,), a, gen)[1:].view(301, 200)  # starts 2 bytes in
        y = operand(torch, (200, 150), a, gen, "C")
    elif case == "tf32 col-major":
        x = operand(torch, (301, 200), a, gen, "C")
        y = operand(torch, (200, 150), a, gen)  # row-major B is N-major: tf32 wgmma needs it K-major
    else:
        x = operand(torch, (3, 301, 200), a, gen)
        y = operand(torch, (3 * 200 * 150 + 3,), a, gen).as_strided((3, 200, 150), (200 * 150 + 1, 150, 1))
    acc, out = repacked_mma(torch, x, y, a, c, gen)
    _check(torch, out, x, y, a, c, x.shape[-1], acc, what=case)


def test_alpha_beta_and_strided_c_d(torch):
    """The engine's own alpha / beta with C and D of other layouts than the result's."""
    a, c = dt.float16, dt.float16
    gen = torch.Generator(device="cuda").manual_seed(12)
    m, n, k = 333, 257, 1000
    x, y = operand(torch, (m, k), a, gen), operand(torch, (k, n), a, gen, "C")
    cin = operand(torch, (n, m), c, gen).t()  # column-major C
    d = torch.full((m, n + 7), float("nan"), device="cuda", dtype=torch.float16)[:, :n]  # padded D
    for splits in (1, 4):
        engine = None
        for alpha, beta in ((0.5, -2.0), (1.0, 0.0), (0.5, -2.0), (-1.5, 1.0)):  # parameters change and return
            if engine is None:
                engine = engine_call(torch, x, y, cin, d, c, a, alpha=alpha, beta=beta, splits=splits)
            else:
                run_again(engine, x, y, cin, d, alpha, beta)
            _check(torch, d, x, y, a, c, k, cin, alpha=alpha, beta=beta, what=f"alpha {alpha} beta {beta}, "
                   f"{splits} splits")
            d.fill_(float("nan"))


@pytest.mark.parametrize(("c", "n", "splits"), [
    (dt.float16, 257, 1), (dt.float16, 257, 4), (dt.float16, 256, 1), (dt.float16, 264, 1), (dt.float32, 257, 1),
    (dt.float32, 255, 4), (dt.float32, 260, 1),
], ids=lambda v: getattr(v, "name", str(v)))
def test_d_padding_is_never_written(torch, c, n, splits):
    """D a view of a larger array (its rows 16-byte aligned): the columns past N and the rows past M
    belong to the caller and must keep what they held. N of whole 16 bytes is stored by TMA where K is
    not split; other N pair by pair (a TMA store past N wrote the rest of the 16 bytes holding N - 1)."""
    a = dt.float16
    gen = torch.Generator(device="cuda").manual_seed(n + splits)
    m, k = 333, 1000
    x, y = operand(torch, (m, k), a, gen), operand(torch, (k, n), a, gen, "C")
    cin = operand(torch, (m, n), c, gen)
    per16 = 16 // c.size
    pad = -n % per16 + per16  # rows of whole 16 bytes, at least one granule of padding past N's
    storage = torch.full((m + 2, n + pad), float("nan"), device="cuda", dtype=torch_dtype(c))
    d = storage[:m, :n]
    engine = engine_call(torch, x, y, cin, d, c, a, alpha=0.5, beta=-2.0, splits=splits)
    assert engine.splits == splits
    assert (engine.store_d is not None) == (splits == 1 and n * c.size % 16 == 0), engine.describe()
    _check(torch, d, x, y, a, c, k, cin, alpha=0.5, beta=-2.0, what=engine.describe())
    written = ~torch.isnan(storage[:, n:])
    assert not written.any(), (f"{engine.describe()}: {int(written.sum())} padding elements written, columns "
                               f"{sorted(set((torch.nonzero(written)[:, 1] + n).tolist()))}")
    below = ~torch.isnan(storage[m:])
    assert not below.any(), f"{engine.describe()}: {int(below.sum())} elements of the rows past M written"


def test_k_zero_and_empty_results(torch):
    gen = torch.Generator(device="cuda").manual_seed(13)
    x, y = operand(torch, (64, 0), dt.float16, gen), operand(torch, (0, 48), dt.float16, gen)
    acc = operand(torch, (64, 48), dt.float32, gen)
    got = bx.mma(x, y, acc)
    assert torch.equal(got, acc)
    assert bx.matmul(operand(torch, (0, 32), dt.float16, gen), operand(torch, (32, 8), dt.float16, gen)).shape == (0, 8)


def test_every_config_and_split(torch):
    """Each tile configuration, with and without split K, on one odd-shaped product (a row-major y of 390 columns is
    repacked K-major, so the 32-wide whole-row tile runs it too)."""
    a, c = dt.bfloat16, dt.float32
    gen = torch.Generator(device="cuda").manual_seed(14)
    m, n, k = 259, 390, 1100  # 3 tile rows of 128: the last cluster's second block lies past M
    native = {name: config for name, config in hopper.CONFIGS.items()  # 3xtf32, decode: their own tests
              if not config.split_tf32 and not config.swap_ab}
    configs = dict(native)
    configs.update({f"{name} in clusters": hopper.replace(config, cluster=2) for name, config in native.items()
                    if config.consumers == 2})
    for name, config in configs.items():
        for splits in (1, 3):
            for layout in ("RC", "CR"):
                x = operand(torch, (m, k), a, gen, layout[0])
                y = operand(torch, (k, n), a, gen, layout[1])
                d = poisoned(torch, (m, n), c)
                engine = engine_call(torch, x, y, None, d, c, a, config=config, splits=splits)
                assert engine.splits == splits and engine.config == hopper.replace(config, bk=64)
                _check(torch, d, x, y, a, c, k, what=f"{name} {splits} splits {layout}")


@pytest.mark.parametrize("splits", [1, 2])
@pytest.mark.parametrize(("a", "c"), [(dt.float16, dt.float16), (dt.bfloat16, dt.float32), (dt.float16, dt.float32)],
                         ids=lambda t: t.name)
def test_wide_192_tiles(torch, a, c, splits):
    """128 x 192 tiles (96 f32 sums a thread): unsplit with D stored by TMA in 64-row chunks (3 or 6 of them across
    the tile), split through partial sums; a last tile column 40 wide, K not a whole number of steps, x MN-major."""
    gen = torch.Generator(device="cuda").manual_seed(31 + splits)
    m, n, k = 384, 1000, 700
    x, y = operand(torch, (m, k), a, gen, "C"), operand(torch, (k, n), a, gen, "R")
    acc = operand(torch, (m, n), c, gen)
    d = poisoned(torch, (m, n), c)
    engine = engine_call(torch, x, y, acc, d, c, a, alpha=0.5, beta=-1.0, config=hopper.WIDE_192, splits=splits)
    assert engine.config.bn == 192 and ("D by TMA" in engine.describe()) == (splits == 1), engine.describe()
    _check(torch, d, x, y, a, c, k, acc, alpha=0.5, beta=-1.0, what=engine.describe())


def test_streams_and_repeat_calls(torch):
    """bx.matmul (the engine, and one block per problem) and bx.mma into out=, each warmed up and then run
    again on a busy side stream behind writes of new inputs (gpu_support.behind_a_delay): each call must
    read its x as rewritten on that stream just before it (a launch on any other stream runs during the
    delay, on the old values), and work queued after it there must see its result (a copy taken there;
    new outputs start as NaN). Repeated engine calls reuse the parameter block safely."""
    gen = torch.Generator(device="cuda").manual_seed(15)
    a, c = dt.float16, dt.float16
    s = side_stream()
    x, y = operand(torch, (512, 256), a, gen), operand(torch, (256, 384), a, gen)
    fresh = [operand(torch, (512, 256), a, gen) for _ in range(3)]
    small_x, small_y, small_fresh = (operand(torch, (8, 64, 64), dt.float32, gen) for _ in range(3))
    acc, fresh_acc = operand(torch, (512, 384), c, gen), operand(torch, (512, 384), c, gen)
    out = poisoned(torch, (512, 384), c)  # mma of matmul's types: the same engine kernel
    torch.cuda.synchronize()  # made on the default stream, which the side stream does not wait for
    with torch.cuda.stream(s):  # warm-up: compiled, loaded, bound
        bx.matmul(x, y), bx.matmul(small_x, small_y), bx.mma(x, y, acc, out=out)
    s.synchronize()
    assert [call_plan(x, y).kind, call_plan(small_x, small_y).kind, call_plan(x, y, acc, out=out).kind] == [
        "hopper", "block", "hopper"]
    outs, copies = [], []
    with poisoned_new_tensors(), behind_a_delay(s, "bx.matmul / bx.mma on a side stream"):
        for new in fresh[:2]:
            x.copy_(new)
            outs.append(bx.matmul(x, y))
            copies.append(outs[-1].clone())
        small_x.copy_(small_fresh)
        small = bx.matmul(small_x, small_y)
        small_copy = small.clone()
        x.copy_(fresh[2])
        acc.copy_(fresh_acc)
        bx.mma(x, y, acc, out=out)
        out_copy = out.clone()
    for i, (got, copy) in enumerate(zip(outs, copies)):
        _check(torch, got, fresh[i], y, a, c, 256, what=f"matmul call {i} on the side stream")
        _check(torch, copy, fresh[i], y, a, c, 256, what=f"copy of matmul call {i}'s result queued after it")
    for what, got in (("one-block matmul", small), ("copy of the one-block matmul's result", small_copy)):
        _check(torch, got, small_fresh, small_y, dt.float32, dt.float32, 64, what=what)
    for what, got in (("mma into out=", out), ("copy of out= queued after the mma", out_copy)):
        _check(torch, got, fresh[2], y, a, c, 256, fresh_acc, what=what)


# ---- the engine in a user's kernel (bx.DeviceGemm) ----------------------------------------------

@pytest.mark.parametrize(("a", "c", "layout", "cluster"), [
    (dt.bfloat16, dt.bfloat16, "RR", 1), (dt.float16, dt.float32, "CC", 2), (dt.float16, dt.float16, "RC", 1),
    (dt.tfloat32, dt.float32, "RC", 2),
])
def test_device_gemm_in_a_fused_kernel(torch, a, c, layout, cluster):
    gen = torch.Generator(device="cuda").manual_seed(16)
    batch, m, n, k = 2, 704, 520, 392  # every row of A, B and D a whole 16 bytes (the device API does not repack)
    layouts = [bx.row_major if ch == "R" else bx.col_major for ch in layout]
    dg = bx.DeviceGemm(a, c, layouts[0], layouts[1], hopper.replace(hopper.WIDE, cluster=cluster))
    kernel = scaled_kernel(dg)
    x = operand(torch, (batch, m, k), a, gen, layout[0])
    y = operand(torch, (batch, k, n), a, gen, layout[1])
    d = poisoned(torch, (batch, m, n), c)
    maps = (dg.tensor_map_a(x), dg.tensor_map_b(y), dg.tensor_map_d(d))  # tf32 operands are float32 arrays
    kernel.launch(dg.grid(m, n, batch), (*maps, 0.25, m, n, k, batch))
    torch.cuda.synchronize()
    _check(torch, d, x, y, a, c, k, alpha=0.25, what=f"DeviceGemm {a.name}->{c.name} {layout}")


def test_fused_linear_example(torch):
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    done = subprocess.run([sys.executable, str(root / "examples" / "fused_linear.py"), "--m", "1000", "--n", "776",
                           "--k", "520"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "relative error" in done.stdout and "speed-up" in done.stdout
