"""The float64 reference's comparison: element by element, against |A| |B| + |C| where given."""

from __future__ import annotations

import math

import numpy as np
import pytest

from blasdx.base import dtypes as dt
from blasdx.reference import (
    assert_close,
    fp8_wgmma_allowance,
    fp8_wgmma_sum,
    gemm_scale,
    random_operand,
    reference_gemm,
    relative_error,
    tolerance,
)


def test_a_result_near_zero_is_measured_against_the_terms_where_a_scale_is_given():
    """acc + x y with x y ~ -acc: tf32-sized errors of x y (1e-3 of it) are 2% of the result itself,
    0.05% of the terms."""
    x, y, acc = 1.0258, -1.0, 1.0
    ref = np.array([[acc + x * y]])
    got = ref + 1e-3 * abs(x * y)
    scale = np.array([[abs(acc) + abs(x * y)]])
    assert relative_error(got, ref) > 0.03
    with pytest.raises(AssertionError, match="relative error"):
        assert_close(got, ref, 5e-3)
    assert_close(got, ref, 5e-3, scale=scale)
    with pytest.raises(AssertionError, match="relative error"):  # a scale does not hide a wrong result
        assert_close(ref + 0.1, ref, 5e-3, scale=scale)


def test_nan_is_never_close():
    with pytest.raises(AssertionError):
        assert_close(np.array([np.nan]), np.array([1.0]), 1.0, scale=np.array([1.0]))


def test_one_wrong_element_fails_where_the_normwise_error_passes():
    """8192 elements, the largest of them lost: 4% normwise, far beyond that element's bound."""
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((2, 64, 64)), rng.standard_normal((2, 64, 64))
    ref = a @ b
    got = ref.copy()
    lost = np.unravel_index(int(np.argmax(np.abs(ref))), ref.shape)
    got[lost] = 0.0
    assert relative_error(got, ref) < 0.0625  # f16 -> f16's allowance at K = 64 as a normwise bound passes it
    with pytest.raises(AssertionError, match=rf"1 of 8192 elements beyond the bound .* worst at \({lost[0]}, "):
        assert_close(got, ref, 0.033, scale=gemm_scale(a, b))
    assert_close(ref * (1 + 1e-9), ref, 1e-8, scale=gemm_scale(a, b))


def test_without_a_scale_every_element_is_held_to_the_largest():
    ref = np.array([100.0, 1.0, -3.0])
    assert_close(ref + 0.9, ref, 1e-2)
    with pytest.raises(AssertionError, match=r"1 of 3 elements .* worst at \(2,\)"):
        assert_close(ref + np.array([0.0, 0.0, 1.5]), ref, 1e-2)


def test_gemm_scale_and_non_finite_references():
    a, b, c = np.array([[1.0, -2.0]]), np.array([[3.0], [4.0]]), np.array([[-5.0]])
    np.testing.assert_array_equal(gemm_scale(a, b, c, alpha=-2, beta=0.5), [[2 * 11 + 2.5]])
    np.testing.assert_array_equal(gemm_scale(a, b, c), [[11.0]])  # beta 0 leaves C out
    assert_close(np.array([np.nan, np.inf, 1.0]), np.array([np.nan, np.inf, 1.0]), 1e-3)
    with pytest.raises(AssertionError, match="non-finite reference elements"):
        assert_close(np.array([1.0, np.inf]), np.array([np.nan, np.inf]), 1e-3)
    with pytest.raises(AssertionError, match="shape"):
        assert_close(np.zeros(3), np.zeros(4), 1e-3)


# ---- Hopper's fp8 wgmma sums: the model and the allowance derived from it -----------------------


def _fp8(values, dtype=dt.float8_e4m3) -> np.ndarray:
    """Values that fp8 holds exactly, as fp8."""
    x = np.asarray(values, dtype=np.float64)
    out = x.astype(dtype.host_dtype)
    assert np.array_equal(out.astype(np.float64), x), "not fp8 values"
    return out


def test_fp8_wgmma_model_cuts_toward_zero_below_the_group_s_largest_term():
    """256 sets 2^E = 2^8, so terms are cut to multiples of u = 2^(8 - 13): 0.9375 u and -0.9375 u
    vanish (toward -inf the second would be -u), 3.75 u keeps 3 u, and the next group's 0.9375 u is lost too."""
    u = 2.0**-5
    a = _fp8([[16, 0.234375, -0.234375, 0.46875] + [0] * 12 + [0.234375] + [0] * 15])
    b = _fp8([[16], [0.125], [0.125], [0.25]] + [[0]] * 12 + [[0.125]] + [[0]] * 15)
    assert np.array_equal(fp8_wgmma_sum(a, b), [[256 + 3 * u]])
    assert np.array_equal(fp8_wgmma_sum(a, b, toward="floor"), [[256 + 2 * u]])
    assert fp8_wgmma_sum(a, b, fraction_bits=23)[0, 0] == reference_gemm(a, b)[0, 0]


@pytest.mark.parametrize("k, promotion, measured", [(128, 32, 4.57e-5), (128, 64, 7.55e-5), (128, 128, 1.26e-4),
                                                    (256, None, 2.10e-4), (1024, None, 5.43e-4)])
def test_fp8_wgmma_model_matches_the_h100_measurements(k, promotion, measured):
    """Normwise errors of e4m3 -> f32 (2 * normal operands) measured on an H100 (docs/performance.md),
    promoted every 32, 64, 128 K elements and not at all: the model within 15%, toward -inf far off."""
    rng = np.random.default_rng(k + (promotion or 0))
    a = random_operand(dt.float8_e4m3, (96, k), rng)
    b = random_operand(dt.float8_e4m3, (k, 96), rng)
    ref = reference_gemm(a, b)
    modelled = relative_error(fp8_wgmma_sum(a, b, promotion), ref)
    assert abs(modelled / measured - 1) < 0.15, modelled
    assert relative_error(fp8_wgmma_sum(a, b, promotion, toward="floor"), ref) > 1.5 * measured


@pytest.mark.parametrize("pair, shape, promotion", [
    ((dt.float8_e4m3, dt.float8_e4m3), (8, 128, 128, 64), None),
    ((dt.float8_e4m3, dt.float8_e4m3), (4, 64, 64, 256), 128),
    ((dt.float8_e4m3, dt.float8_e4m3), (2, 64, 64, 1024), None),
    ((dt.float8_e5m2, dt.float8_e4m3), (8, 64, 64, 64), None),
], ids=["e4m3-k64", "e4m3-k256-p128", "e4m3-k1024", "e5m2-k64"])
def test_fp8_wgmma_allowance_holds_for_the_model_on_random_operands(pair, shape, promotion):
    """Every element of the modelled sum within tolerance(..., "wgmma") of the float64 product, as
    assert_close checks it on the GPU (against |A| |B|, C's rounding apart)."""
    batch, m, n, k = shape
    rng = np.random.default_rng(k * m)
    a = random_operand(pair[0], (batch, m, k), rng)
    b = random_operand(pair[1], (batch, k, n), rng)
    tol = tolerance(pair[0], dt.float32, k, dt.float32, "wgmma", promotion, rounding_apart=True)
    assert tol == max(1e-4, fp8_wgmma_allowance(k, promotion))
    got, scale = fp8_wgmma_sum(a, b, promotion), gemm_scale(a, b)
    worst = float(np.max(np.abs(got - reference_gemm(a, b)) / scale))
    assert 0 < worst < tol / 10, (worst, tol)  # random operands stay far inside the worst case
    assert_close(got, reference_gemm(a, b), tol, scale=scale)


@pytest.mark.parametrize("k, promotion", [(64, None), (128, None), (256, 128)])
def test_fp8_wgmma_allowance_is_nearly_attained(k, promotion):
    """One product 2^8 per sum, every other 0.9375 u (u = 2^(8 - 13)), the most an e4m3 product below
    u can be: all of them are lost, 89% of the allowance, which no smaller one would cover."""
    a = np.full((1, k), 0.234375)
    b = np.full((k, 1), 0.125)
    for start in range(0, k, promotion or k):
        a[0, start], b[start, 0] = 16, 16
    a, b = _fp8(a), _fp8(b)
    error = abs(fp8_wgmma_sum(a, b, promotion) - reference_gemm(a, b)) / gemm_scale(a, b)
    allowance = fp8_wgmma_allowance(k, promotion)
    assert 0.85 * allowance < error[0, 0] < allowance


def test_a_sign_flipped_element_is_far_beyond_the_fp8_wgmma_allowance():
    """What a wrong element looks like at K = 64: 2 |C| / (|A| |B|) is 30x the allowance for the median
    element and beyond it for all but about 2% of them, so one flip per tile is caught."""
    rng = np.random.default_rng(64)
    a = random_operand(dt.float8_e4m3, (16, 64, 64), rng)
    b = random_operand(dt.float8_e4m3, (16, 64, 64), rng)
    ref, scale = reference_gemm(a, b), gemm_scale(a, b)
    tol = fp8_wgmma_allowance(64)
    flip = 2 * np.abs(ref) / scale
    assert np.median(flip) > 25 * tol
    assert np.mean(flip <= tol) < 0.03
    got = fp8_wgmma_sum(a, b)
    assert_close(got, ref, tol, scale=scale)
    i = np.unravel_index(int(np.argmin(np.abs(flip - np.median(flip)))), ref.shape)
    got[i] = -got[i]
    with pytest.raises(AssertionError, match="1 of 65536 elements beyond the bound"):
        assert_close(got, ref, tol, scale=scale)
    assert math.isclose(tol, 66 * 2.0**-13 + 3 * 2.0**-23)
