"""Load transforms of A on wgmma plans (sm_90a, CPU only): wgmma with A from registers.

With an ``a_op`` and an identity (or conjugate) ``b_op`` the device API keeps wgmma: each warp
loads its 16 rows of A from the panels, applies ``a_op`` and issues wgmma with A in registers
and B from shared memory. SASS prints that form with a register A operand
(``HGMMA.64x64x16.F32 R24, R60, gdesc[UR4], ...``); the form with both operands in shared memory
prints one ``gdesc`` and no register A (``HGMMA.64x64x16.F32 R24, gdesc[UR4], ...``). A ``b_op``
still runs mma.sync over the panels. tests/test_gpu_wgmma_fusion.py runs these kernels.
"""

from __future__ import annotations

import re
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

import blasdx as bx
from blasdx.base import dtypes as dt
from blasdx.compile import cubin as cubins

from . import fusion_kernels
from .test_wgmma_fusion import functions, gemm

R, C = bx.row_major, bx.col_major
F16, BF16, F32 = bx.float16, bx.bfloat16, bx.float32
E4, E5, I8, U8, I32 = bx.float8_e4m3, bx.float8_e5m2, bx.int8, bx.uint8, bx.int32

SIXTEEN_BIT = [(F16, F16, F16), (F16, F16, F32), (BF16, BF16, F32)]
EIGHT_BIT = [(E4, E4, F32), (E4, E5, F16), (E5, E4, F32), (E5, E5, F16),
             (I8, I8, I32), (I8, U8, I32), (U8, I8, I32), (U8, U8, I32)]
#: (arrangement, size) per operand width: non-square tiles issued as several widths (96 = 64 + 32,
#: 48 = 32 + 16, 40 = 32 + 8), M-major A / N-major B (16-bit) or transposed into K-major panels
#: (8-bit), three tiles on two warpgroups (192 rows: one warpgroup owns two), a one-step K (8-bit
#: 64 x 256 x 32) and 128 x 128 x 64.
SHAPES = {
    2: [((R, C, C), (64, 96, 48)), ((C, R, R), (128, 128, 64)), ((R, R, C), (192, 48, 80)),
        ((C, C, R), (64, 256, 32))],
    1: [((R, C, C), (64, 96, 96)), ((C, R, R), (128, 128, 64)), ((R, R, C), (192, 40, 96)),
        ((C, C, R), (64, 256, 32))],
}


def cases():
    """(types, arrangement, size): every wgmma type with every shape of its width."""
    for types in SIXTEEN_BIT + EIGHT_BIT:
        for arr, size in SHAPES[types[0].size]:
            yield types, arr, size


def case_id(case) -> str:
    (a, b, c), arr, size = case
    return f"{a.name}x{b.name}-{c.name}-{''.join(x.name[0] for x in arr)}-{'x'.join(map(str, size))}"


CASES = list(cases())

KERNEL_NAMES = ("register_api", "twice", "shared_api")


#: The register API once and twice (C = 2 alpha op(A) B + beta C) and the shared-memory API of
#: tests/test_wgmma_fusion.py, with A_OP the load transform of A and B_OP that of B (identity
#: except in the mma.sync check), after A transforms that are exact in every type (so that the
#: reference applies them to A alike).
KERNELS = r"""
struct relu {  // max(v, 0)
    template <class T> __device__ T operator()(T v) const { return float(v) > 0.0f ? v : T(0.0f); }
};
struct halve {  // v >> 1 (integers: an arithmetic shift, floor(v / 2))
    template <class T> __device__ T operator()(T v) const { return T(v >> 1); }
};
""" + fusion_kernels.source(*KERNEL_NAMES)
#: How many times each kernel adds op(A) B into its result.
PRODUCTS = {"twice": 2}


def _scaled(a: np.ndarray) -> np.ndarray:
    """-2 a for floating-point A (exact), a >> 1 for integers (floor(a / 2), exact)."""
    return a >> 1 if a.dtype.kind in "iu" else -2.0 * a


#: A transform: (C++ for floating-point A, C++ for integer A, what it does to float64 / int64 A).
A_OPS = {
    "scaled": ("blasdx::scale<float>{-2.0f}", "halve{}", _scaled),
    "relu": ("relu{}", "relu{}", lambda a: np.maximum(a, 0)),
}


def a_op_source(a_type: dt.DType, op: str) -> str:
    """The C++ A_OP of transform ``op`` for A of this type."""
    floating, integral, _ = A_OPS[op]
    return integral if a_type.integral else floating


def kernel_source(a_type: dt.DType, op: str, b_op: str = "blasdx::identity{}") -> str:
    return KERNELS.replace("A_OP", a_op_source(a_type, op)).replace("B_OP", b_op)


def transform_a(a: np.ndarray, op: str) -> np.ndarray:
    """``op`` applied to a float64 / int64 A, as the kernels apply it."""
    return A_OPS[op][2](a)


def compile_all(descs, ops=tuple(A_OPS), names=KERNEL_NAMES) -> dict:
    """{(desc, op, name): FusedKernel}, compiled on a thread pool."""
    jobs = [(d, o, n) for d in descs for o in ops for n in names]

    def build(job):
        desc, op, name = job
        return job, bx.compile_kernel(kernel_source(desc.precision[0], op), name, {"GEMM": desc})

    first = build(jobs[0])  # cuda.core's lazy imports are not thread-safe: warm them up first
    with ThreadPoolExecutor(8) as pool:
        return dict([first, *pool.map(build, jobs[1:])])


def opcode(a_type: dt.DType) -> str:
    return "IGMMA" if a_type.integral else "QGMMA" if a_type.size == 1 else "HGMMA"


def register_a_gmma(op: str) -> re.Pattern:
    """A warpgroup MMA whose A operand is a register: ``<OP>.64xNxK... Rd, Ra, gdesc[...]``."""
    return re.compile(rf"\b{op}\.64x\d+x\d+\S* R\d+, R\d+, gdesc\[")


def shared_a_gmma(op: str) -> re.Pattern:
    """A warpgroup MMA with A and B in shared memory: ``<OP>.64xNxK... Rd, gdesc[...]``."""
    return re.compile(rf"\b{op}\.64x\d+x\d+\S* R\d+, gdesc\[")


# ---------------------------------------------------------------------------------------------- the instruction

#: issue_rs of every type at every width the descriptor form issues (integers: to 128, the widest
#: s32 tile), B K-major and, for 16-bit types, N-major; one kernel per row.
EVERY_WIDTH = r"""
#include "blasdx/fp8.cuh"
#include "blasdx/wgmma.cuh"
namespace wg = blasdx::wgmma;

// d = A B at WIDTH, 2 WIDTH, ... MAX columns, each written to out.
template <class TA, class TB, class TAcc, bool TRANS_B, int WIDTH, int MAX>
__device__ void widths(unsigned* out, const unsigned* a, wg::u64 desc) {
    if constexpr (WIDTH <= MAX) {
        using op = wg::mma<TA, TB, TAcc>;
        constexpr int REGS = WIDTH / 2 * int(sizeof(TAcc)) / 4;
        typename op::reg_type d[REGS] = {};
        wg::fence();
        op::template issue_rs<WIDTH, TRANS_B>(d, a, desc);
        wg::commit();
        wg::wait<0>();
#pragma unroll
        for (int r = 0; r < REGS; ++r) out[r] = reinterpret_cast<const unsigned&>(d[r]);
        widths<TA, TB, TAcc, TRANS_B, 2 * WIDTH, MAX>(out + REGS, a, desc);
    }
}
#define EVERY_WIDTH(NAME, TA, TB, TACC, TRANS_B, MAX)                                            \
    extern "C" __global__ void NAME(unsigned* out, const unsigned* a, unsigned long long desc) { \
        widths<TA, TB, TACC, TRANS_B, 8, MAX>(out + 512 * threadIdx.x, a + 4 * threadIdx.x, desc); \
    }
"""
#: (kernel, C++ types, N-major B, widest, SASS name of the instruction at width W)
WIDTH_ROWS = [
    ("f16_f32", "__half, __half, float", False, 256, "HGMMA.64x{}x16.F32"),
    ("f16_f32_n_major_b", "__half, __half, float", True, 256, "HGMMA.64x{}x16.F32"),
    ("f16_f16", "__half, __half, __half", False, 256, "HGMMA.64x{}x16.F16"),
    ("f16_f16_n_major_b", "__half, __half, __half", True, 256, "HGMMA.64x{}x16.F16"),
    ("bf16_f32", "__nv_bfloat16, __nv_bfloat16, float", True, 256, "HGMMA.64x{}x16.F32.BF16"),
] + [  # every pair of 8-bit A and B: fp8 to f32 up to N = 256, integers to s32 up to N = 128
    (f"{a}_{b}", f"{kinds[a]}, {kinds[b]}, {acc}", False, widest, f"{op}.{a.upper()}.{b.upper()}")
    for kinds, acc, widest, op in (
        ({"e4m3": "__nv_fp8_e4m3", "e5m2": "__nv_fp8_e5m2"}, "float", 256, "QGMMA.64x{}x32.F32"),
        ({"s8": "signed char", "u8": "unsigned char"}, "int", 128, "IGMMA.64x{}x32"),
    )
    for a in kinds
    for b in kinds
]


def test_issue_rs_compiles_every_type_and_width():
    from blasdx import compile as cc

    rows = "\n".join(f"EVERY_WIDTH({name}, {types}, {str(trans).lower()}, {widest})"
                      for name, types, trans, widest, _ in WIDTH_ROWS)
    kernel = cc.compile_source(EVERY_WIDTH + rows + "\n", WIDTH_ROWS[0][0], "sm_90a")
    found = functions(kernel.sass())
    for name, _, trans, widest, sass_name in WIDTH_ROWS:
        widths = [8 << i for i in range(widest.bit_length() - 3)]  # 8, 16, ... widest
        for width in widths:
            pattern = re.escape(sass_name.format(width)) + r" R\d+, R\d+, gdesc\[UR\d+\](\.tnspB)?"
            match = re.search(pattern, found[name])
            assert match, f"{name}: no {sass_name.format(width)} with A in registers"
            assert bool(match.group(1)) == trans, f"{name}: B read {'K' if trans else 'N'}-major at {width}"


# ---------------------------------------------------------------------------------------------- compiled code


@pytest.fixture(scope="module")
def transformed() -> dict:
    """{(desc, op, "register_api"): FusedKernel} of every case and A transform, compiled on a thread pool,
    their SASS disassembled together (a cuobjdump run, not one per kernel)."""
    kernels = compile_all([gemm(size, types, arr) for types, arr, size in CASES], names=("register_api",))
    cubins.prefetch_sass(kernel.compiled.cubin for kernel in kernels.values())
    return kernels


@pytest.mark.slow
@pytest.mark.parametrize("op", list(A_OPS))
@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_a_transforms_run_wgmma_with_a_in_registers(transformed, case, op):
    """Every kernel the GPU tests launch: one module per (case, transform) holds all three."""
    types, arr, size = case
    desc = gemm(size, types, arr)
    assert desc.plan.is_wgmma
    kernel = transformed[(desc, op, "register_api")]
    assert kernel.arch == "sm_90a" and kernel.local_memory == 0
    name = opcode(types[0])
    found = functions(kernel.compiled.sass())
    assert sorted(found) == sorted(KERNEL_NAMES)
    width, depth = desc.plan.atom[1:]
    for fn, sass in found.items():
        assert re.search(rf"\b{name}\.64x{width}x{depth}\b", sass), f"{fn} of {desc!r}: no {name}.64x{width}"
        assert register_a_gmma(name).search(sass), f"{fn} of {desc!r}: A not in registers"
        assert not shared_a_gmma(name).search(sass), f"{fn} of {desc!r}: A read from shared memory"
        assert not re.search(r"\b(HMMA|IMMA|QMMA|LDL|STL)\b", sass), f"{fn} of {desc!r}: mma.sync or local memory"


def _compile(desc: bx.Descriptor, a_op: str, b_op: str = "blasdx::identity{}", name: str = "register_api"):
    source = KERNELS.replace("A_OP", a_op).replace("B_OP", b_op)
    return bx.compile_kernel(source, name, {"GEMM": desc})


@pytest.mark.parametrize("types", [(F16, F16, F32), (I8, U8, I32)], ids=["f16", "int8"])
def test_identity_and_conjugate_keep_both_operands_in_shared_memory(types):
    desc = gemm((128, 128, 64), types, (R, C, C))
    name = opcode(types[0])
    for a_op in ("blasdx::identity{}", "blasdx::conjugate{}"):
        for fn, sass in functions(_compile(desc, a_op, a_op).compiled.sass()).items():
            assert shared_a_gmma(name).search(sass) and not register_a_gmma(name).search(sass), (fn, a_op)


@pytest.mark.parametrize("types, mma", [((F16, F16, F32), "HMMA"), ((BF16, BF16, F32), "HMMA"),
                                        ((E4, E5, F32), "HMMA"), ((I8, I8, I32), "IMMA")],
                         ids=["f16", "bf16", "fp8", "int8"])
def test_b_transforms_still_run_mma_sync(types, mma):
    """wgmma reads B only from shared memory, which the GEMM must leave alone: a b_op runs mma.sync
    (fp8 mma.sync runs as HMMA on sm_90), with or without an a_op."""
    desc = gemm((128, 128, 64), types, (R, C, C))
    a_op = a_op_source(types[0], "relu")
    for a in (a_op, "blasdx::identity{}"):
        for fn, sass in functions(_compile(desc, a, "relu{}").compiled.sass()).items():
            assert re.search(rf"\b{mma}\b", sass), (fn, a)
            assert not re.search(r"\b[HQI]GMMA\b|\b(LDL|STL)\b", sass), (fn, a)


def test_next_a_fragment_loads_while_the_last_wgmma_runs():
    """Each K step commits its own wgmma group and waits only for the one before (wait_group 1),
    then loads the next fragment into the other of two register sets: A registers alternate."""
    desc = gemm((64, 64, 64), (F16, F16, F32), (R, C, C))
    sass = functions(_compile(desc, "relu{}").compiled.sass())["register_api"]
    steps = re.findall(r"\bHGMMA\.64x64x16\.F32 R\d+, (R\d+), gdesc\[", sass)
    assert len(steps) == 4, steps
    assert steps[0] == steps[2] and steps[1] == steps[3] and steps[0] != steps[1], steps
    waits = re.findall(r"\bWARPGROUP\.DEPBAR\.LE gsb0, 0x(\d)", sass)
    assert waits == ["1", "1", "1", "0"], waits


def test_register_pressure_of_a_128x128x64_f16_tile():
    """f16 -> f32, 128 x 128 x 64 (two warpgroups, 64 accumulator registers each) with an A
    transform: no spills in any API form, and room under the launch bounds' cap."""
    desc = gemm((128, 128, 64), (F16, F16, F32), (R, C, C))
    cap = min(255, 65536 // desc.max_threads_per_block)  # __launch_bounds__(threads, 1)
    for name in KERNEL_NAMES:
        kernel = _compile(desc, "blasdx::scale<float>{-2.0f}", name=name)
        assert kernel.local_memory == 0, (name, kernel.local_memory)
        assert 64 < kernel.registers <= cap, (name, kernel.registers)
        assert not re.search(r"\b(LDL|STL)\b", functions(kernel.compiled.sass())[name])
