"""The Numba side of a blasdx GEMM: its Numba types and the typing of its methods inside ``@cuda.jit`` kernels.

A descriptor used in a kernel (as a global or a closure variable) types as :class:`GemmType`.
Its traits (``m``, ``a_size``, ``shared_memory_size``, ``fragment_size`` ...) type as integer
literals, so they are compile-time constants; its methods (``shared_memory``, ``load_a``,
``execute``, ``accumulate`` ...) are typed here, where every misuse becomes a
``TypingError`` that names the method and the argument: a wrong dtype, a wrong number of
dimensions, a global or local array where this GEMM's shared buffer is needed, a fragment of
another GEMM, a descriptor built for another SM than the kernel's.

Shared buffers are :class:`SharedBuffer` arrays (made by ``GEMM.shared_memory()``) and register
fragments :class:`Fragment` arrays (made by ``GEMM.accumulator()``): Numba arrays whose type
also says which GEMM and which operand they belong to, since a plain Numba array type does
not tell shared memory from local or global memory. Lowering lives in
:mod:`blasdx.fusion.numba_lowering`. Both register in Numba-CUDA's builtin registries, which
its target contexts load on every refresh (importing the modules is all it takes).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any

from numba.cuda import types
from numba.cuda.core import errors
from numba.cuda.datamodel.models import ArrayModel, OpaqueModel
from numba.cuda.extending import infer_getattr, register_model, typeof_impl
from numba.cuda.typing.templates import AbstractTemplate, AttributeTemplate, signature

from ..base import dtypes as _dt
from ..codegen import ltoir as _ltoir_codegen
from ..describe.descriptor import Descriptor
from ..describe.operators import Block, Function

__all__ = [
    "CONSTANTS",
    "METHODS",
    "Fragment",
    "GemmInfo",
    "GemmType",
    "SharedBuffer",
    "global_dtypes",
    "numba_dtype",
]

#: blasdx type -> the Numba element type of shared buffers and fragments.
_ELEMENT = {
    "float16": types.float16, "bfloat16": types.bfloat16, "tfloat32": types.float32, "float32": types.float32,
    "float64": types.float64, "float8_e4m3": types.uint8, "float8_e5m2": types.uint8, "int8": types.int8,
    "uint8": types.uint8, "int32": types.int32, "complex64": types.complex64, "complex128": types.complex128,
}
#: blasdx type -> the Numba element types a global array of it may have (bf16 and fp8 as their bits too).
_GLOBAL = {
    "bfloat16": (types.bfloat16, types.uint16, types.int16),
    "float8_e4m3": (types.uint8, types.int8),
    "float8_e5m2": (types.uint8, types.int8),
}


def numba_dtype(value: _dt.DType) -> Any:
    """The Numba type of ``value``'s elements in shared memory and fragments; TypingError when there is none."""
    found = _ELEMENT.get(value.name)
    if found is None:
        raise errors.TypingError(
            f"blasdx: {value.name} has no Numba element type; the Numba bridge supports "
            f"{', '.join(sorted(_ELEMENT))}"
        )
    return found


def global_dtypes(value: _dt.DType) -> tuple[Any, ...]:
    """The Numba element types a global array of ``value`` may have."""
    return _GLOBAL.get(value.name, (numba_dtype(value),))


@dataclass(frozen=True)
class GemmInfo:
    """What typing and lowering need to know of one descriptor, computed once (no NVRTC)."""

    desc: Descriptor

    @cached_property
    def prefix(self) -> str:
        return _ltoir_codegen.symbol_prefix(self.desc)

    @cached_property
    def fragment_size(self) -> int:
        return _ltoir_codegen.fragment_size(self.desc)

    @cached_property
    def swizzled(self) -> bool:
        return self.desc.plan.is_wgmma

    @cached_property
    def dtypes(self) -> dict[str, Any]:
        a, b, c = (self.desc.a_value_type, self.desc.b_value_type, self.desc.c_value_type)
        return {"a": numba_dtype(a), "b": numba_dtype(b), "c": numba_dtype(c),
                "fragment": numba_dtype(_dt.complex_of(self.desc.accumulator_type) if self.desc.is_complex
                                        else self.desc.accumulator_type)}

    @cached_property
    def scalar(self) -> Any:
        return numba_dtype(self.desc.scalar_type)

    def row_major(self, role: str) -> bool:
        return getattr(self.desc.arrangement, role).name == "row_major"

    def shape(self, role: str) -> tuple[int, int]:
        return {"a": self.desc.a_dim, "b": self.desc.b_dim, "c": self.desc.c_dim}[role]

    def ld(self, role: str) -> int:
        return {"a": self.desc.lda, "b": self.desc.ldb, "c": self.desc.ldc}[role]

    def buffer_type(self, role: str) -> SharedBuffer:
        """The Numba type of shared buffer ``role``: 2-D in the descriptor's layout, 1-D panels when swizzled."""
        if role != "c" and self.swizzled:
            return SharedBuffer(self, role, self.dtypes[role], 1, "C")
        rows, cols = self.shape(role)
        row_major, ld = self.row_major(role), self.ld(role)
        dense = ld == (cols if row_major else rows)
        layout = ("C" if row_major else "F") if dense else "A"
        return SharedBuffer(self, role, self.dtypes[role], 2, layout)


class GemmType(types.Type):
    """The Numba type of a blasdx block-GEMM descriptor (one type per descriptor)."""

    def __init__(self, desc: Descriptor) -> None:
        self.info = GemmInfo(desc)
        super().__init__(name=f"blasdx.Gemm[{self.info.prefix}]")

    @property
    def desc(self) -> Descriptor:
        return self.info.desc

    @property
    def key(self) -> Any:
        return ("blasdx.Gemm", self.desc)


class SharedBuffer(types.Array):
    """A Numba array in shared memory that is operand ``role`` ("a", "b", "c") of one GEMM."""

    def __init__(self, info: GemmInfo, role: str, dtype: Any, ndim: int, layout: str) -> None:
        self.info, self.role = info, role
        super().__init__(dtype, ndim, layout,
                         name=f"blasdx.shared_{role}[{info.prefix}]({dtype}, {ndim}d, {layout})")

    @property
    def key(self) -> Any:
        return ("blasdx.shared", self.info.desc, self.role, self.dtype, self.ndim, self.layout)

    @property
    def mangling_args(self) -> Any:
        return self.__class__.__name__, [self.info.prefix, self.role, self.dtype, self.ndim, self.layout]

    def copy(self, dtype=None, ndim=None, layout=None, readonly=None):
        """Views (slices, reshapes) of a shared buffer are plain arrays: only the whole buffer is this GEMM's."""
        return types.Array(dtype or self.dtype, ndim or self.ndim, layout or self.layout,
                           readonly=bool(readonly))


class Fragment(types.Array):
    """A per-thread register fragment of one GEMM (``GEMM.accumulator()``): fragment_size values."""

    def __init__(self, info: GemmInfo) -> None:
        self.info = info
        super().__init__(info.dtypes["fragment"], 1, "C", name=f"blasdx.fragment[{info.prefix}]")

    @property
    def key(self) -> Any:
        return ("blasdx.fragment", self.info.desc)

    @property
    def mangling_args(self) -> Any:
        return self.__class__.__name__, [self.info.prefix]

    def copy(self, dtype=None, ndim=None, layout=None, readonly=None):
        return types.Array(dtype or self.dtype, ndim or self.ndim, layout or self.layout, readonly=bool(readonly))


register_model(GemmType)(OpaqueModel)
register_model(SharedBuffer)(ArrayModel)
register_model(Fragment)(ArrayModel)


@typeof_impl.register(Descriptor)
def _typeof_descriptor(value: Descriptor, context: Any) -> GemmType:
    return GemmType(value)


# ---------------------------------------------------------------------------------------------
# checks shared by the methods
# ---------------------------------------------------------------------------------------------


def _fail(method: str, message: str) -> None:
    raise errors.TypingError(f"GEMM.{method}: {message}")


def _check_target(gemm: GemmType, method: str) -> None:
    """The descriptor's SM must be the kernel's (read from the compile in progress, when there is one)."""
    from numba.cuda.core import targetconfig

    flags = targetconfig.ConfigStack().top_or_none()
    cc = getattr(flags, "compute_capability", None) if flags is not None else None
    if not cc:
        return
    sm = 10 * int(cc[0]) + int(cc[1])
    if sm != gemm.desc.sm:
        _fail(method, f"{gemm.desc!r} is built for sm_{gemm.desc.sm} but this kernel compiles for sm_{sm}; "
                      f"give the descriptor SM({sm}) (one descriptor per architecture)")


def _check_buffer(gemm: GemmType, method: str, name: str, value: Any, role: str) -> None:
    """``value`` must be this GEMM's shared buffer ``role``."""
    if isinstance(value, SharedBuffer) and value.info.desc == gemm.desc and value.role == role:
        return
    made = f"GEMM.shared_memory()[{'abc'.index(role)}]" + (f" or GEMM.shared_memory_ab()[{'ab'.index(role)}]"
                                                            if role != "c" else "")
    if isinstance(value, SharedBuffer):
        other = "another GEMM's" if value.info.desc != gemm.desc else f"the {value.role.upper()} buffer"
        _fail(method, f"{name} is {other} shared buffer ({value}); pass this GEMM's {role.upper()} buffer, {made}")
    if isinstance(value, types.Array):
        _fail(method, f"{name} is a {value} that blasdx cannot place (a global, local or cuda.shared array); the "
                      f"GEMM reads and writes shared memory in its own layout: pass {made}")
    _fail(method, f"{name} must be this GEMM's shared {role.upper()} buffer ({made}), got {value}")


def _check_global(gemm: GemmType, method: str, name: str, value: Any, role: str) -> None:
    """``value`` must be a dense 2-D array of ``role``'s elements in the descriptor's arrangement."""
    info = gemm.info
    allowed = global_dtypes({"a": gemm.desc.a_value_type, "b": gemm.desc.b_value_type,
                             "c": gemm.desc.c_value_type}[role])
    rows, cols = info.shape(role)
    order = "row-major" if info.row_major(role) else "column-major"
    if not isinstance(value, types.Array) or isinstance(value, Fragment):
        _fail(method, f"{name} must be a 2-D device array of {rows}x{cols} {role.upper()} elements, got {value}")
    if value.dtype not in allowed:
        _fail(method, f"{name} has dtype {value.dtype}; {role.upper()} of {gemm.desc!r} holds "
                      f"{' or '.join(str(t) for t in allowed)}")
    if value.ndim != 2:
        _fail(method, f"{name} is {value.ndim}-D; pass one {rows}x{cols} matrix, e.g. a[batch_index]")
    need = "C" if info.row_major(role) else "F"
    if value.layout != need:
        _fail(method, f"{name} has layout {value.layout!r}; {role.upper()} is {order} in the descriptor, so the "
                      f"copy needs a dense {order} matrix (layout {need!r}"
                      f"{'' if need == 'C' else ', e.g. the transpose of a C-contiguous (cols, rows) array'})")


def _check_scalar(gemm: GemmType, method: str, name: str, value: Any) -> None:
    if not isinstance(value, (types.Integer, types.Float, types.Complex, types.Boolean)):
        _fail(method, f"{name} must be a number (it becomes the GEMM's {gemm.desc.scalar_type.name} scalar), "
                      f"got {value}")
    if isinstance(value, types.Complex) and not gemm.desc.is_complex:
        _fail(method, f"{name} is complex but {gemm.desc!r} is real")


def _check_fragment(gemm: GemmType, method: str, name: str, value: Any) -> None:
    if gemm.info.fragment_size == 0:
        _fail(method, f"the register API of {gemm.desc!r} would not fit in registers; use the shared-memory "
                      "GEMM.execute(alpha, sA, sB, beta, sC), or give the descriptor more threads (BlockDim)")
    if isinstance(value, Fragment) and value.info.desc == gemm.desc:
        return
    what = "another GEMM's fragment" if isinstance(value, Fragment) else str(value)
    _fail(method, f"{name} must be this GEMM's register fragment (GEMM.accumulator()), got {what}")


def _arity(method: str, args: tuple, count: int, names: str) -> None:
    if len(args) != count:
        _fail(method, f"takes ({names}), got {len(args)} argument{'s' if len(args) != 1 else ''}")


def _no_keywords(method: str, kws: dict) -> None:
    if kws:
        _fail(method, f"takes positional arguments only, got {', '.join(sorted(kws))}=")


# ---------------------------------------------------------------------------------------------
# the methods: (GemmType, args) -> signature, raising TypingError on misuse
# ---------------------------------------------------------------------------------------------


def _shared(method: str, roles: str) -> Any:
    def typer(gemm: GemmType, args: tuple) -> Any:
        if len(args) > 1:
            _fail(method, f"takes (offset=0), got {len(args)} arguments")
        if args and not isinstance(args[0], types.Integer):
            _fail(method, f"offset is the byte offset into dynamic shared memory (an int), got {args[0]}")
        if args and isinstance(args[0], types.IntegerLiteral) and args[0].literal_value % 16:
            _fail(method, f"offset={args[0].literal_value} is not a multiple of 16 bytes; the buffers start "
                          "on 16-byte boundaries (round it up, and launch with that much more)")
        return signature(types.Tuple([gemm.info.buffer_type(r) for r in roles]), *args)

    return typer


def _copy(role: str, to_shared: bool) -> Any:
    method = f"{'load' if to_shared else 'store'}_{role}"

    def typer(gemm: GemmType, args: tuple) -> Any:
        names = "g, s" if to_shared else "s, g"
        _arity(method, args, 2, names)
        g, s = (args[0], args[1]) if to_shared else (args[1], args[0])
        _check_global(gemm, method, "g", g, role)
        _check_buffer(gemm, method, "s", s, role)
        if not to_shared and not g.mutable:
            _fail(method, "g is read-only; the store writes it")
        return signature(types.void, *args)

    return typer


def _copy_wait(gemm: GemmType, args: tuple) -> Any:
    _arity("copy_wait", args, 0, "")
    return signature(types.void)


def _execute(gemm: GemmType, args: tuple) -> Any:
    _arity("execute", args, 5, "alpha, sA, sB, beta, sC")
    alpha, a, b, beta, c = args
    _check_scalar(gemm, "execute", "alpha", alpha)
    _check_buffer(gemm, "execute", "sA", a, "a")
    _check_buffer(gemm, "execute", "sB", b, "b")
    _check_scalar(gemm, "execute", "beta", beta)
    _check_buffer(gemm, "execute", "sC", c, "c")
    return signature(types.void, *args)


def _accumulator(gemm: GemmType, args: tuple) -> Any:
    _arity("accumulator", args, 0, "")
    _check_fragment(gemm, "accumulator", "", Fragment(gemm.info))
    return signature(Fragment(gemm.info))


def _accumulate(gemm: GemmType, args: tuple) -> Any:
    _arity("accumulate", args, 3, "sA, sB, acc")
    a, b, acc = args
    _check_buffer(gemm, "accumulate", "sA", a, "a")
    _check_buffer(gemm, "accumulate", "sB", b, "b")
    _check_fragment(gemm, "accumulate", "acc", acc)
    return signature(types.void, *args)


def _fragment_index(method: str) -> Any:
    def typer(gemm: GemmType, args: tuple) -> Any:
        _arity(method, args, 1, "i")
        _check_fragment(gemm, method, "", Fragment(gemm.info))
        if not isinstance(args[0], types.Integer):
            _fail(method, f"i is an element index of the fragment (an int), got {args[0]}")
        return signature(types.boolean if method == "fragment_valid" else types.int32, *args)

    return typer


def _fragment_positions(gemm: GemmType, args: tuple) -> Any:
    _arity("fragment_positions", args, 0, "")
    _check_fragment(gemm, "fragment_positions", "", Fragment(gemm.info))
    positions = types.Array(types.int32, 1, "C")
    return signature(types.UniTuple(positions, 2))


def _fragment_axpby(gemm: GemmType, args: tuple) -> Any:
    _arity("fragment_axpby", args, 4, "alpha, acc, beta, c")
    alpha, acc, beta, c = args
    _check_scalar(gemm, "fragment_axpby", "alpha", alpha)
    _check_fragment(gemm, "fragment_axpby", "acc", acc)
    _check_scalar(gemm, "fragment_axpby", "beta", beta)
    if not (isinstance(c, SharedBuffer) and c.info.desc == gemm.desc and c.role == "c"):
        _check_global(gemm, "fragment_axpby", "c", c, "c")
    if not c.mutable:
        _fail("fragment_axpby", "c is read-only; the store writes it")
    return signature(types.void, *args)


#: method name -> typer(gemm, args) -> signature
METHODS = {
    "shared_memory": _shared("shared_memory", "abc"),
    "shared_memory_ab": _shared("shared_memory_ab", "ab"),
    "load_a": _copy("a", True),
    "load_b": _copy("b", True),
    "load_c": _copy("c", True),
    "store_c": _copy("c", False),
    "copy_wait": _copy_wait,
    "execute": _execute,
    "accumulator": _accumulator,
    "accumulate": _accumulate,
    "fragment_row": _fragment_index("fragment_row"),
    "fragment_col": _fragment_index("fragment_col"),
    "fragment_valid": _fragment_index("fragment_valid"),
    "fragment_positions": _fragment_positions,
    "fragment_axpby": _fragment_axpby,
}

#: trait -> its value for a descriptor (compile-time integer constants inside a kernel)
CONSTANTS = {
    "m": lambda info: info.desc.m,
    "n": lambda info: info.desc.n,
    "k": lambda info: info.desc.k,
    "lda": lambda info: info.desc.lda,
    "ldb": lambda info: info.desc.ldb,
    "ldc": lambda info: info.desc.ldc,
    "a_size": lambda info: info.desc.a_size,
    "b_size": lambda info: info.desc.b_size,
    "c_size": lambda info: info.desc.c_size,
    "shared_memory_size": lambda info: info.desc.shared_memory_size,
    "shared_memory_size_ab": lambda info: info.desc.shared_memory_size_ab,
    "max_threads_per_block": lambda info: info.desc.max_threads_per_block,
    "fragment_size": lambda info: info.fragment_size,
}


def _method_template(name: str) -> type:
    typer = METHODS[name]

    class Method(AbstractTemplate):
        key = f"blasdx.Gemm.{name}"

        def generic(self, args: tuple, kws: dict) -> Any:
            _no_keywords(name, kws)
            _check_target(self.this, name)
            if not self.this.desc.has(Block) or self.this.desc.function is not Function.MM:
                _fail(name, f"{self.this.desc!r} is not a block GEMM (Function.MM + Block()) and cannot run in a kernel")
            return typer(self.this, tuple(args)).replace(recvr=self.this)

    Method.__name__ = f"Gemm_{name}"
    return Method


_TEMPLATES = {name: _method_template(name) for name in METHODS}


@infer_getattr
class GemmAttributes(AttributeTemplate):
    """Traits (integer literals) and methods of a GEMM inside a kernel."""

    key = GemmType

    def generic_resolve(self, gemm: GemmType, attr: str) -> Any:
        if attr in CONSTANTS:
            return types.IntegerLiteral(int(CONSTANTS[attr](gemm.info)))
        if attr == "block_dim":
            return types.UniTuple(types.intp, 3)
        if attr in _TEMPLATES:
            return types.BoundFunction(_TEMPLATES[attr], gemm)
        known = ", ".join(sorted([*CONSTANTS, "block_dim", *METHODS]))
        raise errors.TypingError(f"GEMM has no attribute {attr!r} inside a kernel; it has {known}")
