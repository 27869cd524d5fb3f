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

from ..base import dtypes as _dt

__all__ = [
    "FP8_WGMMA_FRACTION_BITS",
    "FP8_WGMMA_GROUP",
    "MARGINS",
    "assert_close",
    "assert_gemm_close",
    "fp8_wgmma_allowance",
    "fp8_wgmma_sum",
    "gemm_scale",
    "ozaki_bound",
    "random_operand",
    "reference_gemm",
    "relative_error",
    "rounding",
    "to_float64",
    "tolerance",
]

_U = {"float16": 2.0**-11, "float32": 2.0**-24, "float64": 2.0**-53, "tfloat32": 2.0**-10}


def tolerance(
    a: _dt.DType, c: _dt.DType, k: int, accumulator: _dt.DType | None = None, instruction: str | None = None,
    promotion: int | None = None, scheme: str = "native", rounding_apart: bool = False,
) -> float:
    """Largest allowed error of each element of C, relative to that element's scale.

    The scale of C[i, j] is what its rounding errors are made of (:func:`gemm_scale`):
    ``|alpha| (|A| |B|)[i, j] + |beta| |C[i, j]|``, so a result near zero is not held to a bound
    relative to itself and one wrong element fails however many right ones surround it
    (:func:`assert_close`). The allowances:

    - integers: 0 (int32 accumulation of int8 products is exact for any K this fits);
    - float64: 1e-12; float32 on FFMA: 1e-5 (about sqrt(K) roundings of 2^-24);
    - tf32: 5e-3 (the tensor core reads operands to 10 mantissa bits, truncating: 2^-10 each);
    - f16/bf16 with f32 accumulation into f32: 1e-5 (products are exact in f32), and for deep
      K 4 * 2^-24 * sqrt(K): the tensor cores' f32 sums do not round to nearest, so their
      error grows with K (wgmma, H100: 1.6e-5 at K = 14336, 1.9e-5 at K = 16384);
    - fp8: 1e-4, since fp8 tensor cores may keep fewer accumulator bits than full f32;
      with ``instruction`` a ``wgmma`` one (sm_90a), the sum stays in the tensor core's narrow
      accumulator: :func:`fp8_wgmma_allowance` (the model, its sources and the proof), at least
      1e-4. With ``promotion`` = P > 0 (the Hopper engine) the tensor core's sum starts afresh
      every P K elements and is added into f32 registers, so its error is that of a P-deep product
      whatever K is;
    - float32 as three tf32 products (``scheme`` "3xtf32", blasdx.engine.emulation): float32's bound
      (each stage's tensor-core sum is added into the accumulator with rounded f32 adds) plus
      8 * 2^-22 for the parts (what hi and tf32(lo) miss of x is at most 2^-21 ``|x|`` per operand,
      and the dropped a_lo b_lo term is at most 2^-22);
    - a float16 C: 2e-3 more for the final rounding (2^-11 relative); a bfloat16 C (the Hopper
      engine's device API, scaled_mm): 4 * 2^-9 more (2^-9 relative). With ``rounding_apart``
      these are left out: the caller bounds the final rounding by :func:`rounding` times each
      element itself (``assert_close(..., rounding=)``), which is what it is relative to;
    - f16 accumulation (f16 x f16 -> f16): 2 * 2^-11 * sqrt(K) + 2e-3, since every partial
      sum is rounded to f16 (each rounding at most 2^-11 of a partial sum, itself at most the
      element's scale; measured on an H200 at K <= 64: at most 1.4 * 2^-11 of the scale);
    - complex64 / complex128 (``a`` complex): their parts' bound at depth 2K, since each part of
      the result is one real dot product of length 2K (blasdx.calls.complex_matmul).
    """
    if a.is_complex:
        part = _dt.as_dtype(a.real_name)
        return tolerance(part, part, 2 * k, accumulator, instruction, promotion, scheme, rounding_apart)
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
            base = max(base, fp8_wgmma_allowance(k, promotion))
    else:
        base = max(1e-5, 4 * 2.0**-24 * math.sqrt(k))
    if c == _dt.bfloat16 and not rounding_apart:
        base += 4 * 2.0**-9
    if c == _dt.float16:
        if not rounding_apart:
            base += 2e-3
        if accumulator == _dt.float16:
            base += 2 * _U["float16"] * math.sqrt(k)
    return base


#: Hopper's fp8 wgmma sum as measured (:func:`fp8_wgmma_allowance`): products summed in groups of
#: this many K elements, each group's terms cut to this many bits below its largest one.
FP8_WGMMA_GROUP = 16
FP8_WGMMA_FRACTION_BITS = 13


def fp8_wgmma_allowance(k: int, promotion: int | None = None) -> float:
    """Largest error of an fp8 ``wgmma`` product relative to ``sum_k |a_k b_k|`` (+ the epilogue's).

    The model (what Hopper's fp8 tensor cores do, :func:`fp8_wgmma_sum` simulates it): products of
    fp8 values are exact (at most 8 significant bits); the tensor core adds them a group of n K
    elements at a time into its accumulator in fixed point: the group's products and the running
    sum are aligned to the exponent E of the largest of them and every one is cut to F bits below
    2^E, truncating toward zero, before an exact sum; the accumulator holds the result (at most 20
    significant bits, exact in f32). Sources: DeepSeek-V3's technical report (alignment of the
    products to the largest exponent, only the top 14 bits kept, the rest truncated, the
    accumulator itself kept to that precision) and the DeepGEMM issues on it; SageAttention's
    measurement of mma f32.e4m3 on Ada / Hopper (an e8m13 accumulator: a C with more than 13
    fraction bits comes back with the lower 10 zeroed); an H100 wgmma probe of the same (13
    fraction bits, round toward zero); Khattak and Mikaitis' bit-accurate models of the V100 ...
    B200 tensor cores (alignment to the largest exponent, truncation, no final rounding to nearest).
    n = 16, F = 13 and truncation toward zero reproduce this project's H100 measurements of
    e4m3 -> f32 (docs/performance.md: normwise 4.6e-5, 7.5e-5, 1.26e-4 promoted every 32, 64, 128;
    2.1e-4, 5.4e-4, 1.3e-3 unpromoted at K = 256, 1024, 4096) within 8%; n = 32 misses the first
    by 23%, truncation toward -inf (a sign-filled shift) gives 2-30x the measured errors.

    The bound: in a group, a term t is cut only below u = 2^(E - F), so it loses less than u,
    and ``u <= 2^-F max|t|``. A group has at most n + 1 terms; the first group of a sum starts from a
    zero accumulator and its largest product is exact (8 bits <= F + 1), so at most n - 1 of its
    terms are cut. Truncation toward zero never raises a magnitude, so the accumulator, and with it
    every group's largest term, stays within S_j, the sum of ``|a_k b_k|`` over the K elements this
    tensor-core sum covers. A sum of G = ceil(depth / n) groups (depth = K, or the promotion
    interval P, each P-deep sum starting afresh and S the sum of the S_j) thus errs by less than
    ``(G (n + 1) - 2) 2^-F S``; the f32 additions of the promoted sums and alpha, beta's epilogue
    round ceil(K / P) + 2 times more, each by at most 2^-24 of a value within 2 S. The bound is
    attained to within a few percent by one large product followed by products just below u
    (tests/test_reference.py builds that case): no smaller allowance holds for every input.
    Random operands (``random_operand``) stay far inside it: at K = 64 the worst of 3.6M modelled
    elements is 2.45e-4 of ``|A| |B|`` against 8.06e-3 (the earlier allowance, 2 * 2^-14 per 32-deep
    step, was that worst element's size, not a bound), while a sign-flipped element is off by
    ``2 |C|`` (median 0.27 of ``|A| |B|``, 33x the allowance; 1.6% of elements are within it).
    """
    depth = min(k, promotion) if promotion else k
    groups = max(1, math.ceil(depth / FP8_WGMMA_GROUP))
    cut = (groups * (FP8_WGMMA_GROUP + 1) - 2) * 2.0**-FP8_WGMMA_FRACTION_BITS
    return cut + (math.ceil(k / depth) + 2) * 2.0**-23


def fp8_wgmma_sum(a: np.ndarray, b: np.ndarray, promotion: int | None = None, group: int = FP8_WGMMA_GROUP,
                  fraction_bits: int = FP8_WGMMA_FRACTION_BITS, toward: str = "zero") -> np.ndarray:
    """``a @ b`` as Hopper's fp8 wgmma sums it (:func:`fp8_wgmma_allowance`'s model), in float64.

    ``a`` (..., M, K) and ``b`` (..., K, N) hold fp8 values. Each group of ``group`` K elements and
    the accumulator are aligned to their largest exponent E and cut to multiples of 2^(E -
    ``fraction_bits``) (``toward`` "zero", or "floor" for a two's-complement shift), then added
    exactly; with ``promotion`` = P the accumulator starts afresh every P K elements and its sums
    are added in f32, rounding to nearest, as the Hopper engine's promotion does.
    """
    wa, wb = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    cut = {"zero": np.trunc, "floor": np.floor}[toward]
    shape = np.broadcast_shapes(wa.shape[:-2], wb.shape[:-2]) + (wa.shape[-2], wb.shape[-1])
    total, acc = np.zeros(shape, dtype=np.float32), np.zeros(shape)
    for k0 in range(0, wa.shape[-1], group):
        if promotion and k0 and k0 % promotion == 0:
            total, acc = total + acc.astype(np.float32), np.zeros(shape)
        terms = wa[..., :, k0:k0 + group, None] * wb[..., None, k0:k0 + group, :]  # (..., M, group, N), exact
        largest = np.maximum(np.abs(acc), np.abs(terms).max(axis=-2))
        unit = np.where(largest > 0, np.ldexp(1.0, np.frexp(largest)[1] - 1 - fraction_bits), 1.0)
        acc = cut(acc / unit) * unit + (cut(terms / unit[..., None, :]) * unit[..., None, :]).sum(axis=-2)
    return (total + acc.astype(np.float32)).astype(np.float64)


_ROUNDING = {"float16": 2.0**-11, "bfloat16": 2.0**-8, "float32": 2.0**-24, "float64": 2.0**-53}


def rounding(c: _dt.DType, is_complex: bool = False) -> float:
    """Largest relative error of storing a result in ``c`` (its unit roundoff; 0 for integers, which
    are exact): the part of an element's error relative to the element itself. A complex value's
    two parts round apart, sqrt(2) times that of its modulus."""
    u = _ROUNDING.get(c.name, 0.0)
    return u * math.sqrt(2) if is_complex else u


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
    from ..engine.ozaki import NORM_MARGIN

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


def gemm_scale(a: np.ndarray, b: np.ndarray, c: np.ndarray | None = None, alpha: Any = 1,
               beta: Any = 0) -> np.ndarray:
    """``|alpha| |a| @ |b| + |beta| |c|`` in float64, shaped as :func:`reference_gemm`'s result.

    Element (i, j) is the sum of the magnitudes of the terms C[i, j] is made of, which is what
    every rounding error of the product is relative to (cancellation makes C itself smaller).
    """
    out = abs(alpha) * np.matmul(np.abs(to_float64(a)).astype(np.float64), np.abs(to_float64(b)).astype(np.float64))
    if beta != 0 and c is not None:
        out = out + abs(beta) * np.abs(to_float64(c)).astype(np.float64)
    return out


#: (what, worst error / bound) of every assert_close that passed, in order: how close each check
#: came to its bound (tests may write it out, e.g. to measure margins on a new GPU).
MARGINS: list[tuple[str, float]] = []


def assert_gemm_close(got: np.ndarray, a: np.ndarray, b: np.ndarray, c: np.ndarray | None, alpha: Any, beta: Any,
                      tol: float, what: str = "C", rounding: float = 0.0) -> None:
    """:func:`assert_close` of ``got`` against ``alpha * a @ b + beta * c`` (:func:`reference_gemm`), every
    element within ``tol`` of its own :func:`gemm_scale`: the check of one GEMM's result."""
    assert_close(got, reference_gemm(a, b, c, alpha, beta), tol, what, scale=gemm_scale(a, b, c, alpha, beta),
                 rounding=rounding)


def assert_close(got: np.ndarray, ref: np.ndarray, tol: float, what: str = "C",
                 scale: np.ndarray | None = None, rounding: float = 0.0) -> None:
    """Raise AssertionError naming ``what`` unless every element of ``got`` is within ``tol`` of ``ref``.

    Element-wise: ``|got - ref| <= tol * scale + rounding * (|ref| + tol * scale)`` for each
    element, where ``scale`` is the element's own (:func:`gemm_scale`: ``|A| |B| + |C|``, broadcast
    against ``ref``), or without one, the largest ``|ref|`` (a bound for the whole array, still
    checked on every element), and ``rounding`` that of the result's type (:func:`rounding`).
    ``tol`` 0 asks for equality. Where ``ref`` is NaN or infinite ``got`` must be the same;
    elsewhere a NaN or infinity in ``got`` fails. The message counts the elements beyond the
    bound and shows the worst.
    """
    wide = to_float64(got)
    ref = np.asarray(ref)
    if wide.shape != ref.shape:
        raise AssertionError(f"{what}: shape {wide.shape} differs from the reference's {ref.shape}")
    if tol == 0.0:
        if not np.array_equal(wide, ref):
            bad = np.argwhere(wide != ref)
            first = tuple(int(i) for i in bad[0])
            raise AssertionError(f"{what}: {len(bad)} elements differ, first at {first}: {wide[first]} != {ref[first]}")
        MARGINS.append((what, 0.0))
        return
    finite = np.isfinite(ref)
    special = ~finite & ~((np.isnan(wide) & np.isnan(ref)) | (wide == ref))
    if special.any():
        first = tuple(int(i) for i in np.argwhere(special)[0])
        raise AssertionError(f"{what}: {int(special.sum())} non-finite reference elements not matched, first at "
                             f"{first}: {wide[first]} != {ref[first]}")
    if scale is None:
        largest = float(np.abs(ref[finite]).max()) if finite.any() else 0.0
        bound = np.full(ref.shape, tol * (largest if largest > 0 else 1.0))
    else:
        bound = tol * np.broadcast_to(np.asarray(scale, dtype=np.float64), ref.shape)
        bound = np.where(bound > 0, bound, tol * np.finfo(np.float64).tiny)  # a zero scale: exact zero expected
    if rounding:
        with np.errstate(invalid="ignore"):
            bound = bound + rounding * (np.where(finite, np.abs(ref), 0.0) + bound)
    with np.errstate(invalid="ignore", over="ignore"):
        err = np.abs(wide - ref)
        over = finite & ~(err <= bound)  # NaN in got counts as over
    if over.any():
        ratio = np.where(over, err / bound, 0.0)
        ratio = np.where(np.isnan(ratio), np.inf, ratio)
        worst = tuple(int(i) for i in np.unravel_index(int(np.argmax(ratio)), ref.shape))
        raise AssertionError(
            f"{what}: {int(over.sum())} of {ref.size} elements beyond the bound (relative error up to "
            f"{float(ratio[worst]) * tol:.3e} > {tol:.1e}), worst at {worst}: got {wide[worst]}, expected "
            f"{ref[worst]} (bound {float(bound[worst]):.3e})"
        )
    if finite.any():
        with np.errstate(invalid="ignore", divide="ignore"):
            MARGINS.append((what, float(np.max(err[finite] / bound[finite]))))
