"""Descriptor -> CUDA C++: a short generated prelude that instantiates the templates in kernels/.

The prelude is a ``struct`` of compile-time constants (sizes, types, orders, tiling and
copy widths resolved by the heuristics) followed by the include of the kernel entry point.
The same descriptor always gives the same text, which makes the text a sound cache key.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..base import dtypes as _dt
from ..plan import heuristics as _h

if TYPE_CHECKING:  # pragma: no cover
    from ..describe.descriptor import Descriptor

__all__ = ["GeneratedSource", "KERNEL_NAME", "generate", "config_struct", "atom_type", "scheme_includes"]

#: The ``extern "C"`` name of the batched block-GEMM entry point (kernels/batched_gemm.cu).
KERNEL_NAME = "blasdx_batched_gemm"

_FP8 = (_dt.float8_e4m3, _dt.float8_e5m2)


@dataclass(frozen=True)
class GeneratedSource:
    """CUDA C++ for one descriptor, the kernel to look up in it and the target architecture."""

    source: str
    kernel_name: str
    arch: str


def _cpp(dtype: _dt.DType, is_complex: bool) -> str:
    return f"blasdx::complex<{dtype.cpp}>" if is_complex else dtype.cpp


def atom_type(instruction: str, a: _dt.DType, b: _dt.DType, accumulator: _dt.DType, scheme: str = "native") -> str:
    """The kernels/blasdx/mma.cuh atom that issues ``instruction`` for these types and ``scheme``
    (blasdx.engine.emulation): "3xtf32" is kernels/blasdx/mma_3xtf32.cuh's, "tf32" reads float32 as tf32."""
    shape = instruction.rsplit(".", 1)[-1]
    if scheme == "3xtf32":
        return "blasdx::mma_m16n8k8_3xtf32"
    if a == _dt.tfloat32 or scheme == "tf32":
        return f"blasdx::mma_{shape}<blasdx::tf32, blasdx::tf32, float>"
    return f"blasdx::mma_{shape}<{a.cpp}, {b.cpp}, {accumulator.cpp}>"


def _bool(value: bool) -> str:
    return "true" if value else "false"


def config_struct(desc: Descriptor, name: str = "blasdx_config") -> str:
    """The ``struct name { ... };`` of compile-time constants that BlockGemm is built from."""
    plan = desc.plan
    warp = plan.warp_level or plan  # what BlockGemm runs: mma.sync or FMA (wgmma plans: transforms of B, A fragments)
    p = desc._problem_shape()
    a, b, c = desc.precision
    cplx = desc.is_complex
    sa, sb, sc = desc.element_sizes
    lda, ldb, ldc = desc.leading_dimension
    al_a, al_b, al_c = desc.alignment
    smem_lda, smem_ldb = plan.smem_a.leading_dimension, plan.smem_b.leading_dimension
    staged = plan.smem_c or plan.smem_c_over_ab
    smem_ldc = staged.leading_dimension if staged else p.c_inner
    conj_a, conj_b = desc.conjugate
    lines = [
        f"struct {name} {{",
        f"    using a_type = {_cpp(a, cplx)};",
        f"    using b_type = {_cpp(b, cplx)};",
        f"    using c_type = {_cpp(c, cplx)};",
        f"    using accumulator_type = {desc.accumulator_type.cpp};",
        f"    using scalar_type = {desc.scalar_type.cpp};",
        f"    static constexpr bool is_complex = {_bool(cplx)};",
        f"    static constexpr bool conj_a = {_bool(conj_a)}, conj_b = {_bool(conj_b)};",
        f"    static constexpr int m = {p.m}, n = {p.n}, k = {p.k};",
        f"    static constexpr bool a_row_major = {_bool(p.a_row_major)}, b_row_major = {_bool(p.b_row_major)}, "
        f"c_row_major = {_bool(p.c_row_major)};",
        "    // leading dimensions in global memory (the descriptor's) and in shared memory (padded)",
        f"    static constexpr int lda = {lda}, ldb = {ldb}, ldc = {ldc};",
        f"    static constexpr int smem_lda = {smem_lda}, smem_ldb = {smem_ldb};",
        f"    static constexpr int a_outer = {p.a_outer}, a_inner = {p.a_inner}, "
        f"b_outer = {p.b_outer}, b_inner = {p.b_inner};",
        f"    static constexpr int smem_b_offset = {plan.smem_b_offset};  // bytes",
        f"    static constexpr int copy_bytes_a = {_h.vector_bytes(al_a, sa, p.a_inner, lda, smem_lda)}, "
        f"copy_bytes_b = {_h.vector_bytes(al_b, sb, p.b_inner, ldb, smem_ldb)};",
        "    // C staged in shared memory for coalesced stores (when beta == 0)",
        f"    static constexpr bool stage_c = {_bool(plan.smem_c is not None)};",
        f"    static constexpr int smem_c_offset = {plan.smem_c_offset}, smem_ldc = {smem_ldc}, "
        f"c_outer = {p.c_outer}, c_inner = {p.c_inner};",
        f"    static constexpr int copy_bytes_c = {_h.vector_bytes(al_c, sc, p.c_inner, ldc, smem_ldc)};",
        "    // or, when it is not, staged over the consumed A and B (offset 0) from a register accumulator",
        f"    static constexpr bool stage_c_over_ab = {_bool(plan.smem_c_over_ab is not None)};",
        "    static constexpr bool aligned_smem = true;  // sA, sB start on 16-byte boundaries",
        f"    static constexpr int threads = {desc.max_threads_per_block};",
        f"    static constexpr int min_blocks_per_sm = {plan.min_blocks};  // __launch_bounds__, see heuristics",
        f"    static constexpr bool use_mma = {_bool(warp.is_mma)};  // {warp.instruction}",
    ]
    if warp.is_mma:
        lines += [
            f"    using atom = {atom_type(warp.instruction, a, b, desc.accumulator_type, desc.scheme.name)};"
            f"  // {desc.scheme}",
            f"    static constexpr int warp_m = {warp.warp_tile[0]}, warp_n = {warp.warp_tile[1]};  // atoms per warp",
            f"    static constexpr int k_unroll = {warp.k_unroll};  // K steps per pass of the K loop",
            "    static constexpr int thread_m = 1, thread_n = 1;",
        ]
        if warp.dmma_transposed:
            lines.append("    static constexpr bool dmma_transposed = true;  // each DMMA on C^T = B^T A^T (tile_order)")
        if warp.dmma_k4:
            lines.append("    static constexpr bool dmma_k4 = true;  // each K step as two m16n8k4")
    else:
        lines += [
            "    static constexpr int warp_m = 1, warp_n = 1;",
            f"    static constexpr int thread_m = {warp.thread_tile[0]}, thread_n = {warp.thread_tile[1]};"
            "  // outputs per thread",
        ]
    lines += [
        "    // batched kernel: consecutive problems per block, each with its own A/B buffer (their copies overlap)",
        f"    static constexpr int stages = {plan.stages}, stage_bytes = {plan.stage_bytes};",
        f"    static constexpr int k_chunk = {plan.k_chunk or p.k};  // batched kernel: K per copy group, "
        "multiplied as each lands",
    ]
    lines += _wgmma_lines(plan)
    pa, pb = plan.batched_panels
    lines += [
        "    // batched kernel: A and B copied into swizzled panels (read with ldmatrix) instead of padded rows",
        f"    static constexpr bool batched_panels = {_bool(pa > 0)};",
    ]
    if pa:
        lines.append(f"    static constexpr int a_panel_bytes = {pa}, b_panel_bytes = {pb};  // panel widths")
    lines.append("};")
    return "\n".join(lines)


def _wgmma_lines(plan: _h.KernelPlan) -> list[str]:
    """Whether the batched kernel multiplies with wgmma, and its warpgroup tile and panels."""
    if not plan.is_wgmma:
        return ["    static constexpr bool use_wgmma = false;"]
    return [
        f"    // {plan.instruction} from swizzled shared-memory panels (warpgroup_gemm.cuh), batched and fused",
        "    static constexpr bool use_wgmma = true;",
        f"    static constexpr int wgmma_n = {plan.warpgroup_n};  // columns of C per 64-row warpgroup tile",
        f"    static constexpr int a_panel_bytes = {plan.smem_a.swizzle_bytes}, "
        f"b_panel_bytes = {plan.smem_b.swizzle_bytes};  // swizzle widths",
    ]


def scheme_includes(desc: Descriptor) -> list[str]:
    """The headers a descriptor's product scheme needs besides mma.cuh (3xtf32: its atom)."""
    if desc.scheme.name == "3xtf32" and desc.plan.is_mma:
        return ['#include "blasdx/mma_3xtf32.cuh"']
    return []


def generate(desc: Descriptor) -> GeneratedSource:
    """The batched block-GEMM kernel of a validated descriptor (blasdx.codegen.sources dispatches TRSM elsewhere)."""
    desc.validate()
    a, b, _ = desc.precision
    includes = []
    if a in _FP8 or b in _FP8:
        includes.append('#include "blasdx/fp8.cuh"')
    includes += ['#include "blasdx/types.cuh"', '#include "blasdx/mma.cuh"']
    includes += scheme_includes(desc)
    source = "\n".join(
        [
            "// Generated by blasdx for:",
            f"//   {desc!r}",
            f"#define BLASDX_COMPLEX {int(desc.is_complex)}",
            *includes,
            "",
            config_struct(desc),
            "",
            '#include "batched_gemm.cu"',
            "",
        ]
    )
    return GeneratedSource(source=source, kernel_name=KERNEL_NAME, arch=desc.arch)
