"""Host reference GEMM, random operands and the tolerances every correctness check uses.

The reference multiplies the exact values the kernel saw (inputs already rounded to their
storage type) in float64 / complex128, or exactly in int64 for integers, so the only error
left to tolerate is the kernel's own: accumulation order, tf32 truncation and the final
rounding of C. ``tolerance`` is the one place those allowances are written down.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from . import dtypes as _dt

__all__ = ["reference_gemm", "random_operand", "to_float64", "tolerance", "ozaki_bound", "relative_error",
           "assert_close"]

_U = {"float16": 2.0**-11, "float32": 2.0**-24, "float64": 2.0**-53, "tfloat32": 2.0**-10}


def tolerance(
    a: _dt.DType, c: _dt.DType, k: int, accumulator: _dt.DType | None = None, instruction: str | None = None,
    promotion: int | None = None, scheme: str = "native",
) -> float:
    """Largest allowed normwise relative error ``||C - ref||_F / ||ref||_F``.

    - integers: 0 (int32 accumulation of int8 products is exact for any K this fits);
    - float64: 1e-12; float32 on FFMA: 1e-5 (about sqrt(K) roundings of 2^-24);
    - tf32: 5e-3 (the tensor core reads operands to 10 mantissa bits, truncating: 2^-10 each);
    - f16/bf16 with f32 accumulation into f32: 1e-5 (products are exact in f32), and for deep
      K 4 * 2^-24 * sqrt(K): the tensor cores' f32 sums do not round to nearest, so their
      error grows with K (wgmma, H100: 1.6e-5 at K = 14336, 1.9e-5 at K = 16384);
    - fp8: 1e-4, since fp8 tensor cores may keep fewer accumulator bits than full f32;
      with ``instruction`` a ``wgmma`` one (sm_90a), the sum stays in the tensor core's fp8
      accumulator, which keeps about 14 significant bits per addition (measured on H100:
      1.03e-4 at K = 128): 2 * 2^-14 per 32-deep K step, at least 1e-4. The Hopper engine's fp8
      (``instruction`` "wgmma") with ``promotion`` = P > 0 adds the tensor core's sum into f32
      registers every P K elements, the sum starting afresh each time, so the tensor core's
      error is that of a P-deep product whatever K is: the allowance above for K = P
      (4.9e-4 at P = 128, the default), at least 1e-4; the f32 additions of the intervals add
      only about 2^-24 * sqrt(K / P);
    - float32 as three tf32 products (``scheme`` "3xtf32", blasdx.engine.emulation): float32's bound
      (each stage's tensor-core sum is added into the accumulator with rounded f32 adds) plus
      8 * 2^-22 for the parts (what hi and tf32(lo) miss of x is at most 2^-21 ``|x|`` per operand,
      and the dropped a_lo b_lo term is at most 2^-22);
    - a float16 C: 2e-3 more for the final rounding (2^-11 relative); a bfloat16 C (the Hopper
      engine's device API, scaled_mm): 4 * 2^-9 more (2^-9 relative);
    - f16 accumulation (f16 x f16 -> f16): 8 * 2^-11 * sqrt(K) + 2e-3, since every partial
      sum is rounded to f16.
    """
    if a.integral:
        return 0.0
    if a == _dt.float64:
        return 1e-12
    if a == _dt.tfloat32:
        base = 5e-3
    elif scheme == "3xtf32":
        base = max(1e-5, 4 * 2.0**-24 * math.sqrt(k)) + 8 * 2.0**-22
    elif a in (_dt.float8_e4m3, _dt.float8_e5m2):
        base = 1e-4
        if instruction is not None and instruction.startswith("wgmma"):
            depth = min(k, promotion) if promotion else k
            base = max(base, 2 * math.ceil(depth / 32) * 2.0**-14)
    else:
        base = max(1e-5, 4 * 2.0**-24 * math.sqrt(k))
    if c == _dt.bfloat16:
        base += 4 * 2.0**-9
    if c == _dt.float16:
        base += 2e-3
        if accumulator == _dt.float16:
            base += 8 * _U["float16"] * math.sqrt(k)
    return base


def _norms(a: np.ndarray, axis: int) -> np.ndarray:
    """2-norms along ``axis`` without overflow or underflow (each line scaled by its largest first)."""
    largest = np.abs(a).max(axis=axis, keepdims=True)
    scale = np.where(largest > 0, largest, 1.0)
    return (np.sqrt(((a / scale) ** 2).sum(axis=axis, keepdims=True)) * scale).squeeze(axis)


def ozaki_bound(x: np.ndarray, y: np.ndarray, norm: float) -> np.ndarray:
    """Elementwise bound on ``|x @ y (as int8 residue products, blasdx.engine.ozaki) - x @ y (exact)|``.

    Row i of x is scaled by the largest 2^s_i that keeps its 2-norm within T = ``norm`` (the
    kernels aim a hair lower, ozaki.NORM_MARGIN) and rounded to integers, so each element moves by
    at most d_i = 2^(-s_i - 1) < ||x_i|| / (T NORM_MARGIN); column j of y by g_j likewise. The
    rounded operands' product is recovered exactly, so the error is that of the rounding,
    ``d_i sum_k |y_kj| + g_j sum_k |x_ik| + K d_i g_j``, plus the float64 roundings of putting the
    product back together: 4 * 2^-53 of the result and 2^-80 ||x_i|| ||y_j|| for the sum of
    fractions (whose error is about 2^-85 of M, with M < 8 T^2 and 2^-s_i < 2 ||x_i|| / T).
    """
    from .engine.ozaki import NORM_MARGIN

    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    k = x.shape[1]
    rows, cols = _norms(x, 1), _norms(y, 0)
    target = norm * NORM_MARGIN * (1 - 2.0**-40)  # numpy's norms are not the kernels' to the last bit
    d, g = rows / target, cols / target
    rounding = d[:, None] * np.abs(y).sum(axis=0)[None, :] + g[None, :] * np.abs(x).sum(axis=1)[:, None]
    rounding += k * d[:, None] * g[None, :]
    fraction = 2.0**-80 * rows[:, None] * cols[None, :]
    return rounding + fraction + 4 * 2.0**-53 * np.abs(x @ y)


def to_float64(x: np.ndarray) -> np.ndarray:
    """Exact widening of a host array of any blasdx type (complex -> complex128, ints -> int64)."""
    x = np.asarray(x)
    if x.dtype.kind in "iu":
        return x.astype(np.int64)
    if x.dtype.kind == "c" or "complex" in x.dtype.name:
        return x.astype(np.complex128)
    return x.astype(np.float64)


def reference_gemm(a: np.ndarray, b: np.ndarray, c: np.ndarray | None = None, alpha: Any = 1, beta: Any = 0) -> np.ndarray:
    """``alpha * a @ b + beta * c`` in float64 / complex128 (exact int64 for integers).

    Shapes as in ``execute``: (M, K) @ (K, N) or batched with a leading batch dimension
    (a batch of 1 broadcasts). ``beta == 0`` ignores ``c`` entirely, NaN included.
    """
    wa, wb = to_float64(a), to_float64(b)
    out = alpha * np.matmul(wa, wb)
    if beta != 0 and c is not None:
        out = out + beta * to_float64(c)
    return out


def random_operand(
    dtype: _dt.DType, shape: tuple[int, ...], rng: np.random.Generator, *, is_complex: bool = False
) -> np.ndarray:
    """Fresh random host values of ``dtype`` (never zeros): normal for floats, full-range-ish ints.

    fp8 values are drawn small enough that e5m2's coarse grid still varies; integers stay
    within +-100 (uint8 0..200) so that int32 sums never overflow for K up to 100 000.
    """
    if dtype.integral:
        lo, hi = (0, 200) if dtype == _dt.uint8 else (-100, 100)
        return rng.integers(lo, hi, size=shape).astype(dtype.host_dtype)
    if is_complex:
        complex_type = _dt.complex_of(dtype)
        real = rng.standard_normal(shape).astype(dtype.host_dtype).astype(np.float64)
        imag = rng.standard_normal(shape).astype(dtype.host_dtype).astype(np.float64)
        return (real + 1j * imag).astype(complex_type.host_dtype)
    values = rng.standard_normal(shape)
    if dtype in (_dt.float8_e4m3, _dt.float8_e5m2):
        values = values * 2.0
    return values.astype(dtype.host_dtype)


def relative_error(got: np.ndarray, ref: np.ndarray, scale: np.ndarray | None = None) -> float:
    """Normwise relative error, against the norm of ``scale`` where given (else of ``ref``);
    infinite when ``got`` holds NaN or Inf."""
    got = to_float64(got)
    if not np.all(np.isfinite(got)):
        return math.inf
    norm = float(np.linalg.norm(np.ravel(ref if scale is None else scale)))
    return float(np.linalg.norm(np.ravel(got - ref))) / (norm if norm > 0 else 1.0)


def assert_close(got: np.ndarray, ref: np.ndarray, tol: float, what: str = "C",
                 scale: np.ndarray | None = None) -> None:
    """Raise AssertionError naming ``what`` when ``got`` is not within ``tol`` of ``ref``.

    ``scale`` (e.g. the product of ``|A|``, ``|B|`` and ``|C|``): what rounding errors are relative to where
    few terms may cancel, so that a result near zero (one element, acc + x y ~ 0) is not held
    to a bound relative to itself."""
    if tol == 0.0:
        wide = to_float64(got)
        if not np.array_equal(wide, ref):
            bad = np.argwhere(wide != ref)
            first = tuple(int(i) for i in bad[0])
            raise AssertionError(f"{what}: {len(bad)} elements differ, first at {first}: {wide[first]} != {ref[first]}")
        return
    err = relative_error(got, ref, scale)
    if not err <= tol:
        raise AssertionError(f"{what}: relative error {err:.3e} exceeds {tol:.1e}")
