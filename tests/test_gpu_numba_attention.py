"""GPU correctness of examples/numba_flash_attention.py: the online-softmax flash kernel written in
Numba with blasdx GEMMs, against float64 on fresh data with O poisoned first, for odd S (one partial
tile, a tile of one key, many tiles with a partial last one), D = 64 and 128, causal and not
(skipped without numba-cuda or a GPU)."""

from __future__ import annotations

import pytest

from .gpu_support import require_gpu
from .numba_support import numba_cuda  # noqa: F401 - skips the module without numba-cuda
from .test_fusion import load_example

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("seq", [1, 17, 65, 1000])
@pytest.mark.parametrize("dim", [64, 128])
@pytest.mark.parametrize("causal", [False, True])
def test_numba_flash_attention(seq: int, dim: int, causal: bool) -> None:
    sm = require_gpu()
    if sm < 80:
        pytest.skip("the example's descriptors need mma.sync f16 (sm_80+)")
    load_example("numba_flash_attention").run(3, seq, dim, causal, sm)  # raises AssertionError beyond the float64 tolerance
