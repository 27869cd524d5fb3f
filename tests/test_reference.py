"""The float64 reference's comparison: element by element, against |A| |B| + |C| where given."""

from __future__ import annotations

import numpy as np
import pytest

from blasdx.reference import assert_close, gemm_scale, relative_error


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
