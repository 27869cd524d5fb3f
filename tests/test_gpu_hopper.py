"""GPU correctness of the Hopper engine behind bx.matmul / bx.mma (sm_90 only).

Every served type x every A/B layout x sizes 1 to 4097, batches and broadcasts, split K,
offsets and padded leading dimensions, repacked operands, alpha / beta: each result is
checked against a float64 product of the same operand values (torch float64 on the GPU,
so 4097^3 stays quick), with the tolerance of reference.tolerance for the engine's f32
accumulation. Outputs are poisoned with NaN before every call.
"""

from __future__ import annotations

import math

import pytest

import blasdx as bx
from blasdx.calls import matmul as array_gemm
from blasdx.engine import hopper
from blasdx import dtypes as dt
from blasdx.reference import tolerance

from .gpu_support import gpu_sm, require_gpu, torch_dtype

pytestmark = pytest.mark.gpu

# 16-bit and tf32 inputs here; 8-bit ones (exact int32, promoted fp8) in test_gpu_hopper_8bit.py
SERVED = sorted((p for p in hopper.SERVED if p[0].size > 1), key=lambda p: (p[0].name, p[1].name))
LAYOUTS = ["RR", "RC", "CR", "CC"]  # A then B: R row-major, C column-major


@pytest.fixture(scope="module")
def torch():
    if require_gpu() != 90:
        pytest.skip("the Hopper engine runs on sm_90 GPUs")
    import torch

    return torch


def _random(torch, shape, a: dt.DType, gen, order: str = "R"):
    """A CUDA tensor of fresh random values of type ``a`` (float32 storage for tf32), row- or column-major."""
    if order == "C":
        shape = shape[:-2] + (shape[-1], shape[-2])
    t = torch.randn(shape, device="cuda", generator=gen, dtype=torch.float32).to(torch_dtype(a))
    return t if order == "R" else t.transpose(-1, -2)


def _arg(t, a: dt.DType):
    return bx.tf32(t) if a == dt.tfloat32 else t


def _check(torch, got, x, y, a: dt.DType, c: dt.DType, k: int, acc=None, alpha=1.0, beta=1.0, what=""):
    """Normwise relative error of ``got`` against alpha * x @ y + beta * acc in float64."""
    ref = alpha * torch.matmul(x.to(torch.float64), y.to(torch.float64))
    if acc is not None:
        ref = ref + beta * acc.to(torch.float64)
    out = got.to(torch.float64)
    assert not torch.isnan(out).any(), f"{what}: NaN in the result (an element was never written)"
    scale = torch.linalg.norm(ref).item()
    err = torch.linalg.norm(out - ref).item() / (scale if scale > 0 else 1.0)
    tol = tolerance(a, c, max(k, 1), dt.float32)
    assert err <= tol, f"{what}: relative error {err:.3e} > {tol:.1e}"


def _plan_of(shape, result: dt.DType):
    """The newest call plan whose result has this shape and type."""
    return next(p for p in reversed(list(array_gemm._CALLS.values())) if p.shape == shape and p.dtype == result)


def _poisoned(torch, shape, c: dt.DType):
    return torch.full(shape, float("nan"), device="cuda", dtype=torch_dtype(c))


def _engine_call(torch, x, y, acc, out, a: dt.DType, c: dt.DType, alpha=1.0, beta=1.0, config=None, splits=None):
    """out = alpha * x @ y + beta * acc through the engine itself (whatever path bx.mma would pick)."""
    from blasdx import arrays

    vx, vy = arrays.as_array(x, "x")._replace(dtype=a), arrays.as_array(y, "y")._replace(dtype=a)
    mx, my = array_gemm._matrix(vx, "x"), array_gemm._matrix(vy, "y")
    batch = out.shape[0] if out.dim() == 3 else 1
    device = array_gemm._device_info(out.device.index)
    vout = arrays.as_array(out, "out")
    engine, reason = array_gemm._engine_plan(vx, vy, mx, my, c, mx.rows, my.cols, mx.cols, batch, device, vout,
                                             config, splits)
    assert engine is not None, reason
    handle = arrays.resolve_stream(None, (out,))
    core = arrays.as_core_stream(None, handle)
    vacc = None if acc is None else arrays.as_array(acc, "acc")
    engine.run(out.device.index, core, handle, vx, vy, vacc, vout, alpha, beta)
    return engine


# ---- every type x layout x size -----------------------------------------------------------------


@pytest.mark.parametrize("size", [1, 17, 255, 1000, 4097])
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("types", SERVED, ids=lambda p: f"{p[0].name}-{p[1].name}")
def test_types_layouts_sizes(torch, types, layout, size):
    a, c = types
    gen = torch.Generator(device="cuda").manual_seed(size * 7 + LAYOUTS.index(layout))
    m, n, k = size, size + (3 if size > 1 else 0), size + (5 if size > 1 else 0)
    x = _random(torch, (m, k), a, gen, layout[0])
    y = _random(torch, (k, n), a, gen, layout[1])
    acc = _random(torch, (m, n), c, gen)
    out = _poisoned(torch, (m, n), c)
    engine = _engine_call(torch, x, y, acc, out, a, c)
    _check(torch, out, x, y, a, c, k, acc, what=f"{a.name}->{c.name} {layout} {m}x{n}x{k}: {engine.describe()}")


@pytest.mark.parametrize("types", SERVED, ids=lambda p: f"{p[0].name}-{p[1].name}")
def test_matmul_result_and_plan(torch, types):
    a, c = types
    if array_gemm.RESULT_TYPES[a] != c:
        pytest.skip("matmul's result type is the table's")
    gen = torch.Generator(device="cuda").manual_seed(11)
    x, y = _random(torch, (640, 384), a, gen), _random(torch, (384, 520), a, gen)
    torch.empty((640, 520), device="cuda", dtype=torch_dtype(c)).fill_(float("nan"))  # poison the allocator's block
    got = bx.matmul(_arg(x, a), _arg(y, a))
    assert got.dtype == torch_dtype(c)
    _check(torch, got, x, y, a, c, 384, what=f"matmul {a.name}")
    assert "hopper wgmma+TMA" in _plan_of((640, 520), c).describe()


# ---- batches, broadcasts, split K ---------------------------------------------------------------


@pytest.mark.parametrize("broadcast", ["none", "x", "y"])
@pytest.mark.parametrize("layout", ["RR", "CC"])
def test_batched_and_broadcast(torch, broadcast, layout):
    a, c = dt.bfloat16, dt.float32
    gen = torch.Generator(device="cuda").manual_seed(3)
    batch, m, n, k = 5, 300, 200, 264
    x = _random(torch, (1 if broadcast == "x" else batch, m, k), a, gen, layout[0])
    y = _random(torch, (1 if broadcast == "y" else batch, k, n), a, gen, layout[1])
    acc = _random(torch, (batch, m, n), c, gen)
    out = _poisoned(torch, (batch, m, n), c)
    bx.mma(x, y, acc, out=out)
    assert _plan_of((batch, m, n), c).kind == "hopper"
    _check(torch, out, x, y, a, c, k, acc, what=f"batch {broadcast} {layout}")


@pytest.mark.parametrize("shape", [(16, 8192, 8192), (64, 4096, 14336), (128, 8192, 3072), (8192, 1024, 512),
                                   (37, 1000, 9000)])
def test_split_k_shapes(torch, shape):
    m, n, k = shape
    a, c = dt.bfloat16, dt.float32
    gen = torch.Generator(device="cuda").manual_seed(m + n)
    x, y = _random(torch, (m, k), a, gen), _random(torch, (k, n), a, gen)
    acc = _random(torch, (m, n), c, gen)
    out = _poisoned(torch, (m, n), c)
    bx.mma(x, y, acc, out=out)
    plan = _plan_of((m, n), c)
    assert plan.kind == "hopper", plan.describe()
    engine = plan.kernel
    expected = hopper.choose_config(a, m, n, k, 1, torch.cuda.get_device_properties(0).multi_processor_count)[1]
    assert engine.splits == expected
    _check(torch, out, x, y, a, c, k, acc, what=f"{m}x{n}x{k} ({engine.splits} splits)")


def test_in_place_accumulation(torch):
    a, c = dt.float16, dt.float32
    gen = torch.Generator(device="cuda").manual_seed(5)
    x, y = _random(torch, (777, 555), a, gen), _random(torch, (555, 333), a, gen, "C")
    acc = _random(torch, (777, 333), c, gen)
    before = acc.clone()
    got = bx.mma(x, y, acc, out=acc)
    assert got is acc
    _check(torch, acc, x, y, a, c, 555, before, what="out=acc")


# ---- strides, offsets, repacking --------------------------------------------------------------


def test_padded_leading_dimensions_read_in_place(torch):
    a, c = dt.bfloat16, dt.float32
    gen = torch.Generator(device="cuda").manual_seed(8)
    big_x = _random(torch, (500, 1024), a, gen)
    big_y = _random(torch, (700, 512), a, gen)
    x, y = big_x[:, :600 - 100], big_y[:500, 8:400]  # ld 1024 and 512; y starts 16 bytes in
    acc = _random(torch, (500, 392), c, gen)
    out = _poisoned(torch, (500, 392), c)
    bx.mma(x, y, acc, out=out)
    plan = _plan_of((500, 392), c)
    assert plan.kind == "hopper" and "repacked" not in plan.describe(), plan.describe()
    _check(torch, out, x, y, a, c, 500, acc, what="padded")


@pytest.mark.parametrize("case", ["odd ld", "odd offset", "tf32 col-major", "odd batch stride"])
def test_repacked_operands(torch, case):
    gen = torch.Generator(device="cuda").manual_seed(9)
    a = dt.tfloat32 if case.startswith("tf32") else dt.float16
    c = dt.float32
    if case == "odd ld":
        x = _random(torch, (301, 203), a, gen)[:, :201]  # 203 x 2 bytes per row
        y = _random(torch, (201, 150), a, gen)
    elif case == "odd offset":
        x = _random(torch, (301 * 200 + 1,), a, gen)[1:].view(301, 200)  # starts 2 bytes in
        y = _random(torch, (200, 150), a, gen, "C")
    elif case == "tf32 col-major":
        x = _random(torch, (301, 200), a, gen, "C")
        y = _random(torch, (200, 150), a, gen)  # row-major B is N-major: tf32 wgmma needs it K-major
    else:
        x = _random(torch, (3, 301, 200), a, gen)
        y = _random(torch, (3 * 200 * 150 + 3,), a, gen).as_strided((3, 200, 150), (200 * 150 + 1, 150, 1))
    m, k = x.shape[-2:]
    n = y.shape[-1]
    shape = (3, m, n) if x.dim() == 3 else (m, n)
    acc = _random(torch, shape, c, gen)
    out = _poisoned(torch, shape, c)
    bx.mma(_arg(x, a), _arg(y, a), acc, out=out)
    plan = _plan_of(shape, c)
    assert plan.kind == "hopper" and "repacked" in plan.describe(), plan.describe()
    _check(torch, out, x, y, a, c, k, acc, what=case)


def test_alpha_beta_and_strided_c_d(torch):
    """The engine's own alpha / beta with C and D of other layouts than the result's."""
    a, c = dt.float16, dt.float16
    gen = torch.Generator(device="cuda").manual_seed(12)
    m, n, k = 333, 257, 1000
    x, y = _random(torch, (m, k), a, gen), _random(torch, (k, n), a, gen, "C")
    cin = _random(torch, (n, m), c, gen).t()  # column-major C
    d = torch.full((m, n + 7), float("nan"), device="cuda", dtype=torch.float16)[:, :n]
    for splits in (1, 4):
        engine = None
        for alpha, beta in ((0.5, -2.0), (1.0, 0.0), (0.5, -2.0), (-1.5, 1.0)):  # parameters change and return
            if engine is None:
                engine = _engine_call(torch, x, y, cin, d, a, c, alpha=alpha, beta=beta, splits=splits)
            else:
                from blasdx import arrays

                handle = arrays.resolve_stream(None, (d,))
                views = [arrays.as_array(t, name) for t, name in ((x, "x"), (y, "y"), (cin, "c"), (d, "d"))]
                engine.run(0, arrays.as_core_stream(None, handle), handle, *views, alpha, beta)
            _check(torch, d, x, y, a, c, k, cin, alpha=alpha, beta=beta,
                   what=f"alpha {alpha} beta {beta}, {splits} splits")
            d.fill_(float("nan"))


def test_k_zero_and_empty_results(torch):
    gen = torch.Generator(device="cuda").manual_seed(13)
    x, y = _random(torch, (64, 0), dt.float16, gen), _random(torch, (0, 48), dt.float16, gen)
    acc = _random(torch, (64, 48), dt.float32, gen)
    got = bx.mma(x, y, acc)
    assert torch.equal(got, acc)
    assert bx.matmul(_random(torch, (0, 32), dt.float16, gen), _random(torch, (32, 8), dt.float16, gen)).shape == (0, 8)


def test_every_config_and_split(torch):
    """Each tile configuration, with and without split K, on one odd-shaped product."""
    a, c = dt.bfloat16, dt.float32
    gen = torch.Generator(device="cuda").manual_seed(14)
    m, n, k = 259, 390, 1100  # 3 tile rows of 128: the last cluster's second block lies past M
    native = {name: config for name, config in hopper.CONFIGS.items() if not config.split_tf32}  # 3xtf32: its tests
    configs = dict(native)
    configs.update({f"{name} in clusters": hopper.replace(config, cluster=2) for name, config in native.items()
                    if config.consumers == 2})
    for name, config in configs.items():
        for splits in (1, 3):
            for layout in ("RC", "CR"):
                x = _random(torch, (m, k), a, gen, layout[0])
                y = _random(torch, (k, n), a, gen, layout[1])
                d = _poisoned(torch, (m, n), c)
                engine = _engine_call(torch, x, y, None, d, a, c, config=config, splits=splits)
                assert engine.splits == splits and engine.config == hopper.replace(config, bk=64)
                _check(torch, d, x, y, a, c, k, what=f"{name} {splits} splits {layout}")
                assert math.ceil(k / config.bk) >= splits


def test_streams_and_repeat_calls(torch):
    """Repeated calls on a side stream with fresh outputs: the parameter block is reused safely."""
    gen = torch.Generator(device="cuda").manual_seed(15)
    a, c = dt.float16, dt.float16
    s = torch.cuda.Stream()
    xs = [_random(torch, (512, 256), a, gen) for _ in range(4)]
    ys = [_random(torch, (256, 384), a, gen) for _ in range(4)]
    torch.cuda.synchronize()
    with torch.cuda.stream(s):
        outs = [bx.matmul(x, y) for x, y in zip(xs, ys)]
    s.synchronize()
    for x, y, got in zip(xs, ys, outs):
        _check(torch, got, x, y, a, c, 256, what="stream")
    assert gpu_sm() == 90


# ---- the engine in a user's kernel (bx.DeviceGemm) ----------------------------------------------

FUSED = r"""
struct Scale {
    float s;
    __device__ void value(const blasdx::hopper::Work&, int, int, float& v0, float& v1) const { v0 *= s; v1 *= s; }
};
extern "C" __global__ void __launch_bounds__(LINEAR::threads, 1)
scaled(const __grid_constant__ blasdx::hopper::TensorMap map_a, const __grid_constant__ blasdx::hopper::TensorMap map_b,
       const __grid_constant__ blasdx::hopper::TensorMap map_d, float s, int m, int n, int k, int batch) {
    extern __shared__ __align__(16) unsigned char smem[];
    using G = LINEAR::gemm;
    const G::Sched sched(m, n, k, batch, 1);
    G::run(smem, &map_a, &map_b, sched, batch > 1, batch > 1,
           blasdx::hopper::StageThroughShared<LINEAR::c_type, Scale>{&map_d, Scale{s}});
}
"""


@pytest.mark.parametrize(("a", "c", "layout", "cluster"), [
    (dt.bfloat16, dt.bfloat16, "RR", 1), (dt.float16, dt.float32, "CC", 2), (dt.float16, dt.float16, "RC", 1),
    (dt.tfloat32, dt.float32, "RC", 2),
])
def test_device_gemm_in_a_fused_kernel(torch, a, c, layout, cluster):
    gen = torch.Generator(device="cuda").manual_seed(16)
    batch, m, n, k = 2, 704, 520, 392  # every row of A, B and D a whole 16 bytes (the device API does not repack)
    layouts = [bx.row_major if ch == "R" else bx.col_major for ch in layout]
    dg = bx.DeviceGemm(a, c, layouts[0], layouts[1], hopper.replace(hopper.WIDE, cluster=cluster))
    kernel = bx.compile_kernel(FUSED, "scaled", {"LINEAR": dg})
    x = _random(torch, (batch, m, k), a, gen, layout[0])
    y = _random(torch, (batch, k, n), a, gen, layout[1])
    d = _poisoned(torch, (batch, m, n), c)
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
