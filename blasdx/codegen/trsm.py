"""TRSM descriptor -> CUDA C++: the generated config of trsm.cuh's BlockTrsm and the batched kernel.

The config holds the solve's compile-time constants and one ``update<P>`` struct per panel
that has equations after it: the BlockGemm config of that panel's update GEMM, planned by
the GEMM engine's rules (blasdx.plan.trsm). The batched kernel's output may have another
order and leading dimension than B (``bx.solve_triangular`` writes a new C-contiguous
array); the device API ignores those fields.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

from ..describe.operators import Diag, FillMode, Side, row_major
from ..plan import heuristics as _h
from ..plan.trsm import UpdateStep
from . import gemm as _codegen

if TYPE_CHECKING:  # pragma: no cover
    from ..describe.trsm import TrsmDescriptor

__all__ = ["KERNEL_NAME", "OutputLayout", "config_struct", "generate", "traits_struct"]

#: The ``extern "C"`` name of the batched TRSM entry point (kernels/batched_trsm.cu).
KERNEL_NAME = "blasdx_batched_trsm"


class OutputLayout(NamedTuple):
    """Where the batched kernel writes X: its order, leading dimension and pointer alignment (bytes)."""

    row_major: bool
    ld: int
    alignment: int


def _bool(value: bool) -> str:
    return "true" if value else "false"


def default_output(desc: TrsmDescriptor) -> OutputLayout:
    """X written over B: B's order, leading dimension and alignment."""
    return OutputLayout(desc.arrangement.b is row_major, desc.ldb, desc.alignment[1])


def config_struct(desc: TrsmDescriptor, name: str = "blasdx_trsm_config", out: OutputLayout | None = None) -> str:
    """``struct name { ... };`` plus its ``update<P>`` specialisations."""
    plan = desc.plan
    out = out or default_output(desc)
    scalar = desc.scalar_type
    value = f"blasdx::complex<{scalar.cpp}>" if desc.is_complex else scalar.cpp
    size, _ = desc.element_sizes
    m, n = desc.size
    dim = desc.a_dim[0]
    a_row, b_row = desc.arrangement.a is row_major, desc.arrangement.b is row_major
    b_inner = n if b_row else m
    lda, ldb = desc.leading_dimension
    al_a, al_b = desc.alignment
    smem_lda, smem_ldb = plan.smem_a.leading_dimension, plan.smem_b.leading_dimension
    copy_out = _h.vector_bytes(out.alignment, size, b_inner, smem_ldb, out.ld) if out.row_major == b_row else size
    lines = [
        f"struct {name} {{",
        f"    using value_type = {value};  // A and B elements, and the compute type",
        f"    using scalar_type = {scalar.cpp};  // one part of alpha",
        f"    static constexpr bool is_complex = {_bool(desc.is_complex)};",
        f"    static constexpr int m = {m}, n = {n};  // B is m x n, A is {dim} x {dim}",
        f"    static constexpr bool left = {_bool(desc.side is Side.left)}, lower = "
        f"{_bool(desc.fill_mode is FillMode.lower)}, unit_diagonal = {_bool(desc.diag is Diag.unit)};",
        f"    static constexpr bool a_row_major = {_bool(a_row)}, b_row_major = {_bool(b_row)};",
        "    // leading dimensions in global memory and in the device API's shared memory (the descriptor's)",
        f"    static constexpr int lda = {lda}, ldb = {ldb};",
        "    // the batched kernel's shared memory (padded)",
        f"    static constexpr int smem_lda = {smem_lda}, smem_ldb = {smem_ldb};",
        f"    static constexpr int copy_bytes_a = {_h.vector_bytes(al_a, size, dim, lda, smem_lda)}, "
        f"copy_bytes_b = {_h.vector_bytes(al_b, size, b_inner, ldb, smem_ldb)};",
        f"    static constexpr int panel = {plan.panel};  // unknowns solved by substitution between updates",
        f"    static constexpr int group_threads = {plan.group_threads}, batches = {plan.batches}, "
        f"threads = {desc.max_threads_per_block};",
        "    // bytes from the start of dynamic shared memory: reciprocals of the diagonal, A's, B's",
        f"    static constexpr int smem_inv_offset = {plan.inv_offset}, smem_a_offset = {plan.a_offset}, "
        f"smem_a_stride = {plan.a_stride}, smem_b_offset = {plan.b_offset}, smem_b_stride = {plan.b_stride};",
        "    // where the batched kernel writes X",
        f"    static constexpr bool out_row_major = {_bool(out.row_major)};",
        f"    static constexpr int ldo = {out.ld}, copy_bytes_out = {copy_out};",
        "    template <int P> struct update;  // the block GEMM after panel P",
        "};",
    ]
    for step in plan.updates:
        lines += _update_struct(desc, name, step)
    return "\n".join(lines)


def _update_struct(desc: TrsmDescriptor, name: str, p: UpdateStep) -> list[str]:
    """``template <> struct name::update<P>``: a BlockGemm config (block_gemm.cuh) of one update."""
    gemm = p.gemm
    scalar = desc.scalar_type
    a_row, b_row = desc.arrangement.a is row_major, desc.arrangement.b is row_major
    if desc.side is not Side.left:
        a_row, b_row = b_row, a_row
    lines = [
        f"template <> struct {name}::update<{p.index}> {{  // {p.m} x {p.n} x {p.pb}, {gemm.instruction}",
        f"    using a_type = {name}::value_type;",
        "    using b_type = a_type;",
        "    using c_type = a_type;",
        f"    using accumulator_type = {scalar.cpp};",
        f"    using scalar_type = {scalar.cpp};",
        f"    static constexpr bool is_complex = {_bool(desc.is_complex)}, conj_a = false, conj_b = false;",
        f"    static constexpr int m = {p.m}, n = {p.n}, k = {p.pb};",
        f"    static constexpr bool a_row_major = {_bool(a_row)}, b_row_major = {_bool(b_row)}, c_row_major = true;",
        f"    static constexpr int threads = {desc.plan.group_threads};",
        f"    static constexpr int p0 = {p.p0}, pb = {p.pb}, r0 = {p.r0}, rn = {p.rn};  // panel and trailing range",
        f"    static constexpr bool use_mma = {_bool(gemm.is_mma)};",
    ]
    if gemm.is_mma:
        lines += [
            f"    using atom = {_codegen.atom_type(gemm.instruction, scalar, scalar, scalar)};",
            f"    static constexpr int warp_m = {gemm.warp_tile[0]}, warp_n = {gemm.warp_tile[1]};",
            f"    static constexpr int k_unroll = {gemm.k_unroll};  // K steps per pass of the K loop",
            "    static constexpr int thread_m = 1, thread_n = 1;",
        ]
    else:
        lines += [
            "    static constexpr int warp_m = 1, warp_n = 1;",
            f"    static constexpr int thread_m = {gemm.thread_tile[0]}, thread_n = {gemm.thread_tile[1]};",
        ]
    lines.append("};")
    return lines


def _header(desc: TrsmDescriptor) -> list[str]:
    return [f"#define BLASDX_COMPLEX {int(desc.is_complex)}", '#include "blasdx/types.cuh"',
            '#include "blasdx/mma.cuh"']


def generate(desc: TrsmDescriptor, out: OutputLayout | None = None) -> _codegen.GeneratedSource:
    """The batched TRSM kernel of a validated descriptor, writing X in ``out``'s layout (default: over B)."""
    desc.validate()
    source = "\n".join(
        [
            "// Generated by blasdx for:",
            f"//   {desc!r}",
            *_header(desc),
            "",
            config_struct(desc, out=out),
            "",
            '#include "batched_trsm.cu"',
            "",
        ]
    )
    return _codegen.GeneratedSource(source=source, kernel_name=KERNEL_NAME, arch=desc.arch)


def traits_struct(desc: TrsmDescriptor, name: str) -> str:
    """``struct <name>_config``, ``struct <name>_traits`` and ``using <name> = blasdx::Trsm<...>`` (fusion)."""
    al_a, al_b = desc.alignment
    x, y, z = desc.block_dim
    return "\n".join(
        [
            config_struct(desc, f"{name}_config"),
            f"struct {name}_traits : {name}_config {{",
            f"    static constexpr int alignment_a = {al_a}, alignment_b = {al_b};  // bytes",
            f"    static constexpr int block_dim_x = {x}, block_dim_y = {y}, block_dim_z = {z};",
            "};",
            f"using {name} = blasdx::Trsm<{name}_traits>;",
            f'static_assert({name}::shared_memory_size == {desc.shared_memory_size}, "blasdx: {name}\'s shared '
            'memory layout differs between Python and C++");',
        ]
    )
