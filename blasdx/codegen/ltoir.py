"""The extern "C" entry points of a descriptor: CUDA C++ that NVRTC turns into LTO-IR for other JITs.

A block GEMM called from code that blasdx does not compile (a Numba kernel, a kernel linked
with cuda.core's Linker) needs functions with C names and a plain pointer ABI. For a
descriptor this module writes its GEMM type (the same ``<name>_config`` / ``<name>_traits`` /
``blasdx::Gemm`` as a fused kernel's prelude) and one wrapper per entry point around
kernels/blasdx/entry.cuh. Names carry a digest of the descriptor, so that entry points of
different descriptors never clash in one link.

Every entry point is a ``__device__`` function returning void or int; pointers are generic
(shared or global as each says), scalars travel by value in the descriptor's scalar type,
a complex scalar as two parts (the imaginary part is ignored for real GEMMs).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..base import dtypes as _dt
from ..describe.operators import Block, Function
from ..base.errors import DescriptorError
from ..plan import heuristics as _h
from . import gemm as _gemm

if TYPE_CHECKING:  # pragma: no cover
    from ..describe.descriptor import Descriptor

__all__ = ["ENTRY_POINTS", "REGISTER_ROLES", "EntryPoint", "LtoirSource", "fragment_size", "generate", "symbol_prefix"]

_FP8 = (_dt.float8_e4m3, _dt.float8_e5m2)


@dataclass(frozen=True)
class EntryPoint:
    """One entry point: its role, the C parameters (type, name) and what it does."""

    role: str
    result: str
    params: tuple[tuple[str, str], ...]
    body: str
    doc: str

    def declaration(self, symbol: str) -> str:
        """``extern "C" __device__ <result> <symbol>(<params>)`` (no body)."""
        params = ", ".join(f"{t} {n}" for t, n in self.params) or "void"
        return f'extern "C" __device__ {self.result} {symbol}({params})'


_S = "S"  # placeholder for the scalar type in the tables below
#: The entry points every descriptor gets, in a stable order. ``S`` is the scalar type.
ENTRY_POINTS: tuple[EntryPoint, ...] = (
    EntryPoint("execute", "void",
               ((_S, "alpha_re"), (_S, "alpha_im"), ("const void*", "a"), ("const void*", "b"), (_S, "beta_re"),
                (_S, "beta_im"), ("void*", "c")),
               "blasdx::entry::execute<G>(alpha_re, alpha_im, a, b, beta_re, beta_im, c)",
               "sC = alpha * sA sB + beta * sC (shared memory, the descriptor's layouts)"),
    EntryPoint("slice_shared_memory", "void",
               (("void*", "smem"), ("void**", "a"), ("void**", "b"), ("void**", "c")),
               "blasdx::entry::slice_shared_memory<G>(smem, a, b, c)",
               "*a, *b, *c = sA, sB, sC inside smem (shared_memory_size bytes, 16-byte aligned)"),
    EntryPoint("load_a", "void", (("const void*", "g"), ("void*", "s")), "blasdx::entry::load_a<G>(g, s)",
               "dense global A -> shared A (asynchronous on sm_80+: copy_wait before use)"),
    EntryPoint("load_b", "void", (("const void*", "g"), ("void*", "s")), "blasdx::entry::load_b<G>(g, s)",
               "dense global B -> shared B (asynchronous on sm_80+)"),
    EntryPoint("load_c", "void", (("const void*", "g"), ("void*", "s")), "blasdx::entry::load_c<G>(g, s)",
               "dense global C -> shared C (asynchronous on sm_80+)"),
    EntryPoint("store_c", "void", (("const void*", "s"), ("void*", "g")), "blasdx::entry::store_c<G>(s, g)",
               "shared C -> dense global C (synchronous)"),
    EntryPoint("copy_wait", "void", (), "G::copy_wait()",
               "wait for this thread's copies, then for the block (__syncthreads)"),
    EntryPoint("accumulate", "void", (("const void*", "a"), ("const void*", "b"), ("void*", "fragment")),
               "blasdx::entry::accumulate<G>(a, b, fragment)",
               "fragment += sA sB (the calling thread's accumulator elements)"),
    EntryPoint("fragment_axpby", "void",
               (("const void*", "fragment"), (_S, "alpha_re"), (_S, "alpha_im"), (_S, "beta_re"), (_S, "beta_im"),
                ("void*", "c"), ("int", "ld")),
               "blasdx::entry::fragment_axpby<G>(fragment, alpha_re, alpha_im, beta_re, beta_im, c, ld)",
               "C = alpha * fragment + beta * C in C's arrangement with leading dimension ld"),
    EntryPoint("fragment_row", "int", (("int", "i"),), "return blasdx::entry::fragment_row<G>(i)",
               "row of C that fragment element i holds"),
    EntryPoint("fragment_col", "int", (("int", "i"),), "return blasdx::entry::fragment_col<G>(i)",
               "column of C that fragment element i holds"),
    EntryPoint("fragment_valid", "int", (("int", "i"),), "return blasdx::entry::fragment_valid<G>(i)",
               "1 when fragment element i is an element of C (else padding)"),
    EntryPoint("fragment_positions", "void", (("int*", "rows"), ("int*", "cols")),
               "blasdx::entry::fragment_positions<G>(rows, cols)",
               "rows[i], cols[i] = where fragment element i sits in C (rows[i] = -1: padding)"),
)


#: The roles of the register API: present only where the accumulator fits in registers.
REGISTER_ROLES = frozenset({"accumulate", "fragment_axpby", "fragment_row", "fragment_col", "fragment_valid",
                            "fragment_positions"})


@dataclass(frozen=True)
class LtoirSource:
    """The entry-point source of one descriptor: the text, the C name of each role, the declarations.

    ``fragment_size`` is the number of accumulator values per thread of the register API
    (0 when the accumulator would not fit in registers: then the register roles are absent).
    """

    source: str
    arch: str
    symbols: dict[str, str]
    declarations: str
    fragment_size: int


def fragment_size(desc: Descriptor) -> int:
    """Accumulator values per thread of the register API; 0 when they exceed what registers hold
    (api.cuh MAX_ACCUMULATOR_BYTES), where only the shared-memory API is offered."""
    p = desc._problem_shape()
    total = _h.accumulator_bytes_per_thread(p, desc.plan)
    if total > _h._REGISTER_ACCUMULATOR_BYTES:
        return 0
    return total // _h.accumulator_bytes(p)


def symbol_prefix(desc: Descriptor) -> str:
    """``blasdx_<16 hex digits>``: the digest of the descriptor's repr, which names every operator."""
    return "blasdx_" + hashlib.sha256(repr(desc).encode()).hexdigest()[:16]


def _check(desc: Descriptor) -> None:
    desc.validate()
    if desc.function is not Function.MM:
        raise DescriptorError(f"ltoir: {desc.function!r} has no entry points; only GEMM (Function.MM) has")
    if not desc.has(Block):
        raise DescriptorError(
            f"ltoir: {desc!r} has no Block operator; entry points of a block GEMM called from a kernel need bx.Block()"
        )


def _includes(desc: Descriptor) -> list[str]:
    a, b, _ = desc.precision
    lines = ['#include "blasdx/fp8.cuh"'] if a in _FP8 or b in _FP8 else []
    lines.append('#include "blasdx/api.cuh"')
    lines += _gemm.scheme_includes(desc)
    if desc.plan.is_wgmma:
        lines.append('#include "blasdx/warpgroup_gemm.cuh"')
    lines.append('#include "blasdx/entry.cuh"')
    return lines


def _traits(desc: Descriptor, name: str) -> str:
    """The GEMM type as a fused kernel sees it (``blasdx.fusion.kernel.traits_struct`` writes the same)."""
    al_a, al_b, al_c = desc.alignment
    x, y, z = desc.block_dim
    return "\n".join([
        _gemm.config_struct(desc, f"{name}_config"),
        f"struct {name}_traits : {name}_config {{",
        f"    static constexpr int alignment_a = {al_a}, alignment_b = {al_b}, alignment_c = {al_c};  // bytes",
        f"    static constexpr int block_dim_x = {x}, block_dim_y = {y}, block_dim_z = {z};",
        "};",
        f"using {name} = blasdx::Gemm<{name}_traits>;",
        (f'static_assert({name}::shared_memory_size == {desc.shared_memory_size}, "blasdx: shared memory layout '
         'differs between Python and C++");'),
    ])


def generate(desc: Descriptor) -> LtoirSource:
    """The entry-point source of a validated block-GEMM descriptor (deterministic)."""
    _check(desc)
    prefix = symbol_prefix(desc)
    scalar = desc.scalar_type.cpp
    gemm = f"{prefix}_gemm"
    size = fragment_size(desc)
    entries = [e for e in ENTRY_POINTS if size or e.role not in REGISTER_ROLES]
    symbols = {entry.role: f"{prefix}_{entry.role}" for entry in entries}
    wrappers, declarations = [], []
    for entry in entries:
        params = tuple((scalar if t == _S else t, n) for t, n in entry.params)
        concrete = EntryPoint(entry.role, entry.result, params, entry.body, entry.doc)
        head = concrete.declaration(symbols[entry.role])
        body = entry.body.replace("<G>", f"<{gemm}>").replace("G::", f"{gemm}::")
        wrappers += [f"// {entry.doc}", f"{head} {{ {body}; }}"]
        declarations += [f"// {entry.doc}", f"{head};"]
    source = "\n".join([
        "// Generated by blasdx: extern \"C\" entry points of one block GEMM, for LTO-IR.",
        f"//   {desc!r}",
        *_includes(desc),
        "",
        _traits(desc, gemm),
        *([(f'static_assert({gemm}::accumulator::size == {size}, "blasdx: fragment size differs between Python '
             'and C++");')] if size else []),
        "",
        *wrappers,
        "",
    ])
    return LtoirSource(source=source, arch=desc.arch, symbols=symbols, declarations="\n".join(declarations) + "\n",
                       fragment_size=size)
