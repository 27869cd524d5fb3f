"""blasdx GEMMs inside Numba-CUDA kernels (CPU): the kernels compile and link with the GEMM inlined on the
tensor cores and no local memory, traits are compile-time constants, and every misuse is a typing error
that names the argument. Skipped without numba-cuda."""

from __future__ import annotations

import numpy as np
import pytest

import blasdx as bx
from blasdx.base import dtypes as dt

from .ltoir_support import link_cases, require_nvjitlink, tensor_opcodes
from .numba_support import (  # skips without numba-cuda
    cc_of,
    compile_kernel,
    numba_cuda,
    opcodes,
    typing_error,
)
from .test_ltoir import TYPES as LTOIR_TYPES

cuda = numba_cuda
types = numba_cuda.types
R, C = bx.row_major, bx.col_major

#: test_ltoir's (A, B, C) but f16 -> f16 (numba_support.compile_kernel cannot yet link its register-API kernels).
TYPES = {name: abc for name, abc in LTOIR_TYPES.items() if name != "f16-f16"}
#: Numba element type of global operands of each blasdx type (bf16 and fp8 as their bits).
GLOBAL = {"float16": types.float16, "bfloat16": types.uint16, "tfloat32": types.float32, "float32": types.float32,
          "float64": types.float64, "float8_e4m3": types.uint8, "float8_e5m2": types.uint8, "int8": types.int8,
          "uint8": types.uint8, "int32": types.int32}


def gemm(a, b, c, sm, size=(64, 64, 64), arrangement=(R, C, C), arch_specific=False, **extra):
    desc = (bx.Size(*size) + bx.Precision(a, b, c) + bx.Function.MM + bx.Arrangement(*arrangement)
            + bx.SM(sm, arch_specific=arch_specific) + bx.Block())
    for op in extra.values():
        desc = desc + op
    return desc


def arrays(desc, c_dtype=None):
    """Numba types of (a, b, c) batches stored densely in the descriptor's arrangement."""
    a, b, c = (GLOBAL[t.name] for t in desc.precision)
    return (types.Array(a, 3, "C"), types.Array(b, 3, "C"), types.Array(c_dtype or c, 3, "C"))


def operand(x, p, row_major):
    """Inside a kernel: problem p of a batch stored densely, as the 2-D matrix the descriptor reads."""


def shared_api_kernel(GEMM):
    ra, rb, rc = (o.name == "row_major" for o in (GEMM.arrangement.a, GEMM.arrangement.b, GEMM.arrangement.c))

    def kernel(a, b, c, alpha, beta):
        sA, sB, sC = GEMM.shared_memory()
        p = cuda.blockIdx.x
        GEMM.load_a(a[p] if ra else a[p].T, sA)
        GEMM.load_b(b[p] if rb else b[p].T, sB)
        GEMM.load_c(c[p] if rc else c[p].T, sC)
        GEMM.copy_wait()
        GEMM.execute(alpha, sA, sB, beta, sC)
        cuda.syncthreads()
        GEMM.store_c(sC, c[p] if rc else c[p].T)

    return kernel


def register_api_kernel(GEMM, positions=False):
    """Accumulate in registers, transform element-wise in Python (doubling every element, or with
    ``positions`` the diagonal only, asking fragment_positions), store with axpby."""
    ra, rb, rc = (o.name == "row_major" for o in (GEMM.arrangement.a, GEMM.arrangement.b, GEMM.arrangement.c))

    mode = {False: 0, True: 1, "index": 2}[positions]  # a constant of the closure: Numba keeps one branch

    def kernel(a, b, c, alpha, beta):
        sA, sB = GEMM.shared_memory_ab()
        p = cuda.blockIdx.x
        GEMM.load_a(a[p] if ra else a[p].T, sA)
        GEMM.load_b(b[p] if rb else b[p].T, sB)
        GEMM.copy_wait()
        acc = GEMM.accumulator()
        GEMM.accumulate(sA, sB, acc)
        if mode == 0:
            for i in range(GEMM.fragment_size):
                acc[i] = acc[i] + acc[i]
        elif mode == 1:
            rows, cols = GEMM.fragment_positions()
            for i in range(GEMM.fragment_size):
                if rows[i] >= 0 and rows[i] == cols[i]:
                    acc[i] = acc[i] + acc[i]
        else:
            for i in range(GEMM.fragment_size):
                if GEMM.fragment_valid(i) and GEMM.fragment_row(i) == GEMM.fragment_col(i):
                    acc[i] = acc[i] + acc[i]
        GEMM.fragment_axpby(alpha, acc, beta, c[p] if rc else c[p].T)

    return kernel


@pytest.mark.slow
@pytest.mark.parametrize("types_, sm, arch_specific",
                         list(link_cases(TYPES, [(80, False), (89, False), (90, False), (90, True)])))
@pytest.mark.parametrize("api", ["shared", "register", "positions"])
def test_kernels_link_with_the_gemm_inlined_on_the_tensor_cores(api, types_, sm, arch_specific):
    desc = gemm(*types_, sm, arch_specific=arch_specific)
    scalar = GLOBAL[desc.scalar_type.name]
    make = {"shared": shared_api_kernel, "register": register_api_kernel,
            "positions": lambda d: register_api_kernel(d, positions=True)}[api]
    cubin, sass, name = compile_kernel(make(desc), (*arrays(desc), scalar, scalar), sm)
    found = opcodes(sass)
    assert found & tensor_opcodes(desc), f"{desc!r} ({desc.instruction}): SASS has {sorted(found)}"
    assert not found & {"STL", "LDL"}, f"{desc!r}: local memory in the kernel"
    assert not any(op.startswith("CALL") for op in found), "the GEMM did not inline into the Numba kernel"
    from blasdx.compile import cubin as _cubin

    assert _cubin.resource_usage(cubin, name).local_memory == 0


def test_per_element_position_queries_stay_in_registers_for_16_bit_inputs():
    """A loop asking fragment_valid / fragment_row / fragment_col per element unrolls for 16-bit inputs
    (wider fragments may exceed the compiler's unroll budget: fragment_positions is the way there)."""
    for types_ in (TYPES["f16-f32"], TYPES["bf16-f32"]):
        desc = gemm(*types_, 80)
        scalar = GLOBAL[desc.scalar_type.name]
        _, sass, _ = compile_kernel(register_api_kernel(desc, positions="index"), (*arrays(desc), scalar, scalar), 80)
        assert not opcodes(sass) & {"STL", "LDL"}


def test_traits_are_compile_time_constants():
    desc = gemm(dt.float16, dt.float16, dt.float32, 80, (32, 32, 32))

    def kernel(out):
        scratch = cuda.local.array(desc.fragment_size, types.float32)  # needs a literal size
        shared = cuda.shared.array(desc.c_size, types.float32)
        for i in range(desc.fragment_size):
            scratch[i] = i
        shared[0] = scratch[desc.fragment_size - 1]
        out[0] = desc.m + desc.n + desc.k + desc.lda + desc.shared_memory_size + desc.shared_memory_size_ab \
            + desc.max_threads_per_block
        out[1] = shared[0] + desc.block_dim[0]

    compile_kernel(kernel, (types.float32[::1],), 80)


def test_two_gemms_in_one_kernel_link():
    first = gemm(dt.float16, dt.float16, dt.float32, 80, (64, 64, 32), (R, C, R))
    second = gemm(dt.float16, dt.float16, dt.float32, 80, (64, 32, 64), (R, R, R))

    def kernel(q, k, v, out):
        sQ, sK, sS = first.shared_memory()
        sP, sV, sO = second.shared_memory(first.shared_memory_size)
        p = cuda.blockIdx.x
        first.load_a(q[p], sQ)
        first.load_b(k[p].T, sK)
        second.load_b(v[p], sV)
        first.copy_wait()
        first.execute(1.0, sQ, sK, 0.0, sS)
        cuda.syncthreads()
        for i in range(cuda.threadIdx.x, 64 * 64, first.max_threads_per_block):
            sP[i // 64, i % 64] = sS[i // 64, i % 64]
        cuda.syncthreads()
        second.execute(1.0, sP, sV, 0.0, sO)
        cuda.syncthreads()
        second.store_c(sO, out[p])

    h = types.Array(types.float16, 3, "C")
    _, sass, _ = compile_kernel(kernel, (h, h, h, types.Array(types.float32, 3, "C")), 80)
    assert "HMMA" in sass


# ---------------------------------------------------------------------------------------------
# misuse is a typing error naming the argument
# ---------------------------------------------------------------------------------------------

F16_GEMM = gemm(dt.float16, dt.float16, dt.float32, 80, (32, 32, 32))
OTHER = gemm(dt.float16, dt.float16, dt.float32, 80, (64, 32, 32))
SIG = (types.Array(types.float16, 3, "C"), types.Array(types.float16, 3, "C"), types.Array(types.float32, 3, "C"))


def test_wrong_dtype_is_named():
    G = F16_GEMM

    def kernel(a, b, c):
        sA, sB, sC = G.shared_memory()
        G.load_a(a[0], sA)

    message = typing_error(kernel, (types.Array(types.float32, 3, "C"), *SIG[1:]))
    assert "GEMM.load_a: g has dtype float32" in message and "float16" in message


def test_wrong_dimensions_and_layout_are_named():
    G = F16_GEMM

    def whole_batch(a, b, c):
        sA, sB, sC = G.shared_memory()
        G.load_a(a, sA)

    assert "GEMM.load_a: g is 3-D" in typing_error(whole_batch, SIG)

    def transposed(a, b, c):
        sA, sB, sC = G.shared_memory()
        G.load_b(b[0], sB)  # B is column-major: a C-contiguous (K, N) matrix is the wrong order

    message = typing_error(transposed, SIG)
    assert "GEMM.load_b: g has layout 'C'" in message and "column-major" in message


def test_local_and_plain_shared_arrays_are_refused_where_the_gemm_needs_its_buffers():
    G = F16_GEMM

    def local(a, b, c):
        sA, sB, sC = G.shared_memory()
        scratch = cuda.local.array(1024, types.float16)
        G.execute(1.0, scratch, sB, 0.0, sC)

    message = typing_error(local, SIG)
    assert "GEMM.execute: sA is a array(float16, 1d, C)" in message and "GEMM.shared_memory()[0]" in message

    def plain_shared(a, b, c):
        sA, sB, sC = G.shared_memory()
        other = cuda.shared.array((32, 32), types.float32)
        G.execute(1.0, sA, sB, 0.0, other)

    assert "GEMM.execute: sC is a array(float32, 2d, C)" in typing_error(plain_shared, SIG)


def test_swapped_buffers_and_another_gemms_buffers_are_named():
    G, H = F16_GEMM, OTHER

    def swapped(a, b, c):
        sA, sB, sC = G.shared_memory()
        G.execute(1.0, sB, sA, 0.0, sC)

    assert "GEMM.execute: sA is the B buffer shared buffer" in typing_error(swapped, SIG)

    def foreign(a, b, c):
        sA, sB, sC = G.shared_memory()
        tA, tB, tC = H.shared_memory(G.shared_memory_size)
        G.execute(1.0, sA, sB, 0.0, tC)

    assert "GEMM.execute: sC is another GEMM's shared buffer" in typing_error(foreign, SIG)

    def foreign_fragment(a, b, c):
        sA, sB, sC = G.shared_memory()
        acc = H.accumulator()
        G.accumulate(sA, sB, acc)

    assert "GEMM.accumulate: acc must be this GEMM's register fragment" in typing_error(foreign_fragment, SIG)


def test_a_descriptor_for_another_sm_is_refused():
    G = gemm(dt.float16, dt.float16, dt.float32, 90, (32, 32, 32))

    def kernel(a, b, c):
        sA, sB, sC = G.shared_memory()

    message = typing_error(kernel, SIG, sm=80)
    assert "built for sm_90 but this kernel compiles for sm_80" in message and "SM(80)" in message


def test_scalars_arguments_and_attributes_are_checked():
    G = F16_GEMM

    def array_alpha(a, b, c):
        sA, sB, sC = G.shared_memory()
        G.execute(c, sA, sB, 0.0, sC)

    assert "GEMM.execute: alpha must be a number" in typing_error(array_alpha, SIG)

    def too_few(a, b, c):
        sA, sB, sC = G.shared_memory()
        G.execute(1.0, sA, sB, sC)

    assert "GEMM.execute: takes (alpha, sA, sB, beta, sC), got 4 arguments" in typing_error(too_few, SIG)

    def keywords(a, b, c):
        sA, sB, sC = G.shared_memory(offset=0)

    assert "GEMM.shared_memory: takes positional arguments only" in typing_error(keywords, SIG)

    def unknown(a, b, c):
        c[0, 0, 0] = G.warp_size

    assert "GEMM has no attribute 'warp_size' inside a kernel" in typing_error(unknown, SIG)

    def readonly_store(a, b, c):
        sA, sB, sC = G.shared_memory()
        G.store_c(sC, a[0])

    assert "GEMM.store_c: g has dtype float16" in typing_error(readonly_store, SIG)


def test_register_api_of_a_gemm_too_large_for_registers_is_refused():
    G = gemm(dt.float64, dt.float64, dt.float64, 80, (128, 128, 32), BlockDim=bx.BlockDim(32))
    if not G.is_supported:
        pytest.skip("not plannable")

    def kernel(a, b, c):
        acc = G.accumulator()

    f64 = types.Array(types.float64, 3, "C")
    assert "register API of" in typing_error(kernel, (f64, f64, f64)) and "would not fit" in typing_error(
        kernel, (f64, f64, f64))


def test_descriptor_without_block_is_refused():
    G = bx.Size(32, 32, 32) + bx.Precision(bx.float16, bx.float16, bx.float32) + bx.Function.MM + bx.SM(80)

    def kernel(a, b, c):
        sA, sB, sC = G.shared_memory()

    assert "is not a block GEMM" in typing_error(kernel, SIG)


def test_numpy_is_untouched_by_the_import():
    assert np.float16 is not None  # importing blasdx.numba changes nothing outside Numba's registries


def test_the_examples_kernels_compile_and_link_for_sm_90a():
    """examples/numba_gemm.py and numba_attention.py (run on the GPU by test_gpu_numba) build without one."""
    import importlib.util
    from pathlib import Path

    folder = Path(__file__).resolve().parent.parent / "examples"

    def load(name):
        spec = importlib.util.spec_from_file_location(name, folder / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module

    h3, f3 = types.Array(types.float16, 3, "C"), types.Array(types.float32, 3, "C")
    example = load("numba_gemm")
    G = (bx.Size(64, 64, 64) + bx.Precision(bx.float16, bx.float16, bx.float32) + bx.Function.MM
         + bx.Arrangement(R, C, R) + bx.MaxAlignment + bx.SM(90) + bx.Block())
    _, sass, _ = compile_kernel(example.make_kernel(G).py_func, (h3, h3, types.float32[::1], h3), 90)
    assert "HMMA" in opcodes(sass) and not opcodes(sass) & {"STL", "LDL"}
    attention = load("numba_attention")
    scores, output = attention.descriptors(64, 64, 90)
    kernel = attention.make_kernel(scores, output, 0.125)
    _, sass, _ = compile_kernel(kernel.py_func, (h3, h3, h3, f3), 90)
    assert "HMMA" in opcodes(sass) and not opcodes(sass) & {"STL", "LDL"}


def _dispatcher_without_a_gpu(monkeypatch, sm: int = 90):
    """Numba's dispatcher compiling for a pretend device of ``sm`` (no driver): compile() types, lowers and
    runs NVVM; the link is left to the test (bind, which loads the module, does nothing)."""
    from numba.cuda import codegen, dispatcher

    class Device:
        compute_capability = divmod(sm, 10)

    monkeypatch.setattr(dispatcher, "get_current_device", lambda: Device())
    monkeypatch.setattr(dispatcher._Kernel, "bind", lambda self: None)
    monkeypatch.setattr(codegen.CUDACodeLibrary, "_ensure_cc", lambda self, cc: cc or cc_of(sm))


def test_a_warm_build_takes_the_linked_cubin_from_the_disk_cache(monkeypatch, tmp_path):
    """The first build links (nvJitLink) and keeps the cubin; a new kernel object of the same function (a new
    number in Numba's names) loads that cubin by its kernel name without linking; another GEMM links anew."""
    from numba.cuda.cudadrv import driver

    from blasdx.compile import cubin as cubins
    from blasdx.compile import ltoir as _ltoir

    if _ltoir.linker_identity() is None:
        pytest.skip("nvJitLink or NVVM is not a wheel: linked cubins are not kept")
    require_nvjitlink()
    monkeypatch.setenv("BLASDX_CACHE_DIR", str(tmp_path))
    _dispatcher_without_a_gpu(monkeypatch)
    G = gemm(dt.float16, dt.float16, dt.float32, 90, arrangement=(R, R, R), arch_specific=True)
    sig = arrays(G)
    links = []
    complete = driver._Linker.complete
    monkeypatch.setattr(driver._Linker, "complete", lambda self: links.append(self) or complete(self))

    def build(desc):
        library = cuda.jit(register_api_kernel(desc)).compile((*sig, types.float32, types.float32))._codelibrary
        return library, bytes(library.get_cubin().code)

    first, cubin = build(G)
    assert len(links) == 1 and len(list(tmp_path.glob("??/*.nvjl"))) == 1
    assert cubins.kernel_names(cubin) == [first._entry_name]
    second, again = build(G)
    assert len(links) == 1, "the warm build linked again"
    assert again == cubin and second._entry_name == first._entry_name
    assert second._cubin_cache  # kept in memory too: a second get_cubin reads nothing
    build(gemm(dt.float16, dt.float16, dt.float32, 90, size=(32, 32, 32), arrangement=(R, R, R),
               arch_specific=True))
    assert len(links) == 2 and len(list(tmp_path.glob("??/*.nvjl"))) == 2
    monkeypatch.setenv("BLASDX_CACHE", "0")
    build(G)
    assert len(links) == 3 and len(list(tmp_path.glob("??/*.nvjl"))) == 2  # no disk cache: linked, nothing kept


def _benchmark():
    """benchmarks/numba_gemm.py as a module."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parent.parent / "benchmarks" / "numba_gemm.py"
    spec = importlib.util.spec_from_file_location("numba_gemm_benchmark", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    return bench


def test_the_benchmark_starts_each_cases_nvmath_task_before_its_blasdx_task():
    """benchmarks/numba_gemm.py: nvmath.device's long builds start first, one for one with blasdx's, in case
    order; no nvmath task for types it lacks."""
    bench = _benchmark()
    cases = [("f16->f32", (64, 64, 64), "compute"), ("bf16->f32", (64, 64, 64), "batched"),
             ("f64", (64, 64, 64), "compute")]
    order = [(t[0], t[3]) for t in bench.schedule(cases, ["blasdx", "nvmath"])]
    assert order == [("f16->f32", "nvmath"), ("f16->f32", "blasdx"), ("bf16->f32", "blasdx"), ("f64", "nvmath"),
                     ("f64", "blasdx")]
    assert [t[3] for t in bench.schedule(cases, ["nvmath"])] == ["nvmath", "nvmath"]


def _global_accesses(sass: str) -> set[str]:
    """The global-memory load and store opcodes of a SASS listing, with their widths (LDGSTS.E.BYPASS...128)."""
    import re

    return set(re.findall(r"\b((?:LDG|STG|LDGSTS)(?:\.[A-Z0-9]+)*)\b", sass))


@pytest.mark.slow
@pytest.mark.parametrize("case, size", [("f16->f32", (64, 64, 64)), ("f16->f32", (128, 128, 128)),
                                        ("f32", (64, 64, 64)), ("f32", (128, 128, 128)), ("f64", (64, 64, 64))])
def test_the_benchmarks_batched_kernels_copy_16_bytes_a_thread_without_bank_conflicting_rows(case, size):
    """benchmarks/numba_gemm.py's batched kernels for sm_90a: A and B come in as 16-byte cp.async (LDGSTS.128)
    and nothing else is loaded from global memory; the documented pattern (execute into sC, store_c) stores C
    as 16-byte STG.128 only; no local memory in either; shared rows are the padded, conflict-free ones (dense
    rows of 64 or 128 f32 put the FMA path's row reads of a quarter warp on the same banks)."""
    bench = _benchmark()
    G = bench.descriptor(case, size, 90, "batched")
    assert G.leading_dimension == G.suggested_leading_dimension
    a, b, c = (GLOBAL[t.name] for t in G.precision)
    sig = (types.Array(a, 3, "C"), types.Array(b, 3, "C"), types.Array(c, 3, "C"), types.int32)
    for kind in ("batched-shared", "batched"):
        _, sass, _ = compile_kernel(bench.blasdx_kernel(G, kind).py_func, sig, 90)
        accesses = _global_accesses(sass)
        loads = {op for op in accesses if op.startswith("LDG")}
        assert loads and all(op.startswith("LDGSTS") and op.endswith(".128") for op in loads), (kind, accesses)
        assert not opcodes(sass) & {"STL", "LDL"}, kind
        if kind == "batched-shared":
            assert {op for op in accesses if op.startswith("STG")} == {"STG.E.128"}, accesses
