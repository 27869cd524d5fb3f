"""CPU tests of examples/numba_flash_attention.py: its kernel types, compiles and links for sm_90a
(Numba's LTO-IR plus the GEMMs', nvJitLink) without a GPU, for D = 64 and 128, causal and not, with
the output accumulator in registers (no local memory)."""

from __future__ import annotations

import pytest

from .numba_support import compile_kernel, opcodes
from .test_fusion import load_example

from numba.cuda import types  # noqa: E402 - numba_support skips the module without numba-cuda


@pytest.mark.parametrize("dim", [64, 128])
@pytest.mark.parametrize("causal", [False, True])
def test_numba_flash_attention_compiles(dim: int, causal: bool) -> None:
    example = load_example("numba_flash_attention")
    qk, pv = example.descriptors(dim, 90)
    h3, f3 = types.Array(types.float16, 3, "C"), types.Array(types.float32, 3, "C")
    _, sass, _ = compile_kernel(example.make_kernel(qk, pv, causal).py_func, (h3, h3, h3, f3), 90)
    found = opcodes(sass)
    assert "HMMA" in found                 # both GEMMs on tensor cores
    assert not found & {"STL", "LDL"}      # O stays in registers across the key tiles
    assert "MUFU" in sass                  # the exponentials of the online softmax


def test_descriptors_follow_the_head_dim() -> None:
    example = load_example("numba_flash_attention")
    qk, pv = example.descriptors(128, 90)
    assert (qk.m, qk.n, qk.k) == (example.BLOCK_M, example.BLOCK_N, 128)
    assert (pv.m, pv.n, pv.k) == (example.BLOCK_M, 128, example.BLOCK_N)
