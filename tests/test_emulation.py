"""Precision emulated on tensor cores (blasdx.engine.emulation): the scheme a mantissa requirement
resolves to, how plans take it, and the 3xtf32 kernels (compiled for sm_90a, SASS read)."""

from __future__ import annotations

import re

import pytest

from blasdx.calls import matmul as array_gemm

from blasdx.engine import emulation

from blasdx.engine import hopper
from blasdx.base import dtypes as dt
from blasdx.compile.cache import cached_compile
from blasdx.base.errors import ExecutionError
from blasdx.reference import tolerance

from .test_hopper import SMS, col, view


@pytest.mark.parametrize(("dtype", "bits", "name", "products", "kept"), [
    (dt.float32, None, "native", 1, 23),
    (dt.float32, 1, "tf32", 1, 10),
    (dt.float32, 10, "tf32", 1, 10),
    (dt.float32, 11, "3xtf32", 3, 21),
    (dt.float32, 21, "3xtf32", 3, 21),
    (dt.float32, 22, "3xtf32", 3, 23),
    (dt.float32, 23, "3xtf32", 3, 23),
    (dt.float16, 10, "native", 1, 10),
    (dt.bfloat16, 7, "native", 1, 7),
    (dt.float64, 52, "ozaki", 16, 52),
])
def test_the_cheapest_scheme_that_keeps_the_bits(dtype, bits, name, products, kept):
    scheme = emulation.resolve(dtype, bits)
    assert (scheme.name, scheme.products, scheme.mantissa_bits) == (name, products, kept)
    assert bits is None or scheme.mantissa_bits >= bits


@pytest.mark.parametrize(("dtype", "bits", "message"), [
    (dt.float32, 24, "float32 inputs keep at most 23 mantissa bits; 24 were asked for"),
    (dt.float16, 11, "float16 inputs keep at most 10"),
    (dt.bfloat16, 10, "bfloat16 inputs keep at most 7"),
    (dt.float64, 53, "float64 inputs keep at most 52"),
    (dt.int8, 8, "int8 products are exact integers"),
    (dt.float32, 0, "expected a positive int or None, got 0"),
    (dt.float32, True, "expected a positive int or None, got True"),
    (dt.float32, 12.0, "expected a positive int or None, got 12.0"),
])
def test_requirements_that_cannot_be_kept_are_refused(dtype, bits, message):
    with pytest.raises(ExecutionError, match=re.escape(message)):
        emulation.resolve(dtype, bits)


def test_array_calls_quote_the_rule():
    with pytest.raises(ExecutionError, match="mantissa_bits is the minimum the products keep"):
        array_gemm._resolve_scheme(dt.float32, 30)


def _plan(x, y, bits, sm=90):
    scheme = array_gemm._resolve_scheme(x.dtype, bits)
    return array_gemm.plan_call(x, y, None, dt.float32, array_gemm._DeviceInfo(sm, SMS), 0, scheme=scheme)


def test_3xtf32_takes_the_engine_with_the_split_configuration(encoder):
    plan = _plan(view((4096, 4096), dt.float32), view((4096, 4096), dt.float32), 21)
    assert plan.kind == "hopper" and plan.kernel.config.split_tf32
    text = plan.describe()
    assert "3xtf32 (3 products, 21 bits)" in text and "3xtf32 split" in text
    assert "y K-major (repacked: float32 wgmma reads K-major operands only)" in text
    assert plan.kernel.config.shared_memory(4, staged_store=True) <= 232448


@pytest.mark.parametrize("sm", [80, 90])
def test_3xtf32_small_problems_take_the_one_block_kernel(sm):
    plan = _plan(view((64, 64), dt.float32), col((64, 64), dt.float32), 20, sm=sm)
    assert plan.kind == "block" and plan.scheme.name == "3xtf32"
    assert plan.desc.scheme.name == "3xtf32" and plan.desc.mantissa_bits == 21
    assert plan.desc.instruction == "mma.sync.m16n8k8"
    batched = _plan(view((200, 32, 32), dt.float32), view((200, 32, 32), dt.float32), 12, sm=sm)
    assert batched.kind == "block" and batched.desc.scheme.name == "3xtf32"


@pytest.mark.parametrize("bits", [22, 23])
def test_all_of_float32s_bits_promote_every_stage_on_the_engine(encoder, bits):
    plan = _plan(view((4096, 4096), dt.float32), view((4096, 4096), dt.float32), bits)
    assert plan.kind == "hopper" and plan.scheme.name == "3xtf32" and plan.scheme.mantissa_bits == 23
    assert plan.kernel.config == hopper.SPLIT_SQUARE_P1 and plan.kernel.config.promote_stages == 1
    fewer = _plan(view((4096, 4096), dt.float32), view((4096, 4096), dt.float32), 21)
    assert fewer.kernel.config == hopper.SPLIT_SQUARE and fewer.scheme.mantissa_bits == 21
    small = _plan(view((64, 64), dt.float32), col((64, 64), dt.float32), bits)  # the one-block kernel keeps 23
    assert small.kind == "block" and small.desc.scheme.name == "3xtf32"


@pytest.mark.parametrize("k", [1, 17, 63])
def test_short_products_asking_all_bits_run_native_float32_on_the_engine(encoder, k):
    """Below ENGINE_3XTF32_FULL_MIN_K the split's own floor is most of the error: FFMA keeps the bits."""
    assert emulation.ENGINE_3XTF32_FULL_MIN_K == 64
    plan = _plan(view((4096, k), dt.float32), view((k, 4096), dt.float32), 23)
    assert plan.kind == "hopper" and "FFMA" in plan.describe() and plan.scheme.name == "native"
    assert f"3xtf32 not run (the engine's keeps 21 bits below K = 64, 23 asked at K = {k})" in plan.describe()
    at = _plan(view((4096, 64), dt.float32), view((64, 4096), dt.float32), 23)
    assert at.scheme.name == "3xtf32" and at.kernel.config.promote_stages == 1
    fewer = _plan(view((4096, k), dt.float32), view((k, 4096), dt.float32), 21)
    assert fewer.scheme.name == "3xtf32" and fewer.kernel.config.promote_stages == 2


def test_engine_scheme_names():
    f32 = emulation.resolve(dt.float32, 23)
    assert emulation.engine_scheme(f32, 64) == "3xtf32-23" and emulation.engine_scheme(f32, 63) is None
    assert emulation.engine_scheme(emulation.resolve(dt.float32, 15), 1) == "3xtf32"
    assert emulation.engine_scheme(emulation.resolve(dt.float32, 8), 4096) is None  # tf32: no split
    assert set(hopper.SPLIT_CONFIGS) == set(hopper.EMULATED_SERVED)


def test_3xtf32_before_sm80_runs_the_block_kernel_on_ffma():
    plan = _plan(view((200, 32, 32), dt.float32), view((200, 32, 32), dt.float32), 20, sm=75)
    assert plan.kind == "block" and plan.scheme.name == "native" and plan.desc.instruction == "fma"
    assert "3xtf32 not run (mma.sync tf32 needs sm_80)" in plan.describe()


def test_3xtf32_elsewhere_runs_native_float32(encoder):
    plan = _plan(view((512, 512), dt.float32), view((512, 512), dt.float32), 23, sm=80)
    assert plan.kind == "tiled" and plan.scheme.name == "native"
    assert "3xtf32 not run (the wgmma engine needs sm_90" in plan.describe()
    assert plan.kernel.desc.precision[0] == dt.float32  # FFMA: every float32 bit


def test_few_bits_run_float32_as_tf32(encoder):
    plan = _plan(view((4096, 4096), dt.float32), col((4096, 4096), dt.float32), 8)
    assert plan.kind == "hopper" and not plan.kernel.config.split_tf32 and plan.kernel.a == dt.tfloat32
    assert "tf32 (1 product, 10 bits)" in plan.describe()


def test_tolerance_of_3xtf32_is_float32s_plus_the_parts():
    assert tolerance(dt.float32, dt.float32, 4096, scheme="3xtf32") == pytest.approx(
        tolerance(dt.float32, dt.float32, 4096) + 8 * 2.0**-22)
    assert tolerance(dt.float32, dt.float32, 4096, scheme="3xtf32") < tolerance(dt.tfloat32, dt.float32, 4096) / 100


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(n for n, c in hopper.CONFIGS.items() if c.split_tf32))
@pytest.mark.parametrize("staged", [True, False])
def test_split_kernels_compile_with_tf32_wgmma_and_no_spills(name, staged):
    config = hopper.CONFIGS[name]
    source = hopper.gemm_source(dt.float32, dt.float32, config, True, True, store_by_tma=staged)
    compiled = cached_compile(source, hopper.KERNEL_NAME, "sm_90a")
    sass = compiled.sass()
    assert compiled.local_memory == 0 and "LDL" not in sass and "STL" not in sass
    assert "serialized" not in (compiled.log or ""), "ptxas serialised the wgmmas (accumulators read in flight)"
    assert f"HGMMA.64x{config.bn}x8.F32.TF32" in sass and "UTMALDG" in sass
    # the splitting warps read and write whole 16-byte vectors of the stages
    assert "LDS.128" in sass and "STS.128" in sass
    assert compiled.shared_memory == 0  # all dynamic: EngineConfig.shared_memory is what launches ask for


def test_host_model_of_the_tensor_core_sums_favours_promotion_every_stage():
    """benchmarks/tf32_sum_model.py (the argument for ENGINE_3XTF32_FULL_MIN_K): promoted every stage the error is
    about a third of every two stages' at K = 128, and the split's own floor lies below both."""
    import importlib.util
    from pathlib import Path

    import numpy as np

    path = Path(__file__).resolve().parent.parent / "benchmarks" / "tf32_sum_model.py"
    spec = importlib.util.spec_from_file_location("tf32_sum_model", path)
    model = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(model)
    rng = np.random.default_rng(3)
    x, y = rng.standard_normal((16, 128)).astype(np.float32), rng.standard_normal((128, 32)).astype(np.float32)
    ref = x.astype(np.float64) @ y.astype(np.float64)
    p1, p2 = (model.error(model.three_tf32(x, y, p), ref) for p in (1, 2))
    assert p1 < 0.5 * p2 and 5e-8 < p1 < 3e-7
    hi, lo = model.split(x)
    assert np.all(np.abs(hi.astype(np.float64) + lo - x) <= 2.0**-22 * np.abs(x))  # what the parts miss
