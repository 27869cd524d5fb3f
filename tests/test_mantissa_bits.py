"""MantissaBits on the block-level GEMM (CPU): the operator, the descriptor's scheme traits, the
3xtf32 kernel (kernels/blasdx/mma_3xtf32.cuh) compiled by NVRTC for sm_80..sm_90 with its SASS
read, and a numpy model of the scheme checked against the tolerance the GPU tests use."""

from __future__ import annotations

import itertools
import pickle
import re

import numpy as np
import pytest

import blasdx as bx
from blasdx.base import dtypes as dt
from blasdx.codegen.gemm import generate
from blasdx.fusion.kernel import prelude
from blasdx.reference import relative_error, tolerance

R, C = bx.row_major, bx.col_major
HMMA_TF32 = re.compile(r"\bHMMA\.1688\.F32\.TF32 ")
SPLIT = re.compile(r"\bLOP3\.LUT \S+, \S+, 0xffffe000, ")  # round_tf32's mask: twice per split (hi, lo)


def gemm(size=(64, 64, 64), precision=(bx.float32,), sm=80, *ops):
    desc = bx.Size(*size) + bx.Precision(*precision) + bx.Function.MM + bx.SM(sm) + bx.Block()
    for op in ops:
        desc = desc + op
    return desc


# ---- the operator ---------------------------------------------------------------------------------


def test_the_operator_is_a_value():
    assert bx.MantissaBits(21) == bx.MantissaBits(21) and hash(bx.MantissaBits(21)) == hash(bx.MantissaBits(21))
    assert bx.MantissaBits(21) != bx.MantissaBits(22)
    assert repr(bx.MantissaBits(21)) == "MantissaBits(21)"
    assert bx.RequiredMantissaBits is bx.MantissaBits  # cuBLASDx's name
    assert bx.MantissaBits(np.int64(12)).bits == 12 and type(bx.MantissaBits(np.int64(12)).bits) is int


@pytest.mark.parametrize("bits", [0, -3, 2.5, True, "21", None])
def test_bad_bits_are_refused_naming_the_argument(bits):
    with pytest.raises(bx.DescriptorError, match=r"MantissaBits: bits must be a positive integer"):
        bx.MantissaBits(bits)


def test_composition_is_order_free_and_refuses_a_second_one():
    ops = [bx.Size(64, 64, 64), bx.Precision(bx.float32), bx.Function.MM, bx.SM(80), bx.Block(), bx.MantissaBits(21)]
    forward = ops[0]
    for op in ops[1:]:
        forward = forward + op
    backward = ops[-1]
    for op in reversed(ops[:-1]):
        backward = op + backward
    assert forward == backward and hash(forward) == hash(backward)
    assert (ops[-1] + ops[0]) + (ops[1] + ops[2]) + ops[3] + ops[4] == forward
    assert repr(forward).endswith("+ MantissaBits(21)")
    with pytest.raises(bx.DescriptorError, match=r"MantissaBits\(21\) and MantissaBits\(12\): a descriptor takes one "
                                                 r"MantissaBits operator"):
        forward + bx.MantissaBits(12)


def test_the_bits_are_part_of_the_identity_and_survive_pickling():
    plain, d21, d23 = gemm(), gemm() + bx.MantissaBits(21), gemm() + bx.MantissaBits(23)
    assert len({plain, d21, d23}) == 3
    assert pickle.loads(pickle.dumps(d21)) == d21
    assert d21.scheme == d23.scheme  # the same kernel ...
    assert d21.source() != d23.source() and d21.source() != plain.source()  # ... but each its own cache entry


@pytest.mark.parametrize(("precision", "bits", "message"), [
    ((bx.float32,), 24, "float32 inputs keep at most 23 mantissa bits; 24 were asked for"),
    ((bx.float16, bx.float16, bx.float32), 11, "float16 inputs keep at most 10"),
    ((bx.bfloat16, bx.bfloat16, bx.float32), 8, "bfloat16 inputs keep at most 7"),
    ((bx.float64,), 53, "float64 inputs keep at most 52"),
    ((bx.float8_e4m3, bx.float8_e5m2, bx.float32), 3, "float8_e5m2 inputs keep at most 2"),
    ((bx.int8, bx.int8, bx.int32), 4, "int8 products are exact integers; leave MantissaBits out"),
])
def test_bits_a_type_cannot_keep_are_refused_at_plus(precision, bits, message):
    with pytest.raises(bx.DescriptorError, match=re.escape(f"MantissaBits({bits}) and Precision(")) as info:
        bx.Precision(*precision) + bx.MantissaBits(bits)
    assert message in str(info.value)


def test_the_default_precision_is_checked_at_validate():
    desc = bx.Size(8, 8, 8) + bx.Function.MM + bx.SM(80) + bx.MantissaBits(30)  # float32 by default
    assert not desc.is_supported
    with pytest.raises(bx.DescriptorError, match="float32 inputs keep at most 23"):
        desc.validate()


def test_trsm_refuses_the_operator():
    with pytest.raises(bx.DescriptorError, match=r"MantissaBits\(20\) and Function.TRSM: .* Function.MM only"):
        bx.Size(32, 32) + bx.Precision(bx.float32) + bx.Function.TRSM + bx.MantissaBits(20)


# ---- traits ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(("precision", "sm", "bits", "name", "products", "kept", "instruction"), [
    ((bx.float32,), 80, None, "native", 1, 23, "fma"),
    ((bx.float32,), 80, 23, "3xtf32", 3, 23, "mma.sync.m16n8k8"),
    ((bx.float32,), 86, 11, "3xtf32", 3, 23, "mma.sync.m16n8k8"),
    ((bx.float32,), 90, 21, "3xtf32", 3, 23, "mma.sync.m16n8k8"),
    ((bx.float32,), 80, 10, "tf32", 1, 10, "mma.sync.m16n8k8"),
    ((bx.float32,), 75, 21, "native", 1, 23, "fma"),  # no tf32 mma.sync: FFMA keeps every bit
    ((bx.float64,), 80, 40, "native", 1, 52, "mma.sync.m8n8k4"),  # DMMA, no block-level emulation
    ((bx.float64,), 90, 52, "native", 1, 52, "mma.sync.m16n8k8"),  # sm_90: the larger DMMA shape
    ((bx.float16, bx.float16, bx.float32), 80, 10, "native", 1, 10, "mma.sync.m16n8k16"),
])
def test_traits_name_the_scheme_and_its_cost(precision, sm, bits, name, products, kept, instruction):
    desc = gemm((64, 64, 64), precision, sm, *([bx.MantissaBits(bits)] if bits else []))
    assert desc.mantissa_bits == bits
    assert (desc.scheme.name, desc.scheme.products, desc.scheme.mantissa_bits) == (name, products, kept)
    assert desc.instruction == instruction
    assert desc.is_supported


def test_3xtf32_on_sm90a_stays_on_mma_sync():
    desc = gemm((64, 64, 64), (bx.float32,), 90, bx.MantissaBits(23)) + bx.Type.real
    arch_specific = bx.Size(64, 64, 64) + bx.Function.MM + bx.SM(90, arch_specific=True) + bx.MantissaBits(23)
    assert arch_specific.instruction == desc.instruction == "mma.sync.m16n8k8"
    assert not arch_specific.plan.is_wgmma


def test_the_plan_is_tf32s_with_warp_tiles_for_twice_the_accumulators():
    """3xtf32 runs tf32's instruction on tf32's shared-memory layouts; each step's products are
    summed apart before they enter the accumulators, so warp tiles keep the accumulator budget
    for twice the registers (and are never larger than tf32's)."""
    for size, order in itertools.product([(64, 64, 64), (37, 29, 19), (128, 128, 64)],
                                         itertools.product((R, C), (R, C))):
        extra = bx.Arrangement(*order, C)
        three = gemm(size, (bx.float32,), 80, extra, bx.MantissaBits(23))
        tf32 = gemm(size, (bx.tfloat32, bx.tfloat32, bx.float32), 80, extra)
        assert three.instruction == tf32.instruction == "mma.sync.m16n8k8"
        assert (three.plan.smem_a, three.plan.smem_b) == (tf32.plan.smem_a, tf32.plan.smem_b)
        assert three.shared_memory_size == tf32.shared_memory_size
        fm, fn = three.plan.warp_tile
        assert fm * fn * 16 * 8 * 4 * 2 // 32 <= 256  # accumulator + step sum: 256 bytes per thread
        assert fm * fn <= tf32.plan.warp_tile[0] * tf32.plan.warp_tile[1]
    assert gemm((128, 128, 64), (bx.float32,), 80, bx.MantissaBits(23)).plan.warp_tile == (2, 4)


def test_generated_source_names_the_atom_and_its_header():
    source = generate(gemm((64, 64, 64), (bx.float32,), 80, bx.MantissaBits(20))).source
    assert '#include "blasdx/mma_3xtf32.cuh"' in source
    assert "using atom = blasdx::mma_m16n8k8_3xtf32;  // 3xtf32 (3 products, 23 bits)" in source
    tf32 = generate(gemm((64, 64, 64), (bx.float32,), 80, bx.MantissaBits(9))).source
    assert "mma_3xtf32" not in tf32 and "using atom = blasdx::mma_m16n8k8<blasdx::tf32, blasdx::tf32, float>;" in tf32
    assert "mma_3xtf32" not in generate(gemm()).source
    fused = prelude({"G": gemm((32, 32, 32), (bx.float32,), 80, bx.MantissaBits(20)), "H": gemm((32, 32, 32))})
    assert fused.count('#include "blasdx/mma_3xtf32.cuh"') == 1


# ---- the kernel, compiled ---------------------------------------------------------------------------

SASS_CASES = [pytest.param(sm, size, order, id=f"sm{sm}-{'x'.join(map(str, size))}-{order[0].name[0]}{order[1].name[0]}")
              for sm in (80, 86, 89, 90)
              for size in ((64, 64, 64), (37, 29, 19))
              for order in itertools.product((R, C), (R, C))]


@pytest.mark.slow
@pytest.mark.parametrize("sm, size, order", SASS_CASES)
def test_three_tf32_mma_per_step_split_in_registers(sm, size, order):
    """Three HMMA.1688.F32.TF32 where tf32 has one, and no local memory. Each fragment is split
    once per K step where whole warp tiles lie inside C (the compiler shares a fragment's split
    among the products it enters); edge tiles, whose products are each predicated, may split
    per product (6 values) instead. K = 19 ends with a tail step of 3 of 8 K values: K slots t + 4
    (half of each fragment) lie past K in every lane, are known zero and are not split."""
    extra = bx.Arrangement(*order, C)
    three = gemm(size, (bx.float32,), sm, extra, bx.MantissaBits(23)).compile()
    one = gemm(size, (bx.float32,), sm, extra, bx.MantissaBits(10)).compile()
    sass, sass_one = three.sass(), one.sass()
    assert three.local_memory == 0 and not re.search(r"\b(LDL|STL)\b", sass)
    hmma, hmma_one = len(HMMA_TF32.findall(sass)), len(HMMA_TF32.findall(sass_one))
    desc = gemm(size, (bx.float32,), sm, extra, bx.MantissaBits(23))
    assert desc.plan.warp_tile == gemm(size, (bx.float32,), sm, extra, bx.MantissaBits(10)).plan.warp_tile
    assert hmma_one > 0 and hmma == 3 * hmma_one
    # each step's sum enters the accumulators by rounded f32 adds: 4 FADD per three HMMA at least
    assert len(re.findall(r"\bFADD ", sass)) >= 4 * hmma // 3
    fm, fn = desc.plan.warp_tile
    splits, steps = len(SPLIT.findall(sass)) // 2, hmma // 3
    per_fragment = steps * (4 * fm + 2 * fn) // (fm * fn)  # A: 4 values per fragment, B: 2
    if size == (64, 64, 64):
        assert splits == per_fragment < steps * 6
    else:
        k_steps = -(-size[2] // 8)  # the last of them the tail, whose upper K slots are all past K
        assert per_fragment - per_fragment // k_steps // 2 <= splits <= steps * 6


@pytest.mark.slow
def test_the_device_api_compiles_with_the_split_atom():
    source = r"""
    extern "C" __global__ void kernel(const float* a, const float* b, float* c) {
        extern __shared__ __align__(16) unsigned char smem[];
        auto [sA, sB, sC] = GEMM::slice_shared_memory(smem);
        GEMM::load_a(a, sA);
        GEMM::load_b(b, sB);
        GEMM::copy_wait();
        GEMM::execute(1.0f, sA, sB, 0.0f, sC);
        __syncthreads();
        GEMM::store_c(sC, c);
        auto acc = GEMM::execute(sA, sB);
        acc.store(c);
    }
    """
    desc = gemm((48, 40, 24), (bx.float32,), 80, bx.MantissaBits(22))
    kernel = bx.compile_kernel(source, "kernel", gemms={"GEMM": desc})
    sass = kernel.compiled.sass()
    assert kernel.compiled.local_memory == 0
    assert HMMA_TF32.search(sass) and len(HMMA_TF32.findall(sass)) % 3 == 0


# ---- the scheme, modelled in numpy ------------------------------------------------------------------


def _tf32_truncate(x: np.ndarray) -> np.ndarray:
    """What the tensor core reads of a float32: its top 19 bits."""
    return (x.astype(np.float32).view(np.uint32) & np.uint32(0xFFFFE000)).view(np.float32)


def _round(x: np.ndarray) -> np.ndarray:
    """round_tf32: integer rounding of the bits to tf32, to nearest."""
    return ((x.astype(np.float32).view(np.uint32) + np.uint32(0x1000)) & np.uint32(0xFFFFE000)).view(np.float32)


def _split(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """split_tf32: hi rounded to tf32, the exact rest rounded to tf32."""
    hi = _round(x)
    return hi, _round((x - hi).astype(np.float32))


@pytest.mark.parametrize("k", [32, 256, 2048, 4096])
def test_a_numpy_model_of_the_scheme_meets_the_tolerance(k):
    """Three tf32 products of the parts (exact products, f32 sums per 8-deep step) stay within
    tolerance(scheme="3xtf32"); one tf32 product does not."""
    rng = np.random.default_rng(k)
    a = rng.standard_normal((48, k)).astype(np.float32)
    b = rng.standard_normal((k, 40)).astype(np.float32)
    (ah, al), (bh, bl) = _split(a), _split(b)
    al, bl = _tf32_truncate(al), _tf32_truncate(bl)
    assert np.array_equal(_tf32_truncate(ah), ah) and np.array_equal(_tf32_truncate(al), al)  # read exactly
    assert np.all(np.abs(a - ah - al) <= 2.0**-22 * np.abs(a))
    acc = np.zeros((48, 40), np.float32)
    for k0 in range(0, k, 8):  # one mma.sync step: its three products summed from zero, then added
        s = slice(k0, k0 + 8)
        step = np.zeros((48, 40), np.float32)
        for x, y in ((al, bh), (ah, bl), (ah, bh)):
            step = (step + (x[:, s].astype(np.float64) @ y[s, :].astype(np.float64))).astype(np.float32)
        acc = acc + step
    ref = a.astype(np.float64) @ b.astype(np.float64)
    err = relative_error(acc, ref)
    assert err <= tolerance(dt.float32, dt.float32, k, scheme="3xtf32")
    tf32 = _tf32_truncate(a).astype(np.float64) @ _tf32_truncate(b).astype(np.float64)
    assert relative_error(tf32, ref) > 10 * tolerance(dt.float32, dt.float32, k, scheme="3xtf32")
