"""Helpers of the Hopper engine's GPU tests (test_gpu_hopper*.py, test_gpu_emulation.py): operands,
poisoned outputs, a call of the engine itself, and the element-wise check against float64.

The check holds every element to ``tol * (|alpha| |x| @ |y| + |beta| |acc|)`` of its own (the
sum of the magnitudes it is made of, computed in float64 on the GPU), so that one wrong element
fails however many right ones surround it; integer results must be exact.
"""

from __future__ import annotations

import pytest

import blasdx as bx
from blasdx import arrays
from blasdx.base import dtypes as dt
from blasdx.calls import matmul as array_gemm
from blasdx.calls.matmul import call_plan
from blasdx.engine import hopper
from blasdx.reference import MARGINS, tolerance

from .gpu_support import require_gpu, torch_dtype

SENTINEL = -1234567  # int32 poison
LAYOUTS = ["RR", "RC", "CR", "CC"]  # A then B: R row-major, C column-major


def hopper_torch(reason: str = "the Hopper engine runs on sm_90 GPUs"):
    """torch, on an sm_90 GPU (the engine's); skips elsewhere, saying ``reason`` (the modules' ``torch`` fixture)."""
    if require_gpu() != 90:
        pytest.skip(reason)
    import torch

    return torch


def ordered(t, order: str):
    """``t`` (logical shape) stored row-major ("R") or column-major ("C")."""
    return t.contiguous() if order == "R" else t.transpose(-1, -2).contiguous().transpose(-1, -2)


def operand(torch, shape, a: dt.DType, gen, order: str = "R"):
    """Fresh random values of type ``a`` on the GPU: normal for 16-bit, tf32 (float32 storage), f32
    and f64; 2 * normal rounded for fp8; the whole range for int8 / uint8."""
    if a.integral:
        lo, hi = (-128, 128) if a == dt.int8 else (0, 256)
        t = torch.randint(lo, hi, shape, device="cuda", generator=gen, dtype=torch.int32).to(torch_dtype(a))
    elif a in (dt.float8_e4m3, dt.float8_e5m2):
        t = (2 * torch.randn(shape, device="cuda", generator=gen)).to(torch_dtype(a))
    else:
        t = torch.randn(shape, device="cuda", generator=gen, dtype=torch.float64).to(torch_dtype(a))
    return ordered(t, order)


def as_input(t, a: dt.DType):
    """What matmul / mma take for ``t`` of type ``a`` (a tf32-marked float32 tensor for tf32)."""
    return bx.tf32(t) if a == dt.tfloat32 else t


def poisoned(torch, shape, c: dt.DType):
    """An output full of NaN (floats) or SENTINEL (int32)."""
    if c.integral:
        return torch.full(shape, SENTINEL, device="cuda", dtype=torch.int32)
    return torch.full(shape, float("nan"), device="cuda", dtype=torch_dtype(c))


def layout_operands(torch, size: int, layout: str, a: dt.DType, c: dt.DType):
    """The size x layout sweep's (x, y, acc, out): x (m x k) and y (k x n) of type ``a`` stored per
    ``layout``, acc of type ``c`` and a poisoned out, m = size, n = size + 3, k = size + 5 (1 x 1 x 1 at 1)."""
    gen = torch.Generator(device="cuda").manual_seed(size * 7 + LAYOUTS.index(layout))
    m, n, k = size, size + (3 if size > 1 else 0), size + (5 if size > 1 else 0)
    x = operand(torch, (m, k), a, gen, layout[0])
    y = operand(torch, (k, n), a, gen, layout[1])
    return x, y, operand(torch, (m, n), c, gen), poisoned(torch, (m, n), c)


def batched_mma(torch, a: dt.DType, c: dt.DType, broadcast: str, layout: str):
    """bx.mma of 5 products of 300 x 200 x 264 stored per ``layout``, x or y broadcast (batch 1) or
    neither ("none"), asserted to take the engine; (x, y, acc, out)."""
    gen = torch.Generator(device="cuda").manual_seed(3)
    batch, m, n, k = 5, 300, 200, 264
    x = operand(torch, (1 if broadcast == "x" else batch, m, k), a, gen, layout[0])
    y = operand(torch, (1 if broadcast == "y" else batch, k, n), a, gen, layout[1])
    acc = operand(torch, (batch, m, n), c, gen)
    out = poisoned(torch, (batch, m, n), c)
    bx.mma(x, y, acc, out=out)
    assert call_plan(x, y, acc, out=out).kind == "hopper"
    return x, y, acc, out


def split_k_mma(torch, shape: tuple[int, int, int], a: dt.DType, c: dt.DType, expected: int):
    """bx.mma of one m x n x k ``shape`` (row-major operands), asserted to take the engine with
    ``expected`` K splits on a GPU of 132 SMs (elsewhere: split or not alike); (x, y, acc, out, plan)."""
    m, n, k = shape
    gen = torch.Generator(device="cuda").manual_seed(m + n)
    x, y = operand(torch, (m, k), a, gen), operand(torch, (k, n), a, gen)
    acc = operand(torch, (m, n), c, gen)
    out = poisoned(torch, (m, n), c)
    bx.mma(x, y, acc, out=out)
    plan = call_plan(x, y, acc, out=out)
    assert plan.kind == "hopper", plan.describe()
    if torch.cuda.get_device_properties(0).multi_processor_count == 132:
        assert plan.kernel.splits == expected, plan.describe()
    else:
        assert (plan.kernel.splits > 1) == (expected > 1), plan.describe()
    return x, y, acc, out, plan


def repacked_mma(torch, x, y, a: dt.DType, c: dt.DType, gen):
    """bx.mma of x @ y (type ``a``) plus a random acc of type ``c`` into a poisoned out, asserted to
    take the engine with repacked operands; (acc, out)."""
    shape = (*x.shape[:-1], y.shape[-1])
    acc = operand(torch, shape, c, gen)
    out = poisoned(torch, shape, c)
    bx.mma(as_input(x, a), as_input(y, a), acc, out=out)
    plan = call_plan(as_input(x, a), as_input(y, a), acc, out=out)
    assert plan.kind == "hopper" and "repacked" in plan.describe(), plan.describe()
    return acc, out


def stream_k_config(name: str, a: dt.DType, **changes) -> hopper.EngineConfig:
    """Configuration ``name`` of hopper.CONFIGS in stream-K for inputs of type ``a``."""
    return hopper.replace(hopper.CONFIGS[name], bk=128 // a.size, promotion=hopper.promotion_of(a), stream_k=True,
                          **changes)


def engine_call(torch, x, y, acc, out, c: dt.DType, a: dt.DType | None = None, alpha=1.0, beta=1.0, config=None,
                splits=None, fast: bool = False, scheme: str | None = None, stream=None):
    """out = alpha * x @ y + beta * acc through the engine itself (whatever path bx.mma would pick
    for these operands), on ``stream`` (a torch stream; None: the current one); the engine plan.
    ``a`` relabels x and y (tf32 on float32 storage)."""
    engine = engine_plan(x, y, out, c, a, config, splits, fast, scheme)
    run_again(engine, x, y, acc, out, alpha, beta, a, stream)
    return engine


def engine_plan(x, y, out, c: dt.DType, a: dt.DType | None = None, config=None, splits=None, fast: bool = False,
                scheme: str | None = None):
    """The engine's plan for out = x @ y (see :func:`engine_call`), asserted to exist; run it with :func:`run_again`."""
    vx, vy = arrays.as_array(x, "x"), arrays.as_array(y, "y")
    if a is not None:
        vx, vy = vx._replace(dtype=a), vy._replace(dtype=a)
    mx, my = array_gemm._matrix(vx, "x"), array_gemm._matrix(vy, "y")
    batch = out.shape[0] if out.dim() == 3 else 1
    device = array_gemm._device_info(out.device.index)
    vout = arrays.as_array(out, "out")
    extra = {"fast_accumulation": True} if fast else {}
    if scheme is not None:
        extra["scheme"] = scheme
    engine, reason = array_gemm._engine_plan(vx, vy, mx, my, c, mx.rows, my.cols, mx.cols, batch, device, vout,
                                             config, splits, **extra)
    assert engine is not None, reason
    return engine


def run_again(engine, x, y, acc, out, alpha, beta, a: dt.DType | None = None, stream=None) -> None:
    """Run an engine plan made for these operands' shapes and layouts once more (new alpha, beta)."""
    handle = arrays.resolve_stream(stream, (out,))
    views = [None if t is None else arrays.as_array(t, name) for t, name in ((x, "x"), (y, "y"), (acc, "acc"),
                                                                            (out, "out"))]
    if a is not None:
        views[0], views[1] = views[0]._replace(dtype=a), views[1]._replace(dtype=a)
    engine.run(out.device.index, arrays.as_core_stream(stream, handle), handle, *views, alpha, beta)


def reference(torch, x, y, acc=None, alpha=1.0, beta=1.0):
    """(alpha x @ y + beta acc, |alpha| |x| @ |y| + |beta| |acc|) in float64 on the GPU (beta 0 ignores acc)."""
    x64, y64 = x.to(torch.float64), y.to(torch.float64)
    ref = alpha * torch.matmul(x64, y64)
    scale = abs(alpha) * torch.matmul(x64.abs(), y64.abs())
    if acc is not None and beta != 0:
        ref = ref + beta * acc.to(torch.float64)
        scale = scale + abs(beta) * acc.to(torch.float64).abs()
    return ref, scale


def check(torch, got, ref, scale, tol: float, what: str = "", rounding: float = 0.0) -> float:
    """Every element of ``got`` within ``tol`` times its ``scale`` of ``ref``, plus ``rounding`` (the
    result type's, reference.rounding) times the element itself (equal where tol is 0); the worst
    error / bound (for measurements)."""
    out = got.to(torch.float64)
    ref = ref.expand(out.shape) if ref.shape != out.shape else ref
    scale = scale.expand(out.shape) if scale.shape != out.shape else scale
    assert not torch.isnan(out).any(), f"{what}: NaN in the result at {_first(torch, torch.isnan(out))} " \
                                       "(an element was never written)"
    err = (out - ref).abs()
    if tol == 0:
        bad = err != 0
        assert not bad.any(), f"{what}: {int(bad.sum())} of {out.numel()} elements differ, first at " \
                              f"{_first(torch, bad)} (max |diff| {err.max().item()})"
        MARGINS.append((what, 0.0))
        return 0.0
    bound = tol * scale
    bound = bound + rounding * (ref.abs() + bound)
    bad = ~(err <= bound)
    if bad.any():
        ratio = torch.where(bad, err / bound.clamp_min(1e-300), torch.zeros_like(err))
        worst = _first(torch, ratio == ratio.max())
        raise AssertionError(f"{what}: {int(bad.sum())} of {out.numel()} elements beyond {tol:.1e} x their scale, "
                             f"worst {ratio.max().item():.3g} x the bound at {worst}: got {out[worst].item()}, "
                             f"expected {ref[worst].item()}")
    worst = (err / bound.clamp_min(1e-300)).max().item() if err.numel() else 0.0
    MARGINS.append((what, worst))
    return worst


def check_product(torch, got, x, y, tol: float, acc=None, alpha=1.0, beta=1.0, what: str = "",
                  rounding: float = 0.0) -> float:
    """:func:`check` of ``got`` against alpha * x @ y + beta * acc."""
    ref, scale = reference(torch, x, y, acc, alpha, beta)
    return check(torch, got, ref, scale, tol, what, rounding)


def check_norm(torch, got, x, y, a: dt.DType, c: dt.DType, acc=None, alpha=1.0, beta=1.0, what: str = "") -> None:
    """``got`` against alpha * x @ y + beta * acc in float64: equal for int32 results, else no NaN and a
    relative error (Frobenius norm) within the engine's allowance for ``a`` -> ``c`` (f32 accumulation,
    promoted fp8)."""
    ref = alpha * torch.matmul(x.to(torch.float64), y.to(torch.float64))
    if acc is not None:
        ref = ref + beta * acc.to(torch.float64)
    out = got.to(torch.float64)
    if c == dt.int32:
        bad = int((out != ref).sum().item())
        assert bad == 0, f"{what}: {bad} elements differ from the exact product"
        return
    err = norm_error(torch, out, ref, what)
    tol = tolerance(a, c, max(x.shape[-1], 1), dt.float32, "wgmma", hopper.promotion_of(a) or None)
    assert err <= tol, f"{what}: relative error {err:.3e} > {tol:.1e}"


def norm_error(torch, got, ref, what: str = "") -> float:
    """|got - ref| / |ref| in the Frobenius norm (|ref| 0 counts as 1), after checking ``got`` has no NaN."""
    out = got.to(torch.float64)
    assert not torch.isnan(out).any(), f"{what}: NaN in the result (an element was never written)"
    scale = torch.linalg.norm(ref).item()
    return torch.linalg.norm(out - ref).item() / (scale if scale > 0 else 1.0)


def _first(torch, mask) -> tuple[int, ...]:
    return tuple(int(i) for i in torch.nonzero(mask)[0].tolist())


#: A user kernel around bx.DeviceGemm: D = s * (A @ B) through its epilogue hook; VALUE is the
#: epilogue's value type (float, or int for 8-bit integers).
_SCALED_KERNEL = r"""
struct Scale {
    VALUE s;
    __device__ void value(const blasdx::hopper::Work&, int, int, VALUE& v0, VALUE& v1) const { v0 *= s; v1 *= s; }
};
extern "C" __global__ void __launch_bounds__(LINEAR::threads, 1)
scaled(const __grid_constant__ blasdx::hopper::TensorMap map_a, const __grid_constant__ blasdx::hopper::TensorMap map_b,
       const __grid_constant__ blasdx::hopper::TensorMap map_d, VALUE s, int m, int n, int k, int batch) {
    extern __shared__ __align__(16) unsigned char smem[];
    using G = LINEAR::gemm;
    const G::Sched sched(m, n, k, batch, 1);
    G::run(smem, &map_a, &map_b, sched, batch > 1, batch > 1,
           blasdx::hopper::StageThroughShared<LINEAR::c_type, Scale>{&map_d, Scale{s}});
}
"""


def scaled_kernel(dg, integral: bool = False):
    """The compiled ``scaled`` kernel (map_a, map_b, map_d, s, m, n, k, batch) around DeviceGemm ``dg``:
    D = s * (A @ B), s an int for 8-bit integers, else a float."""
    return bx.compile_kernel(_SCALED_KERNEL.replace("VALUE", "int" if integral else "float"), "scaled", {"LINEAR": dg})
