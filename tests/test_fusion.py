"""blasdx.fusion.kernel: generated text, compiling user kernels with one and two GEMMs, errors, arguments, header (CPU).

Everything here compiles for an explicit architecture with NVRTC and needs no GPU; the
CuPy round trip of ``bx.header`` runs where CuPy and a GPU are present.
"""

from __future__ import annotations

import importlib.util
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

import blasdx as bx
from blasdx import arrays
from blasdx.launch import devices
from blasdx.arrays import streams
from blasdx import compile as cc
from blasdx.base import dtypes as dt
from blasdx.fusion import kernel as fusion
from blasdx.base.errors import CompileError, DescriptorError, ExecutionError

from . import fusion_kernels

R, C = bx.row_major, bx.col_major
EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def gemm(size=(32, 32, 32), precision=(bx.float16, bx.float16, bx.float32), *extra, sm=90, block=True,
         complex_=False):
    desc = bx.Size(*size) + bx.Precision(*precision) + bx.Function.MM + bx.SM(sm)
    desc = desc + (bx.Type.complex if complex_ else bx.Type.real)
    for op in extra:
        desc = desc + op
    return desc + bx.Block() if block else desc


# ---------------------------------------------------------------------------------------------
# the kernels every type is compiled with (here) and run with (tests/test_gpu_fusion.py)
# ---------------------------------------------------------------------------------------------

#: Register API and shared-memory API over global matrices stored tightly (tests/fusion_kernels.py);
#: A_OP / B_OP are the load transforms of a case.
TYPE_KERNELS = fusion_kernels.source("register_api", "shared_api")


def type_ops(row: dt.Combination) -> tuple[str, str]:
    """(A_OP, B_OP) of a type case: A doubled (exact) unless integers could overflow, B conjugated."""
    a_op = "blasdx::identity{}" if row.a.integral else "blasdx::scale<GEMM::scalar_type>{2}"
    return a_op, "blasdx::conjugate{}"


def type_source(row: dt.Combination) -> str:
    """TYPE_KERNELS with the row's load transforms."""
    a_op, b_op = type_ops(row)
    return TYPE_KERNELS.replace("A_OP", a_op).replace("B_OP", b_op)


def type_descriptor(row: dt.Combination, sm: int, shape: str) -> bx.Descriptor:
    """``"full"``: 64^3 with padded shared-memory rows and 16-byte alignment; ``"odd"``: 33 x 17 x 40, tight."""
    kind = bx.Type.complex if row.is_complex else bx.Type.real
    base = bx.Precision(row.a, row.b, row.c) + kind + bx.Function.MM + bx.SM(sm) + bx.Block()
    if shape == "odd":
        return base + bx.Size(33, 17, 40) + bx.Arrangement(C, R, R)
    desc = base + bx.Size(64, 64, 64) + bx.Arrangement(R, C, C) + bx.MaxAlignment
    return desc + bx.LeadingDimension(*desc.suggested_leading_dimension)


def type_cases(sm: int) -> list[tuple[dt.Combination, str]]:
    """(combination, shape) for every combination this SM runs."""
    return [(row, shape) for row in dt.COMBINATIONS if row.min_sm <= sm for shape in ("full", "odd")]


def case_id(case: tuple[dt.Combination, str]) -> str:
    row, shape = case
    return f"{'c' if row.is_complex else ''}{row.a.name}x{row.b.name}-{row.c.name}-{shape}"


def compile_type_kernels(cases, sm: int) -> dict:
    """{case: (register kernel, shared kernel)}, compiled on a thread pool (one source holds both)."""
    def build(case):
        row, shape = case
        desc = type_descriptor(row, sm, shape)
        source = type_source(row)
        return case, tuple(bx.compile_kernel(source, name, {"GEMM": desc}) for name in ("register_api", "shared_api"))

    first = build(cases[0])  # cuda.core's lazy imports are not thread-safe: warm them up first
    with ThreadPoolExecutor(8) as pool:
        return dict([first, *pool.map(build, cases[1:])])


# ---------------------------------------------------------------------------------------------
# generated text
# ---------------------------------------------------------------------------------------------


def test_fused_source_puts_each_gemm_in_scope_then_numbers_the_users_lines():
    desc = gemm()
    text = fusion.fused_source("int user_line_one;\n", {"GEMM": desc, "G2": gemm((16, 16, 16))})
    for name in ("GEMM", "G2"):
        assert f"struct {name}_config {{" in text
        assert f"struct {name}_traits : {name}_config {{" in text
        assert f"using {name} = blasdx::Gemm<{name}_traits>;" in text
        assert f"static_assert({name}::shared_memory_size ==" in text
    assert '#include "blasdx/api.cuh"' in text and "fp8.cuh" not in text
    assert text.endswith('#line 1 "user_source"\nint user_line_one;\n')
    assert "alignment_a = 2, alignment_b = 2, alignment_c = 4" in text
    assert f"block_dim_x = {desc.block_dim[0]}, block_dim_y = 1, block_dim_z = 1" in text


def test_fp8_header_only_when_a_gemm_uses_fp8():
    fp8 = gemm((32, 32, 32), (bx.float8_e4m3, bx.float8_e5m2, bx.float32))
    assert '#include "blasdx/fp8.cuh"' in fusion.prelude({"F": fp8})
    assert "fp8.cuh" not in fusion.prelude({"G": gemm()})


def test_single_descriptor_is_named_gemm():
    assert "using GEMM = blasdx::Gemm<GEMM_traits>;" in fusion.prelude(gemm())


# ---------------------------------------------------------------------------------------------
# compiling
# ---------------------------------------------------------------------------------------------

ONE_GEMM = r"""
// C = alpha * A * B + beta * C with the shared-memory API, C staged in shared memory
extern "C" __global__ void one_gemm(const __half* a, const __half* b, float* c, float alpha, float beta) {
    extern __shared__ __align__(16) unsigned char smem[];
    auto [sA, sB, sC] = GEMM::slice_shared_memory(smem);
    GEMM::load_a(a, sA);
    GEMM::load_b(b, sB);
    GEMM::load_c(c, sC);
    GEMM::copy_wait();
    GEMM::execute(alpha, sA, sB, beta, sC);
    __syncthreads();
    GEMM::store_c(sC, c);
}
"""

# Two chained GEMMs: E = (A B) D, the first product handed to the second through shared memory.
TWO_GEMMS = r"""
extern "C" __global__ void two_gemms(const __half* a, const __half* b, const __half* d, float* e) {
    extern __shared__ __align__(16) unsigned char smem[];
    auto [sA, sB] = FIRST::slice_shared_memory_ab(smem);
    auto [sAB, sD] = SECOND::slice_shared_memory_ab(smem + FIRST::shared_memory_size_ab + 16);
    FIRST::load_a(a, sA);
    FIRST::load_b(b, sB);
    SECOND::load_b(d, sD);
    FIRST::copy_wait();
    auto ab = FIRST::execute(sA, sB);
    ab.store(sAB, SECOND::lda);  // rounded to __half: A of the second GEMM
    __syncthreads();
    auto out = SECOND::execute(sAB, sD);
    out.transform([](float v) { return v > 0.0f ? v : 0.0f; });
    out.store(e);
}
"""


def two_gemms(sm=90):
    first = gemm((32, 48, 16), (bx.float16, bx.float16, bx.float32), bx.Arrangement(R, C, R), sm=sm)
    second = gemm((32, 24, 48), (bx.float16, bx.float16, bx.float32), bx.Arrangement(R, R, R),
                  bx.BlockDim(first.block_dim[0]), sm=sm)
    return {"FIRST": first, "SECOND": second}


@pytest.mark.parametrize("sm", [80, 90])
def test_compile_kernel_with_one_gemm(sm):
    desc = gemm((64, 64, 32), (bx.float16, bx.float16, bx.float32), bx.MaxAlignment, sm=sm)
    kernel = bx.compile_kernel(ONE_GEMM, "one_gemm", {"GEMM": desc})
    assert isinstance(kernel, bx.FusedKernel)
    assert kernel.name == "one_gemm" and kernel.arch == f"sm_{sm}"
    assert "one_gemm" in cc.kernel_names(kernel.compiled.cubin)
    assert kernel.local_memory == 0 and kernel.registers > 0
    assert kernel.block == desc.block_dim
    assert kernel.shared_memory == desc.shared_memory_size
    assert [(p.name, p.pointer, p.type_name) for p in kernel.params] == [
        ("a", True, "float16"), ("b", True, "float16"), ("c", True, "float32"), ("alpha", False, "float32"),
        ("beta", False, "float32"),
    ]
    assert kernel.user_source == ONE_GEMM and kernel.source.endswith(ONE_GEMM)


def test_compile_kernel_with_two_chained_gemms():
    gemms = two_gemms()
    kernel = bx.compile_kernel(TWO_GEMMS, "two_gemms", gemms)
    assert kernel.local_memory == 0
    assert kernel.block == gemms["FIRST"].block_dim
    assert kernel.shared_memory == sum(-(-g.shared_memory_size // 16) * 16 for g in gemms.values())
    assert list(kernel.gemms) == ["FIRST", "SECOND"]


def test_second_compile_is_a_cache_hit(monkeypatch, tmp_path):
    monkeypatch.setenv("BLASDX_CACHE_DIR", str(tmp_path))
    source = ONE_GEMM + f"\n// {tmp_path.name}\n"  # new to this process and to the disk cache
    first = bx.compile_kernel(source, "one_gemm", gemm())
    calls = cc.stats.nvrtc_calls
    again = bx.compile_kernel(source, "one_gemm", {"GEMM": gemm()})
    assert cc.stats.nvrtc_calls == calls and again.compiled is first.compiled
    changed = bx.compile_kernel(source + "// one more line\n", "one_gemm", {"GEMM": gemm()})
    assert cc.stats.nvrtc_calls == calls + 1  # the user source is part of the key
    assert changed.compiled is not first.compiled


def test_options_reach_the_compiler():
    source = "#ifndef TILE\n#error TILE missing\n#endif\n" + ONE_GEMM
    kernel = bx.compile_kernel(source, "one_gemm", {"GEMM": gemm()}, options=bx.CompileOptions(defines={"TILE": 4}))
    assert kernel.local_memory == 0


# ---------------------------------------------------------------------------------------------
# errors
# ---------------------------------------------------------------------------------------------


def test_error_in_user_source_points_at_the_users_line():
    source = 'extern "C" __global__ void broken(float* x) {\n    float y = 1.0f;\n\n    x[0] = undefined_name + y;\n}\n'
    with pytest.raises(CompileError, match=r'user_source:4: identifier "undefined_name" is undefined') as info:
        bx.compile_kernel(source, "broken", {"GEMM": gemm()})
    assert "    4 |     x[0] = undefined_name + y;" in str(info.value)
    assert "user_source(4)" in info.value.log
    assert info.value.source.endswith(source)


def test_error_inside_blasdx_names_the_users_line():
    too_big = gemm((128, 128, 64), (bx.float32, bx.float32, bx.float32), bx.BlockDim(32))
    source = (
        'extern "C" __global__ void big(float* c) {\n'
        "    extern __shared__ __align__(16) unsigned char smem[];\n"
        "    auto [sA, sB] = GEMM::slice_shared_memory_ab(smem);\n"
        "    auto acc = GEMM::execute(sA, sB);\n"
        "    acc.store(c);\n"
        "}\n"
    )
    with pytest.raises(CompileError, match=r"does not fit in registers[\s\S]*required from user_source:4") as info:
        bx.compile_kernel(source, "big", {"GEMM": too_big})
    assert "auto acc = GEMM::execute(sA, sB);" in str(info.value)


def test_missing_kernel_is_a_compile_error():
    with pytest.raises(CompileError, match=r"'nowhere' is not in the cubin"):
        bx.compile_kernel(ONE_GEMM, "nowhere", {"GEMM": gemm()})


@pytest.mark.parametrize(
    "gemms,error,match",
    [
        ([], TypeError, r"gemms: expected a mapping"),
        ({}, ValueError, r"gemms: no descriptor given"),
        ({"2x": gemm()}, ValueError, r"gemms: '2x' is not a C\+\+ identifier"),
        ({"int": gemm()}, ValueError, r"gemms: 'int' is not a C\+\+ identifier"),
        ({"blasdx_gemm": gemm()}, ValueError, r"'blasdx_gemm' is reserved"),
        ({"G": "desc"}, TypeError, r"gemms\['G'\]: expected a blasdx Descriptor or DeviceGemm, got str"),
        ({"G": gemm(block=False)}, DescriptorError, r"gemms\['G'\]: .* has no Block operator"),
        ({"G": gemm((8, 8, 8), sm=80), "H": gemm()}, DescriptorError,
         r"different architectures \(G: sm_80, H: sm_90\)"),
        ({"G": gemm((64, 64, 64)), "H": gemm((8, 8, 8))}, DescriptorError, r"different block shapes"),
        ({"G": gemm(), "G_config": gemm()}, ValueError, r"'G_config' clashes with a generated struct name"),
    ],
)
def test_gemms_are_checked(gemms, error, match):
    with pytest.raises(error, match=match):
        bx.compile_kernel(ONE_GEMM, "one_gemm", gemms)


def test_incomplete_descriptor_is_rejected():
    with pytest.raises(DescriptorError, match="missing SM"):
        bx.compile_kernel(ONE_GEMM, "one_gemm", {"G": bx.Size(8, 8, 8) + bx.Function.MM + bx.Block()})


def test_explicit_block_settles_disagreeing_block_dims():
    big, small = gemm((64, 64, 64)), gemm((8, 8, 8))
    threads = max(big.max_threads_per_block, small.max_threads_per_block)
    kernel = bx.compile_kernel(ONE_GEMM.replace("GEMM", "BIG"), "one_gemm", {"BIG": big, "SMALL": small},
                               block=(threads, 1))
    assert kernel.block == (threads, 1, 1)


def test_the_kernel_is_compiled_for_its_block_and_again_for_larger_launches(monkeypatch, tmp_path):
    """The compile promises compile_kernel's block (no thread checks in GEMMs on all of its threads);
    a launch with more threads takes a second compile without the promise, made once."""
    monkeypatch.setenv("BLASDX_CACHE_DIR", str(tmp_path))
    desc = gemm((32, 32, 32), (bx.float16, bx.float16, bx.float32), bx.MaxAlignment)
    threads = desc.max_threads_per_block
    kernel = bx.compile_kernel(ONE_GEMM, "one_gemm", desc)
    assert f"\n#define BLASDX_BLOCK_THREADS {threads}\n" in kernel.source
    assert kernel.compiled_for((threads, 1, 1)) is kernel.compiled
    assert kernel.compiled_for((threads // 2, 2, 1)) is kernel.compiled
    calls = cc.stats.nvrtc_calls
    larger = kernel.compiled_for((threads + 32, 1, 1))
    assert larger is not kernel.compiled and "BLASDX_BLOCK_THREADS" not in larger.source
    assert larger.source.endswith(ONE_GEMM) and larger.local_memory == 0
    assert kernel.compiled_for((threads, 2, 1)) is larger and cc.stats.nvrtc_calls == calls + 1
    wide = bx.compile_kernel(ONE_GEMM, "one_gemm", desc, block=threads + 64)
    assert f"\n#define BLASDX_BLOCK_THREADS {threads + 64}\n" in wide.source
    assert "BLASDX_BLOCK_THREADS" not in bx.header(desc).text  # other front ends promise nothing


@pytest.mark.parametrize(
    "block,match",
    [
        (16, r"block: \(16, 1, 1\) is 16 threads but GEMM runs on"),
        ((1024, 2), r"block: \(1024, 2, 1\) is 2048 threads; a block holds at most 1024"),
        ((0,), r"block: \(0,\) is not an int or a tuple of 1 to 3 positive ints"),
        ("x", r"block: 'x' is not an int"),
    ],
)
def test_bad_block(block, match):
    with pytest.raises(ValueError, match=match):
        bx.compile_kernel(ONE_GEMM, "one_gemm", {"GEMM": gemm()}, block=block)


def test_bad_arguments_of_compile_kernel():
    with pytest.raises(TypeError, match="source: expected CUDA C\\+\\+ as str"):
        bx.compile_kernel(b"bytes", "k", gemm())
    with pytest.raises(ValueError, match="kernel_name="):
        bx.compile_kernel(ONE_GEMM, "not a name", gemm())
    with pytest.raises(TypeError, match="options: expected blasdx CompileOptions"):
        bx.compile_kernel(ONE_GEMM, "one_gemm", gemm(), options={"std": "c++17"})
    with pytest.raises(ValueError, match="shared_memory: -1 is not a byte count"):
        bx.compile_kernel(ONE_GEMM, "one_gemm", gemm(), shared_memory=-1)


# ---------------------------------------------------------------------------------------------
# the parameter list
# ---------------------------------------------------------------------------------------------


def test_parse_signature_reads_types_of_every_kind():
    gemms = {"GEMM": gemm(complex_=True, precision=(bx.float32, bx.float32, bx.float32))}
    source = """
    __device__ float helper(float x);  // not the kernel
    /* extern "C" __global__ void k(int commented_out) */
    extern "C" __global__ void __launch_bounds__(256, 2)
    k(const float* __restrict__ a, __half *b, GEMM::c_value_type* c, GEMM::scalar_value_type alpha,
      GEMM::scalar_type s, unsigned int n, long long stride, bool flag, double d, blasdx::complex<double> z,
      const void* raw, MyStruct opaque, __nv_bfloat16 h, int8_t small, size_t count, float arr[]) {}
    """
    params = fusion.parse_signature(source, "k", gemms)
    got = [(p.name, p.pointer, p.const, p.type_name) for p in params]
    assert got == [
        ("a", True, True, "float32"), ("b", True, False, "float16"), ("c", True, False, "complex64"),
        ("alpha", False, False, "complex64"), ("s", False, False, "float32"), ("n", False, False, "uint32"),
        ("stride", False, False, "int64"), ("flag", False, False, "bool"), ("d", False, False, "float64"),
        ("z", False, False, "complex128"), ("raw", True, True, "unknown type"),
        ("opaque", False, False, "unknown type"), ("h", False, False, "bfloat16"), ("small", False, False, "int8"),
        ("count", False, False, "uint64"), ("arr", True, False, "float32"),
    ]


def test_parse_signature_without_kernel_or_parameters():
    assert fusion.parse_signature('extern "C" __global__ void k() {}', "k") == ()
    assert fusion.parse_signature('extern "C" __global__ void k(void) {}', "k") == ()
    assert fusion.parse_signature("__device__ void k(int x) {}", "k") is None
    assert fusion.parse_signature("", "k") is None


# ---------------------------------------------------------------------------------------------
# arguments (fake device arrays, no GPU)
# ---------------------------------------------------------------------------------------------

PTR = 0x7F10_0000_0000


class Fake:
    """A device array: __cuda_array_interface__ over a fake pointer."""

    def __init__(self, shape, dtype, ptr=PTR, readonly=False):
        self.__cuda_array_interface__ = {
            "shape": tuple(shape), "typestr": np.dtype(dtype).str, "data": (ptr, readonly), "strides": None,
            "version": 3, "stream": None,
        }


@pytest.fixture
def fake_driver(monkeypatch):
    monkeypatch.setattr(devices, "pointer_device_id", lambda ptr, argument="array": 0)


ARGS_KERNEL = r"""
extern "C" __global__ void args(const __half* a, float* c, float alpha, int n, bool flag, __nv_bfloat16 h,
                                GEMM::scalar_value_type z) {}
"""


@pytest.fixture(scope="module")
def args_kernel():
    desc = gemm(complex_=True, precision=(bx.float32, bx.float32, bx.float32))
    return bx.compile_kernel(ARGS_KERNEL, "args", {"GEMM": desc})


def test_arguments_become_the_parameter_types(fake_driver, args_kernel):
    values, views = args_kernel.arguments(
        (Fake((4,), np.float16), Fake((4,), np.float32, PTR + 4096), 1.5, 7, True, 0.5, 1 - 2j)
    )
    a, c, alpha, n, flag, h, z = values
    assert (a, c) == (PTR, PTR + 4096) and len(views) == 2
    assert type(alpha) is np.float32 and alpha == 1.5
    assert type(n) is np.int32 and n == 7
    assert type(flag) is np.bool_ and flag
    assert type(h) is np.uint16 and h == 0x3F00  # bfloat16 0.5, as its bits
    assert type(z) is np.complex64 and z == 1 - 2j
    assert args_kernel.arguments((None, 12345, np.float64(2), np.int64(3), False, 1, 2))[0][:2] == (0, 12345)


@pytest.mark.parametrize(
    "index,value,match",
    [
        (0, Fake((4,), np.float32), r"args\[0\] \(a\): dtype float32 does not match parameter `const __half\* a`"),
        (1, Fake((4,), np.float32, readonly=True), r"args\[1\] \(c\): the array is read-only"),
        (1, 2.0, r"args\[1\] \(c\): 2.0 is a scalar but parameter `float\* c` is a pointer"),
        (2, Fake((4,), np.float32), r"args\[2\] \(alpha\): an array was given but parameter `float alpha`"),
        (2, "1.0", r"args\[2\] \(alpha\): '1.0' \(str\) is not a number"),
        (2, 1e39, r"args\[2\] \(alpha\): 1e\+39 overflows float32"),
        (2, 1j, r"args\[2\] \(alpha\): 1j is complex but parameter `float alpha` is real"),
        (3, 2.5, r"args\[3\] \(n\): 2.5 is not an integer; parameter `int n` takes a int32"),
        (3, 2**31, r"args\[3\] \(n\): 2147483648 does not fit in int32"),
        (3, True, r"args\[3\] \(n\): True is a bool"),
        (4, 1, r"args\[4\] \(flag\): 1 is not a bool"),
    ],
)
def test_bad_arguments(fake_driver, args_kernel, index, value, match):
    good = [Fake((4,), np.float16), Fake((4,), np.float32, PTR + 4096), 1.5, 7, True, 0.5, 1j]
    good[index] = value
    with pytest.raises(ExecutionError, match=match):
        args_kernel.arguments(tuple(good))


def test_argument_count_is_checked(args_kernel):
    with pytest.raises(ExecutionError, match=r"args: args takes 7 parameters \(`const __half\* a`, .*\) but 2"):
        args_kernel.arguments((1, 2))


def test_unreadable_signature_takes_numpy_scalars_only(fake_driver):
    source = '#define KERNEL(name) extern "C" __global__ void name(float* x, float y)\nKERNEL(hidden) {}\n'
    kernel = bx.compile_kernel(source, "hidden", gemm())
    assert kernel.params is None
    values, _ = kernel.arguments((Fake((2,), np.float32), np.float32(2)))
    assert values == (PTR, np.float32(2))
    with pytest.raises(ExecutionError, match=r"could not read hidden's parameter list .* pass numpy scalars"):
        kernel.arguments((Fake((2,), np.float32), 2.0))


# ---------------------------------------------------------------------------------------------
# every type compiles with both APIs and the load transforms
# ---------------------------------------------------------------------------------------------

CASES_90 = type_cases(90)


@pytest.fixture(scope="module")
def type_kernels():
    return compile_type_kernels(CASES_90, 90)


@pytest.mark.parametrize("case", CASES_90, ids=case_id)
def test_every_type_compiles_with_both_apis(type_kernels, case):
    for kernel in type_kernels[case]:
        assert kernel.local_memory == 0, f"{kernel.name} spills for {case_id(case)}"


# ---------------------------------------------------------------------------------------------
# the examples' kernels
# ---------------------------------------------------------------------------------------------


def load_example(name: str):
    """Import examples/<name>.py as a module."""
    spec = importlib.util.spec_from_file_location(f"blasdx_example_{name}", EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(
    "example,args",
    [
        ("fused_mlp", {}),
        ("fused_attention", {"seq": 128, "head_dim": 64}),
        ("fused_attention", {"seq": 128, "head_dim": 128}),
        ("fused_attention", {"seq": 100, "head_dim": 64}),
        ("complex_gemm", {}),
    ],
)
def test_example_kernels_compile(example, args):
    kernel = load_example(example).build(90, **args)
    assert kernel.local_memory == 0
    assert kernel.shared_memory <= 227 * 1024


# ---------------------------------------------------------------------------------------------
# header() for other NVRTC front ends
# ---------------------------------------------------------------------------------------------


def test_header_text_and_include_path():
    desc = gemm((32, 32, 32), (bx.float16, bx.float16, bx.float32), bx.MaxAlignment)
    hdr = bx.header(desc)
    assert isinstance(hdr, bx.FusionHeader)
    assert "using GEMM = blasdx::Gemm<GEMM_traits>;" in hdr.text and str(hdr) == hdr.text
    assert "#line" not in hdr.text
    assert hdr.include_dirs[0] == str(cc.kernels_dir())
    assert all(Path(d).is_dir() for d in hdr.include_dirs)
    assert hdr.options == tuple(f"-I{d}" for d in hdr.include_dirs)
    assert hdr.arch == "sm_90"
    assert "using MINE = " in bx.header(desc, name="MINE").text
    assert "using A = " in bx.header({"A": desc, "B": desc}).text


def test_header_compiles_with_blasdx_nvrtc_as_plain_source():
    """The header text plus a kernel is a complete program (what another front end compiles)."""
    hdr = bx.header(gemm())
    compiled = cc.compile_source(hdr.text + ONE_GEMM, "one_gemm", "sm_90")
    assert compiled.local_memory == 0


def test_header_round_trip_through_cupy():
    cp = pytest.importorskip("cupy")
    from .gpu_support import gpu_sm

    sm = gpu_sm()
    if sm is None:
        pytest.skip("CuPy compiles for the current GPU; there is none")
    desc = gemm((32, 32, 32), (bx.float16, bx.float16, bx.float32), bx.Arrangement(R, R, R), sm=sm)
    hdr = bx.header(desc)
    module = cp.RawModule(code=hdr.text + ONE_GEMM, options=hdr.options)
    kernel = module.get_function("one_gemm")
    rng = np.random.default_rng(1)
    a_h = rng.standard_normal((32, 32)).astype(np.float16)
    b_h = rng.standard_normal((32, 32)).astype(np.float16)
    c_h = rng.standard_normal((32, 32)).astype(np.float32)
    a, b, c = cp.asarray(a_h), cp.asarray(b_h), cp.asarray(c_h)
    threads = desc.max_threads_per_block
    kernel((1,), (threads,), (a, b, c, np.float32(2.0), np.float32(-1.0)), shared_mem=desc.shared_memory_size)
    expected = 2.0 * a_h.astype(np.float64) @ b_h.astype(np.float64) - c_h
    np.testing.assert_allclose(cp.asnumpy(c), expected, rtol=1e-4, atol=1e-4)


# ---------------------------------------------------------------------------------------------
# the documented example
# ---------------------------------------------------------------------------------------------

DOCS = Path(__file__).resolve().parent.parent / "docs" / "device_api.md"


def docs_example() -> str:
    """The complete example of docs/device_api.md (its first python block)."""
    text = DOCS.read_text()
    start = text.index("```python", text.index("## A complete example")) + len("```python")
    return text[start : text.index("```", start)]


def test_docs_example_compiles():
    code = docs_example()
    head = code[code.index("SOURCE = "): code.index("batch = 1000")]  # the kernel and its descriptor
    namespace = {"bx": bx}
    exec(head, namespace)
    kernel = namespace["kernel"]
    assert kernel.local_memory == 0 and kernel.block == (128, 1, 1)
    assert [p.type_name for p in kernel.params] == ["float16", "float16", "float32", "float16", "int32"]
