"""Host reference for triangular solves: test systems, an extended-precision solution, error bounds.

A triangular solve is backward stable: the computed X solves (T + dT) X = alpha B with
``|dT| <= c n u |T|``. So the checks are (1) the normwise backward error (residual) within
``RESIDUAL_FACTOR * n * u`` whatever the conditioning, and (2) the forward error within
``FORWARD_FACTOR * n * u * cond(T)`` against a solution computed by substitution in
``np.longdouble`` (64-bit mantissa on x86: its own error is 2^-11 of a float64 solve's), from
the exact values the kernel saw (inputs rounded to their storage type first).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ..base import dtypes as _dt
from .gemm import random_operand

__all__ = [
    "FORWARD_FACTOR",
    "RESIDUAL_FACTOR",
    "TriangularSystem",
    "backward_error",
    "condition_number",
    "forward_bound",
    "random_triangular",
    "residual_bound",
    "solve_reference",
    "unit_roundoff",
]

#: c of the bounds c * n * u (residual) and c * n * u * cond (forward error): Higham's gamma_n
#: for substitution is n u / (1 - n u); twice that covers the reciprocal of the diagonal
#: (one more rounding) and complex arithmetic (a few roundings per multiply-add).
RESIDUAL_FACTOR = 2.0
FORWARD_FACTOR = 2.0

_U = {"float32": 2.0**-24, "float64": 2.0**-53}


def unit_roundoff(real: _dt.DType) -> float:
    """u of a TRSM element type (of its parts, for complex)."""
    return _U[real.name]


class TriangularSystem(NamedTuple):
    """``stored``: what the kernel gets (storage dtype; the other triangle NaN, and the diagonal NaN when
    unit, since neither may be read); ``exact``: the triangular matrix solved with, in float64/complex128."""

    stored: np.ndarray
    exact: np.ndarray


def _mask(dim: int, lower: bool, unit: bool) -> np.ndarray:
    """The elements a solve may read."""
    mask = np.tril(np.ones((dim, dim), bool)) if lower else np.triu(np.ones((dim, dim), bool))
    if unit:
        mask[np.arange(dim), np.arange(dim)] = False
    return mask


def random_triangular(
    rng: np.random.Generator, batch: int, dim: int, real: _dt.DType, *, is_complex: bool, lower: bool, unit: bool,
    growth: float | None = None,
) -> TriangularSystem:
    """Random triangular matrices: diagonally dominant (condition number a few units) by default.

    With ``growth`` the diagonal has magnitude 1 and the other entries of the triangle are
    N(0, growth^2): substitution amplifies errors by about (1 + growth) per unknown, so the
    condition number grows exponentially with ``dim`` (ill-conditioned on purpose).
    """
    shape = (batch, dim, dim)
    values = random_operand(real, shape, rng, is_complex=is_complex)
    wide = values.astype(np.complex128 if is_complex else np.float64)
    idx = np.arange(dim)
    if growth is None:
        wide = wide / dim
        magnitude = 1.0 + np.abs(wide[:, idx, idx]) * dim
    else:
        wide = wide * growth
        magnitude = np.ones((batch, dim))
    phase = wide[:, idx, idx] / np.maximum(np.abs(wide[:, idx, idx]), 1e-30)
    wide[:, idx, idx] = magnitude * phase
    host = np.dtype(_dt.complex_of(real).host_dtype if is_complex else real.host_dtype)
    rounded = wide.astype(host)
    mask = _mask(dim, lower, unit)
    exact = np.where(mask, rounded, 0).astype(np.complex128 if is_complex else np.float64)
    if unit:
        exact[:, idx, idx] = 1
    stored = np.where(mask, rounded, np.nan).astype(host)
    return TriangularSystem(stored, exact)


def _wide(x: np.ndarray) -> np.ndarray:
    return x.astype(np.clongdouble if np.iscomplexobj(x) else np.longdouble)


def solve_reference(exact: np.ndarray, b: np.ndarray, *, left: bool, lower: bool, alpha: complex = 1) -> np.ndarray:
    """``alpha T^-1 B`` (left) or ``alpha B T^-1`` (right) by substitution in extended precision.

    ``exact`` is (batch or 1, dim, dim) triangular (``lower`` or upper), ``b`` (batch, M, N).
    Returned as float64 / complex128.
    """
    t, rhs = _wide(exact), _wide(np.asarray(b)) * alpha
    if np.iscomplexobj(rhs) and not np.iscomplexobj(t):
        t = t.astype(np.clongdouble)
    if not left:  # X T = B  <=>  T^T X^T = B^T (a transpose, no conjugate)
        t, rhs, lower = np.swapaxes(t, -1, -2), np.swapaxes(rhs, -1, -2), not lower
    x = np.zeros(np.broadcast_shapes(t.shape[:-2], rhs.shape[:-2]) + rhs.shape[-2:], dtype=rhs.dtype)
    n = t.shape[-1]
    for i in range(n) if lower else range(n - 1, -1, -1):
        known = np.einsum("...k,...kj->...j", t[..., i, :], x)
        x[..., i, :] = (rhs[..., i, :] - known) / t[..., i, i][..., None]
    if not left:
        x = np.swapaxes(x, -1, -2)
    return x.astype(np.complex128 if np.iscomplexobj(x) else np.float64)


def condition_number(exact: np.ndarray) -> float:
    """The largest 2-norm condition number of the matrices in ``exact``."""
    return float(np.max(np.linalg.cond(exact)))


def backward_error(exact: np.ndarray, x: np.ndarray, b: np.ndarray, *, left: bool, alpha: complex = 1) -> float:
    """The largest normwise backward error ``||alpha B - op(T, X)|| / (||T|| ||X|| + ||alpha B||)`` (Frobenius).

    ``op(T, X)`` is T X on the left and X T on the right; NaN or Inf in X gives infinity.
    """
    if not np.all(np.isfinite(x)):
        return float("inf")
    t = exact.astype(np.complex128 if np.iscomplexobj(exact) else np.float64)
    wide_x, rhs = x.astype(np.complex128), np.asarray(b).astype(np.complex128) * alpha
    product = t @ wide_x if left else wide_x @ t
    residual = _norms(rhs - product)
    scale = _norms(t) * _norms(wide_x) + _norms(rhs)
    return float(np.max(residual / np.where(scale > 0, scale, 1.0)))


def _norms(matrices: np.ndarray) -> np.ndarray:
    """The Frobenius norm of each matrix of a stack."""
    return np.linalg.norm(matrices, axis=(-2, -1))


def residual_bound(real: _dt.DType, dim: int) -> float:
    """Allowed backward error: RESIDUAL_FACTOR * dim * u."""
    return RESIDUAL_FACTOR * dim * unit_roundoff(real)


def forward_bound(real: _dt.DType, dim: int, cond: float) -> float:
    """Allowed normwise relative forward error: FORWARD_FACTOR * dim * u * cond(T)."""
    return FORWARD_FACTOR * dim * unit_roundoff(real) * cond
