"""The float64 reference's comparison: normwise relative error, against |A| |B| + |C| where asked."""

from __future__ import annotations

import numpy as np
import pytest

from blasdx.reference import assert_close, relative_error


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
