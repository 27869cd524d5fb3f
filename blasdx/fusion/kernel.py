"""Fusion: compile your own CUDA C++ kernels with blasdx GEMM types in scope, and launch them.

:func:`compile_kernel` puts, before your source, for each descriptor you name::

    struct GEMM_config { ... };                 // codegen.config_struct: sizes, types, tiling
    struct GEMM_traits : GEMM_config { ... };   // alignments and block shape of the device API
    using GEMM = blasdx::Gemm<GEMM_traits>;     // kernels/blasdx/api.cuh

then ``#line 1 "user_source"`` so that NVRTC numbers your lines from your first line, and
compiles it all through the same two-level cache as ``Descriptor.compile()`` (the key
covers your source too). The :class:`FusedKernel` it returns launches with the block size
and dynamic shared memory the descriptors need, and converts each argument to the C type
of the matching kernel parameter (read from your source), so a Python float reaches a
``float`` parameter as a float and a ``__half*`` parameter refuses a float32 array.

:func:`header` returns the same generated text with the include path, for compiling with
another NVRTC front end (CuPy's ``RawModule``).
"""

from __future__ import annotations

import math
import numbers
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import ml_dtypes
import numpy as np

from .. import arrays as _arrays
from ..base import dtypes as _dt
from ..arrays import streams as _streams
from ..codegen import gemm as _codegen
from ..codegen import trsm as _trsm_codegen
from ..compile import headers as _headers
from ..compile import nvrtc as _nvrtc
from ..compile.cache import cached_compile
from ..compile.compiled import CompiledKernel, Forward
from ..compile.nvrtc import DEFAULT_OPTIONS, CompileOptions
from ..describe.descriptor import Descriptor
from ..describe.operators import Block, Function
from ..describe.trsm import TrsmDescriptor
from ..engine.device_gemm import DeviceGemm
from ..base.errors import CompileError, DescriptorError, ExecutionError
from ..launch import cuda_driver as _cuda_driver
from ..launch import cuda_modules as _cuda
from ..launch import devices as _devices
from ..run import execute as _execute

__all__ = [
    "USER_SOURCE_NAME",
    "FusedKernel",
    "FusionHeader",
    "Param",
    "compile_kernel",
    "fused_source",
    "header",
    "parse_signature",
    "prelude",
]

#: The file name NVRTC reports for lines of the user's source (``#line 1 "user_source"``).
USER_SOURCE_NAME = "user_source"

_FP8 = (_dt.float8_e4m3, _dt.float8_e5m2)
_IDENTIFIER = re.compile(r"^[A-Za-z_]\w*$")
_MAX_THREADS = 1024
_CPP_KEYWORDS = frozenset(
    "alignas alignof and asm auto bool break case catch char class const constexpr continue decltype default delete "
    "do double else enum explicit extern false float for friend goto if inline int long mutable namespace new "
    "noexcept not nullptr operator or private protected public register return short signed sizeof static struct "
    "switch template this throw true try typedef typename union unsigned using virtual void volatile while".split()
)


# ---------------------------------------------------------------------------------------------
# checking what the user gave
# ---------------------------------------------------------------------------------------------


def _check_gemms(gemms: Any) -> dict[str, Descriptor]:
    """``gemms`` as an ordered dict of validated descriptors with Block, keyed by C++ identifiers."""
    if isinstance(gemms, (Descriptor, DeviceGemm)):
        gemms = {"GEMM": gemms}
    if not isinstance(gemms, Mapping):
        raise TypeError(
            f"gemms: expected a mapping of C++ type names to descriptors, e.g. {{'GEMM': desc}}; got "
            f"{type(gemms).__name__}"
        )
    if not gemms:
        raise ValueError("gemms: no descriptor given; name at least one, e.g. gemms={'GEMM': desc}")
    out: dict[str, Descriptor] = {}
    for name, desc in gemms.items():
        if not isinstance(name, str) or not _IDENTIFIER.match(name) or name in _CPP_KEYWORDS:
            raise ValueError(f"gemms: {name!r} is not a C++ identifier; name each GEMM type like 'GEMM' or 'GEMM2'")
        if name.startswith("blasdx") or "__" in name:
            raise ValueError(f"gemms: {name!r} is reserved (blasdx* and names with '__'); choose another type name")
        if isinstance(desc, DeviceGemm):  # the Hopper engine's device-level GEMM: checked when built
            out[name] = desc
            continue
        if not isinstance(desc, Descriptor):
            raise TypeError(
                f"gemms[{name!r}]: expected a blasdx Descriptor or DeviceGemm, got {type(desc).__name__}"
            )
        desc.validate()
        if not desc.has(Block):
            raise DescriptorError(
                f"gemms[{name!r}]: {desc!r} has no Block operator; a block-level GEMM called from a kernel needs "
                "bx.Block() in its descriptor"
            )
        if desc.function not in (Function.MM, Function.TRSM):  # pragma: no cover - every Function fuses
            raise DescriptorError(f"gemms[{name!r}]: Function.MM and Function.TRSM fuse, not {desc.function!r}")
        out[name] = desc
    taken = {f"{n}{suffix}" for n in out for suffix in ("_config", "_traits")}
    clash = sorted(taken & set(out))
    if clash:
        raise ValueError(f"gemms: {clash[0]!r} clashes with a generated struct name; rename that GEMM")
    return out


def _agreed(gemms: Mapping[str, Descriptor], value_of: Callable[[Descriptor], Any], what: str, advice: str) -> Any:
    """The one ``value_of(desc)`` every descriptor agrees on; DescriptorError listing each when they differ."""
    values = {name: value_of(desc) for name, desc in gemms.items()}
    if len(set(values.values())) > 1:
        listed = ", ".join(f"{name}: {value}" for name, value in values.items())
        raise DescriptorError(f"gemms: the descriptors {what} ({listed}); {advice}")
    return next(iter(values.values()))


def _arch_of(gemms: Mapping[str, Descriptor]) -> str:
    """The one NVRTC target every descriptor names; DescriptorError when they differ."""
    return _agreed(gemms, lambda desc: desc.arch, "target different architectures",
                   "one kernel is compiled for one architecture, so give every descriptor the same SM")


def _normalise_dim(value: Any, argument: str, kind: type[Exception] = ValueError) -> tuple[int, int, int]:
    """An int or 1-3 positive ints as a 3-tuple."""

    def positive_int(v: Any) -> bool:
        return isinstance(v, (int, np.integer)) and not isinstance(v, (bool, np.bool_)) and v >= 1

    items = (value,) if positive_int(value) else value
    if not isinstance(items, (tuple, list)) or not 1 <= len(items) <= 3 or not all(map(positive_int, items)):
        raise kind(f"{argument}: {value!r} is not an int or a tuple of 1 to 3 positive ints")
    dims = tuple(int(v) for v in items)
    return (*dims, *(1,) * (3 - len(dims)))


def _check_block(block: Any, gemms: Mapping[str, Descriptor], kind: type[Exception] = ValueError) -> tuple[int, ...]:
    """An explicit block shape: at most 1024 threads and at least as many as every GEMM runs on."""
    dims = _normalise_dim(block, "block", kind)
    threads = math.prod(dims)
    if threads > _MAX_THREADS:
        raise kind(f"block: {dims} is {threads} threads; a block holds at most {_MAX_THREADS}")
    for name, desc in gemms.items():
        need = desc.max_threads_per_block
        if threads < need:
            raise kind(
                f"block: {dims} is {threads} threads but {name} runs on {need} (its block_dim {desc.block_dim}); "
                f"launch at least {need} threads or give {name} a smaller BlockDim"
            )
    return dims


def _default_block(gemms: Mapping[str, Descriptor]) -> tuple[int, int, int]:
    """The block_dim every descriptor agrees on; DescriptorError when they do not."""
    return _agreed(gemms, lambda desc: tuple(desc.block_dim), "suggest different block shapes",
                   "give them the same BlockDim, or pass block= (at least as many threads as the largest)")


def _default_shared_memory(gemms: Mapping[str, Descriptor]) -> int:
    """Room for every GEMM's A, B and C side by side, each block on a 16-byte boundary."""
    return sum(-(-desc.shared_memory_size // 16) * 16 for desc in gemms.values())


def _check_shared_memory(value: Any, argument: str = "shared_memory", kind: type[Exception] = ValueError) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
        raise kind(f"{argument}: {value!r} is not a byte count (a non-negative int)")
    return int(value)


# ---------------------------------------------------------------------------------------------
# the generated text
# ---------------------------------------------------------------------------------------------


def traits_struct(desc: Descriptor, name: str) -> str:
    """``struct <name>_config`` (codegen) and ``struct <name>_traits`` with what the device API adds."""
    if isinstance(desc, TrsmDescriptor):
        return _trsm_codegen.traits_struct(desc, name)
    al_a, al_b, al_c = desc.alignment
    x, y, z = desc.block_dim
    return "\n".join(
        [
            _codegen.config_struct(desc, f"{name}_config"),
            f"struct {name}_traits : {name}_config {{",
            f"    static constexpr int alignment_a = {al_a}, alignment_b = {al_b}, alignment_c = {al_c};  // bytes",
            f"    static constexpr int block_dim_x = {x}, block_dim_y = {y}, block_dim_z = {z};",
            "};",
            f"using {name} = blasdx::Gemm<{name}_traits>;",
            f'static_assert({name}::shared_memory_size == {desc.shared_memory_size}, "blasdx: {name}\'s shared '
            'memory layout differs between Python and C++");',
            f"static_assert({name}::shared_memory_size_ab == {desc.shared_memory_size_ab}, \"blasdx: {name}'s "
            'shared memory layout of A and B differs between Python and C++");',
        ]
    )


def prelude(gemms: Mapping[str, Descriptor] | Descriptor, block_threads: int | None = None) -> str:
    """The generated text that puts each named GEMM type in scope (no user code).

    ``block_threads``: no launch has more threads per block than this (the launcher's promise), so
    GEMMs running on that many compile without their thread checks; None promises nothing.
    """
    gemms = _check_gemms(gemms)
    _arch_of(gemms)
    blocks = [d for d in gemms.values() if isinstance(d, Descriptor)]
    includes = []
    engines = [d for d in gemms.values() if isinstance(d, DeviceGemm)]
    if any(a in _FP8 or b in _FP8 for a, b, _ in (d.precision for d in blocks)) or any(
            d.a in _FP8 or d.b in _FP8 for d in engines):
        includes.append('#include "blasdx/fp8.cuh"')
    includes.append('#include "blasdx/api.cuh"')
    for desc in blocks:
        if not isinstance(desc, TrsmDescriptor):
            includes += [line for line in _codegen.scheme_includes(desc) if line not in includes]
    if any(isinstance(desc, TrsmDescriptor) for desc in blocks):
        includes.append('#include "blasdx/trsm.cuh"')
    if any(not isinstance(desc, TrsmDescriptor) and desc.plan.is_wgmma for desc in blocks):  # sm_90a: wgmma
        includes.append('#include "blasdx/warpgroup_gemm.cuh"')
    if len(blocks) < len(gemms):  # the Hopper engine's device-level GEMM
        includes.append('#include "blasdx/hopper/gemm.cuh"')
    promise = [] if block_threads is None else [f"#define BLASDX_BLOCK_THREADS {int(block_threads)}"]
    lines = ["// Generated by blasdx: the GEMM types of a fused kernel.", *promise, *includes, ""]
    for name, desc in gemms.items():
        text = traits_struct(desc, name) if isinstance(desc, Descriptor) else desc.prelude(name)
        lines += [f"// {name}: {desc!r}", text, ""]
    return "\n".join(lines)


def fused_source(source: str, gemms: Mapping[str, Descriptor] | Descriptor, block_threads: int | None = None) -> str:
    """The prelude (see :func:`prelude` for ``block_threads``), then the user's source numbered from its
    own first line."""
    if not isinstance(source, str):
        raise TypeError(f"source: expected CUDA C++ as str, got {type(source).__name__}")
    return f'{prelude(gemms, block_threads)}#line 1 "{USER_SOURCE_NAME}"\n{source}'


@dataclass(frozen=True)
class FusionHeader:
    """What another NVRTC front end needs: the text to put before your kernel and the include path.

    ``options`` holds one ``-I<dir>`` per include directory (blasdx's templates and the CUDA
    headers they use); pass it as is, e.g. ``cupy.RawModule(code=hdr.text + src,
    options=hdr.options)``. ``arch`` is the target the descriptors were built for.
    """

    text: str
    include_dirs: tuple[str, ...]
    arch: str

    @property
    def options(self) -> tuple[str, ...]:
        """Compiler flags: ``-I<dir>`` for each include directory."""
        return tuple(f"-I{d}" for d in self.include_dirs)

    def __str__(self) -> str:
        return self.text


def header(gemms: Mapping[str, Descriptor] | Descriptor, *, name: str = "GEMM") -> FusionHeader:
    """The text that defines the GEMM types (``name`` for a single descriptor) and its include path."""
    if isinstance(gemms, (Descriptor, DeviceGemm)):
        gemms = {name: gemms}
    text = prelude(gemms)
    arch = _arch_of(_check_gemms(gemms))
    tree = _headers.kernel_tree()
    include = [tree.root, *_headers.include_dirs_for([text, *tree.texts], None, tree.folders)]
    return FusionHeader(text=text, include_dirs=tuple(str(p) for p in include), arch=arch)


# ---------------------------------------------------------------------------------------------
# the kernel's parameters, read from the source
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Param:
    """One kernel parameter: its name, its declaration, pointer or not, and the element/scalar type if known."""

    name: str
    declaration: str
    pointer: bool
    const: bool
    dtype: _dt.DType | None  # blasdx type of the scalar or of the pointed-to elements; None when unknown
    numpy: Any = None  # numpy scalar type for scalars blasdx has no DType for (bool, int16, uint32, ...)
    tensor_map: bool = False  # a `blasdx::hopper::TensorMap` (passed by value; DeviceGemm.tensor_map_*)

    @property
    def type_name(self) -> str:
        """What the parameter holds, for messages."""
        if self.tensor_map:
            return "tensor map"
        if self.dtype is not None:
            return self.dtype.name
        if self.numpy is not None:
            return np.dtype(self.numpy).name
        return "unknown type"


# C scalar type names (after dropping const/volatile/std::) -> (blasdx DType or None, numpy scalar type)
_C_SCALARS: dict[str, tuple[_dt.DType | None, Any]] = {}
for _names, _dtype, _numpy in (
    (("bool",), None, np.bool_),
    (("char", "signed char", "int8_t"), _dt.int8, np.int8),
    (("unsigned char", "uint8_t"), _dt.uint8, np.uint8),
    (("short", "short int", "signed short", "signed short int", "int16_t"), None, np.int16),
    (("unsigned short", "unsigned short int", "uint16_t"), None, np.uint16),
    (("int", "signed", "signed int", "int32_t"), _dt.int32, np.int32),
    (("unsigned", "unsigned int", "uint32_t"), None, np.uint32),
    (("long", "long int", "signed long", "long long", "long long int", "signed long long", "int64_t", "ptrdiff_t",
      "intptr_t", "blasdx::i64", "i64"), None, np.int64),
    (("unsigned long", "unsigned long int", "unsigned long long", "unsigned long long int", "uint64_t", "size_t",
      "uintptr_t"), None, np.uint64),
    (("float",), _dt.float32, np.float32),
    (("double",), _dt.float64, np.float64),
    (("__half", "half"), _dt.float16, np.float16),
    (("__nv_bfloat16", "nv_bfloat16"), _dt.bfloat16, None),
    (("__nv_fp8_e4m3",), _dt.float8_e4m3, None),
    (("__nv_fp8_e5m2",), _dt.float8_e5m2, None),
):
    for _name in _names:
        _C_SCALARS[_name] = (_dtype, _numpy)
_COMPLEX = {"__half": _dt.float16, "half": _dt.float16, "float": _dt.float32, "double": _dt.float64}
_TENSOR_MAP = re.compile(r"^(?:(?:::)?blasdx::)?(?:hopper::)?TensorMap\s*([A-Za-z_]\w*)?$")
_QUALIFIERS = re.compile(r"\b(?:const|volatile|__restrict__|__restrict|restrict|__grid_constant__|struct)\b")
_GEMM_MEMBERS = {  # member type of a GEMM -> what it is
    "a_value_type": "a", "b_value_type": "b", "c_value_type": "c", "scalar_type": "scalar",
    "scalar_value_type": "scalar_value", "accumulator_value_type": "accumulator_value",
}


def _strip_comments(source: str) -> str:
    """The source with comments replaced by spaces (string literals left alone)."""
    pattern = re.compile(r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"', re.S)
    return pattern.sub(lambda m: m.group(0) if m.group(0).startswith('"') else " ", source)


def _split_top_level(text: str) -> list[str]:
    """Split a parameter list at commas outside <>, (), [] and {}."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch in "<([{":
            depth += 1
        elif ch in ">)]}":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return [p.strip() for p in parts]


def _resolve_type(text: str, gemms: Mapping[str, Descriptor]) -> tuple[_dt.DType | None, Any]:
    """(blasdx DType, numpy scalar type) of a C type name; (None, None) when unknown."""
    t = re.sub(r"\s+", " ", text).strip().removeprefix("::")
    t = re.sub(r"\bstd::", "", t)
    t = re.sub(r"\s*([<>:])\s*", r"\1", t)
    if t in _C_SCALARS:
        return _C_SCALARS[t]
    match = re.fullmatch(r"(?:blasdx::)?complex<(\w+)>", t)
    if match and match[1] in _COMPLEX:
        complex_type = _dt.complex_of(_COMPLEX[match[1]])
        return complex_type, None
    match = re.fullmatch(r"(\w+)::(\w+)", t)
    if match and match[1] in gemms and match[2] in _GEMM_MEMBERS:
        desc = gemms[match[1]]
        which = _GEMM_MEMBERS[match[2]]
        if which in ("a", "b", "c"):
            return getattr(desc, f"{which}_value_type"), None
        real = desc.scalar_type if which.startswith("scalar") else desc.accumulator_type
        return (_dt.complex_of(real) if desc.is_complex and which.endswith("value") else real), None
    return None, None


def _parse_param(declaration: str, index: int, gemms: Mapping[str, Descriptor]) -> Param:
    """One declaration such as ``const __half* __restrict__ a`` -> Param."""
    text = declaration.split("=", 1)[0].strip()
    const = bool(re.search(r"\bconst\b", text.split("*", 1)[0])) if "*" in text else False
    pointer = "*" in text or text.endswith("]")
    text = _QUALIFIERS.sub(" ", text)
    text = re.sub(r"\[[^\]]*\]", " ", text).replace("*", " ").replace("&", " ")
    text = re.sub(r"\s+", " ", text).strip()
    type_text, name = text, ""
    if not pointer and _TENSOR_MAP.match(text):
        return Param(_TENSOR_MAP.match(text)[1] or f"arg{index}", declaration.strip(), False, True, None,
                     tensor_map=True)
    dtype, numpy_type = _resolve_type(text, gemms)
    if dtype is None and numpy_type is None:
        match = re.fullmatch(r"(.+?)\s*\b([A-Za-z_]\w*)", text)
        if match and match[2] not in _CPP_KEYWORDS:
            type_text, name = match[1], match[2]
            dtype, numpy_type = _resolve_type(type_text, gemms)
    if pointer and text.split() and text.split()[0] == "void":
        dtype, numpy_type = None, None
    return Param(name or f"arg{index}", declaration.strip(), pointer, const, dtype, numpy_type)


def parse_signature(
    source: str, name: str, gemms: Mapping[str, Descriptor] | None = None
) -> tuple[Param, ...] | None:
    """The parameters of ``__global__ ... name(...)`` in ``source``; None when it cannot be found."""
    gemms = gemms or {}
    text = _strip_comments(source)
    for match in re.finditer(rf"\b{re.escape(name)}\s*\(", text):
        statement_start = max(text.rfind(";", 0, match.start()), text.rfind("}", 0, match.start()))
        if "__global__" not in text[statement_start + 1 : match.start()]:
            continue
        depth, i = 1, match.end()
        while i < len(text) and depth:
            depth += {"(": 1, ")": -1}.get(text[i], 0)
            i += 1
        inner = text[match.end() : i - 1].strip()
        if inner in ("", "void"):
            return ()
        return tuple(_parse_param(p, k, gemms) for k, p in enumerate(_split_top_level(inner)))
    return None


# ---------------------------------------------------------------------------------------------
# arguments -> what cuda.core.launch takes
# ---------------------------------------------------------------------------------------------


def _is_array(value: Any) -> bool:
    """Whether ``value`` is an array (device or host), judged by its type: never evaluates its properties.

    (``hasattr`` would: PyTorch's ``__cuda_array_interface__`` raises KeyError for fp8 tensors.)
    """
    if value is None or isinstance(value, (numbers.Number, np.generic, str, bytes)):
        return False
    if isinstance(value, np.ndarray):
        return value.ndim > 0
    cls = type(value)
    if cls in _arrays._ADAPTERS:
        return True
    attributes = getattr(value, "__dict__", None) or {}
    return any(hasattr(cls, name) or name in attributes for name in ("__cuda_array_interface__", "__dlpack__"))


def _pointer(value: Any, param: Param, argument: str, stream: int) -> tuple[int, _arrays.ArrayView | None]:
    """(address, view) of a pointer argument: a device array, a raw address (int) or None (null)."""
    if value is None:
        return 0, None
    if isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_)):
        if value < 0:
            raise ExecutionError(f"{argument}: {int(value)} is not a device address (negative)")
        return int(value), None
    if isinstance(value, (float, complex, bool, np.generic)):
        raise ExecutionError(
            f"{argument}: {value!r} is a scalar but parameter `{param.declaration}` is a pointer; pass a device array"
        )
    view = _arrays.as_array(value, argument, stream=stream)
    expected = param.dtype
    if expected is not None:
        accepted = {expected.name} | ({"float32"} if expected.name == "tfloat32" else set())
        if view.dtype.name not in accepted:
            raise ExecutionError(
                f"{argument}: dtype {view.dtype.name} does not match parameter `{param.declaration}`, which points "
                f"to {expected.name}; convert the array or change the parameter type"
            )
    if view.readonly and param.pointer and not param.const:
        raise ExecutionError(
            f"{argument}: the array is read-only but parameter `{param.declaration}` is not const; pass a writable "
            "array or declare the parameter const"
        )
    return view.ptr, view


def _number(value: Any) -> Any:
    """A Python/numpy number out of ``value`` (0-d arrays unwrapped); TypeError when it is none."""
    if isinstance(value, np.ndarray) and value.ndim == 0:
        value = value[()]
    if isinstance(value, (np.generic, numbers.Number)) and not isinstance(value, np.ndarray):
        return value
    raise TypeError


def _bits(value: Any, host_dtype: Any, bits_dtype: Any) -> Any:
    """The bit pattern of ``value`` rounded to ``host_dtype``, as a numpy integer scalar."""
    return np.asarray(value, dtype=host_dtype).view(bits_dtype)[()]


def _scalar(value: Any, param: Param, argument: str) -> Any:
    """``value`` as the numpy scalar of the parameter's C type (range- and kind-checked)."""
    where = f"parameter `{param.declaration}`"
    if _is_array(value):
        raise ExecutionError(
            f"{argument}: an array was given but {where} takes a scalar; pass a Python or numpy number"
        )
    try:
        number = _number(value)
    except TypeError:
        raise ExecutionError(
            f"{argument}: {value!r} ({type(value).__name__}) is not a number; {where} takes a {param.type_name}"
        ) from None
    dtype, numpy_type = param.dtype, param.numpy
    if dtype is None and numpy_type is None:  # a type blasdx cannot read: numpy scalars only, passed as they are
        if isinstance(number, np.generic):
            return number
        raise ExecutionError(
            f"{argument}: blasdx cannot tell the C type of {where}; pass a numpy scalar of that type "
            "(np.float32(x), np.int64(n), ...)"
        )
    is_bool = isinstance(number, (bool, np.bool_))
    if numpy_type is np.bool_:
        if not is_bool:
            raise ExecutionError(f"{argument}: {value!r} is not a bool; {where} takes a bool")
        return np.bool_(number)
    if is_bool:
        raise ExecutionError(f"{argument}: {value!r} is a bool; {where} takes a {param.type_name}")
    target = np.dtype(numpy_type) if numpy_type is not None else None
    if (dtype is not None and dtype.integral) or (target is not None and target.kind in "iu"):
        target = target if target is not None else np.dtype(dtype.numpy)
        if not isinstance(number, (numbers.Integral, np.integer)):
            raise ExecutionError(f"{argument}: {value!r} is not an integer; {where} takes a {target.name}")
        info = np.iinfo(target)
        if not info.min <= int(number) <= info.max:
            raise ExecutionError(f"{argument}: {int(number)} does not fit in {target.name}, the type of {where}")
        return target.type(int(number))
    if isinstance(number, (complex, np.complexfloating)) and not (dtype is not None and dtype.is_complex):
        if number.imag != 0:
            raise ExecutionError(f"{argument}: {value!r} is complex but {where} is real")
        number = number.real
    return _float_scalar(number, dtype, argument, where)


def _float_scalar(number: Any, dtype: _dt.DType, argument: str, where: str) -> Any:
    """A float or complex number as the numpy value (or bit pattern) of ``dtype``; overflow is an error."""
    with np.errstate(over="ignore", invalid="ignore"):
        if dtype.is_complex:
            parts = (float(np.real(number)), float(np.imag(number)))
            if dtype.name == "complex32":
                halves = np.array(parts, dtype=np.float16)
                converted, finite = halves.view(np.uint32)[0], np.all(np.isfinite(halves))
            else:
                converted = np.dtype(dtype.numpy).type(complex(*parts))
                finite = np.isfinite(converted)
            given_finite = all(math.isfinite(p) for p in parts)
        else:
            given = float(number)
            host = dtype.host_dtype
            rounded = np.asarray(given, dtype=host)
            finite, given_finite = bool(np.isfinite(rounded.astype(np.float64))), math.isfinite(given)
            if dtype in (_dt.bfloat16,):
                converted = _bits(given, ml_dtypes.bfloat16, np.uint16)
            elif dtype in _FP8:
                converted = _bits(given, host, np.uint8)
            else:
                converted = rounded[()]
    if given_finite and not finite:
        raise ExecutionError(f"{argument}: {number!r} overflows {dtype.name}, the type of {where}")
    return converted


_Converter = Callable[[Any, int], tuple[Any, Any]]
_CACHE_LIMIT = 64


def _pointer_converter(param: Param, argument: str) -> _Converter:
    """value -> (address, view) for a pointer parameter; arrays of known types take a short path."""
    adapters = _arrays._ADAPTERS
    expected = param.dtype
    accepted = None if expected is None else {expected.name} | ({"float32"} if expected.name == "tfloat32" else set())
    writable = not param.const

    def convert(value: Any, stream: int) -> tuple[Any, Any]:
        adapter = adapters.get(type(value))
        if adapter is None:
            return _pointer(value, param, argument, stream)
        view = adapter(value, argument, stream)
        if (accepted is not None and view.dtype.name not in accepted) or (writable and view.readonly):
            return _pointer(value, param, argument, stream)  # raises the full message
        return view.ptr, view

    return convert


def _scalar_converter(param: Param, argument: str) -> _Converter:
    """value -> (numpy scalar, None) for a scalar parameter, remembered per distinct value."""
    cache: dict[Any, Any] = {}

    def convert(value: Any, stream: int) -> tuple[Any, Any]:
        key = (type(value), value)
        try:
            hit = cache.get(key)
        except TypeError:  # unhashable (a 0-d array)
            return _scalar(value, param, argument), None
        if hit is None:
            hit = _scalar(value, param, argument)
            if len(cache) > _CACHE_LIMIT:
                cache.clear()
            cache[key] = hit
        return hit, None

    return convert


def _tensor_map_converter(param: Param, argument: str) -> _Converter:
    """value -> (the TensorMap, None) for a `blasdx::hopper::TensorMap` parameter."""

    def convert(value: Any, stream: int) -> tuple[Any, Any]:
        if not isinstance(value, _cuda_driver.TensorMap):
            raise ExecutionError(
                f"{argument}: parameter `{param.declaration}` takes a tensor map (DeviceGemm.tensor_map_a / _b / _d "
                f"of an array), got {type(value).__name__}"
            )
        return value, None

    return convert


def _untyped_converter(argument: str, name: str) -> _Converter:
    """value -> (kernel argument, view) when the parameter list could not be read."""

    def convert(value: Any, stream: int) -> tuple[Any, Any]:
        if _is_array(value):
            view = _arrays.as_array(value, argument, stream=stream)
            return view.ptr, view
        if isinstance(value, np.generic) or value is None or (isinstance(value, int) and not isinstance(value, bool)):
            return (0 if value is None else value), None
        raise ExecutionError(
            f"{argument}: blasdx could not read {name}'s parameter list from the source, so {value!r} has no "
            "known C type; pass numpy scalars (np.float32(x), np.int32(n), ...)"
        )

    return convert


# ---------------------------------------------------------------------------------------------
# the kernel object
# ---------------------------------------------------------------------------------------------


class FusedKernel:
    """A compiled user kernel with its GEMM types: ``launch(grid, args, stream=None, shared_memory=None)``.

    Attributes:
        name: the ``extern "C" __global__`` function.
        gemms: the named descriptors.
        arch: the NVRTC target (every descriptor's).
        block: default block shape (the descriptors' block_dim, or ``block=`` of compile_kernel).
        shared_memory: default dynamic shared memory in bytes (every GEMM's ``shared_memory_size``
            side by side, or ``shared_memory=`` of compile_kernel).
        params: the kernel's parameters read from the source (None when they could not be read).
        compiled: the :class:`~blasdx.compile.compiled.CompiledKernel` (cubin, registers, ``sass()`` ...),
            compiled for blocks of at most ``block``'s threads: GEMMs that run on all of them skip
            their thread checks. A launch with more threads than that runs a second compile
            without the promise, made on first use.
        source: everything NVRTC compiled; ``user_source``: your part of it.
    """

    def __init__(
        self,
        compiled: CompiledKernel,
        user_source: str,
        gemms: Mapping[str, Descriptor],
        block: tuple[int, int, int],
        shared_memory: int,
        params: tuple[Param, ...] | None,
        compile_for_larger_blocks: Callable[[], CompiledKernel] | None = None,
    ) -> None:
        self.compiled = compiled
        self._compile_for_larger_blocks = compile_for_larger_blocks
        self._for_larger_blocks: CompiledKernel | None = None
        self.name = compiled.kernel_name
        self.arch = compiled.arch
        self.source = compiled.source
        self.user_source = user_source
        self.gemms = dict(gemms)
        self.block = block
        self.shared_memory = shared_memory
        self.params = params
        self._converters: list[_Converter] | None = None
        if params is not None:
            self._converters = [
                (_tensor_map_converter if p.tensor_map else _pointer_converter if p.pointer else _scalar_converter)(
                    p, f"args[{i}] ({p.name})")
                for i, p in enumerate(params)
            ]
        # tensor maps go by value, which cuda.core.launch cannot pass: those kernels launch through the driver
        self._by_driver = params is not None and any(p.tensor_map for p in params)
        # a device-level GEMM in clusters needs the launch in clusters (its blocks share shared memory)
        self._cluster = max((getattr(g, "cluster", 1) for g in self.gemms.values()), default=1)
        self._configs: dict[tuple[Any, ...], Any] = {}
        self._loaded: dict[tuple[int, int, int], Any] = {}
        self._checked_devices: set[int] = set()

    def __repr__(self) -> str:
        names = ", ".join(f"{n}={d!r}" for n, d in self.gemms.items())
        return (
            f"FusedKernel({self.name!r}, {self.arch}, block={self.block}, shared_memory={self.shared_memory}, "
            f"{names})"
        )

    registers = Forward[int]("compiled", "Registers per thread.")
    local_memory = Forward[int]("compiled", "Stack bytes per thread (spills); 0 for a healthy kernel.")

    def max_active_blocks_per_sm(
        self, block: int | Sequence[int] | None = None, shared_memory: int | None = None
    ) -> int:
        """Blocks of this kernel one SM runs at once on the current device (for sizing a persistent grid)."""
        threads = math.prod(self.block if block is None else _check_block(block, self.gemms))
        smem = self.shared_memory if shared_memory is None else _check_shared_memory(shared_memory)
        kernel = self._compiled_for_threads(threads).kernel(dynamic_shared_memory=smem)
        return int(kernel.occupancy.max_active_blocks_per_multiprocessor(threads, smem))

    def compiled_for(self, block: int | Sequence[int]) -> CompiledKernel:
        """The compile a launch with ``block`` runs: ``compiled``, unless ``block`` has more threads
        than ``self.block`` (then the compile without the block-threads promise, made once)."""
        return self._compiled_for_threads(math.prod(_check_block(block, self.gemms)))

    def _compiled_for_threads(self, threads: int) -> CompiledKernel:
        """:meth:`compiled_for` of a block of ``threads`` threads, already checked."""
        if threads <= math.prod(self.block) or self._compile_for_larger_blocks is None:
            return self.compiled
        if self._for_larger_blocks is None:
            self._for_larger_blocks = self._compile_for_larger_blocks()
        return self._for_larger_blocks

    def arguments(self, args: Sequence[Any], stream: int | None = None) -> tuple[tuple[Any, ...], list[Any]]:
        """Check and convert ``args`` (host only): (kernel arguments, array views); ExecutionError on a mismatch."""
        if not isinstance(args, (tuple, list)):
            raise ExecutionError(f"args: expected a tuple or list of kernel arguments, got {type(args).__name__}")
        converters = self._converters
        if converters is None:
            converters = [_untyped_converter(f"args[{i}]", self.name) for i in range(len(args))]
        elif len(args) != len(converters):
            listed = ", ".join(f"`{p.declaration}`" for p in self.params) or "none"
            raise ExecutionError(
                f"args: {self.name} takes {len(converters)} parameters ({listed}) but {len(args)} arguments were "
                "given"
            )
        values = []
        views = []
        for convert, value in zip(converters, args):
            converted, view = convert(value, stream)
            values.append(converted)
            if view is not None:
                views.append(view)
        return tuple(values), views

    def launch(
        self,
        grid: int | Sequence[int],
        args: Sequence[Any],
        stream: Any = None,
        shared_memory: int | None = None,
        block: int | Sequence[int] | None = None,
    ) -> None:
        """Launch on ``grid`` blocks with ``args``; every check runs before anything is launched.

        The kernel runs on the device of the array arguments (all on one device; with none,
        the current device), whichever device is current. ``stream`` is None (the current
        stream of the first PyTorch/CuPy array among ``args`` on its device, else the default
        stream), a cuda.core Stream, a CuPy/PyTorch stream or a handle, of that device.
        ``shared_memory`` and ``block`` override the kernel's defaults.
        """
        try:
            setup = self._configs.get((grid, block, shared_memory))
        except TypeError:  # a list somewhere
            setup = None
        if setup is None:
            setup = self._setup(grid, block, shared_memory)
        config, smem, grid3, block3, compiled = setup
        handle = _arrays.resolve_stream(stream, args if isinstance(args, (tuple, list)) else ())
        values, views = self.arguments(args, handle)
        device_id = self._device(views)
        if stream is not None:
            _devices.check_stream_device(stream, handle, device_id)
        token = _devices.enter(device_id)
        try:
            key = (id(compiled), device_id, smem)
            kernel = self._loaded.get(key)
            if kernel is None:  # load and opt in once per device and size (a driver call each time otherwise)
                kernel = compiled.kernel(dynamic_shared_memory=smem, device_id=device_id)
                self._loaded[key] = kernel
            core = _streams.as_core_stream(stream, handle)
            _streams.wait_for_producers(core, handle, [v.stream for v in views])
            if self._by_driver:
                _cuda_driver.launch(int(kernel.handle), grid3, block3, smem, handle,
                                    _cuda_driver.parameters_of(values), self._cluster)
            else:
                _cuda_driver.core_launch(core, config, kernel, *values)
        finally:
            if token is not None:
                _devices.leave(token)

    def _setup(self, grid: Any, block: Any, shared_memory: Any) -> tuple[Any, int, tuple, tuple, CompiledKernel]:
        """(LaunchConfig, dynamic shared memory, grid, block, the compile it runs) of a launch; checked once."""
        LaunchConfig = _cuda.core().LaunchConfig  # noqa: N806
        grid3 = _normalise_dim(grid, "grid", ExecutionError)
        if grid3[0] % self._cluster:
            raise ExecutionError(
                f"grid: {grid3} does not group into clusters of {self._cluster} blocks along x, which the kernel's "
                "DeviceGemm runs in; use DeviceGemm.grid()"
            )
        block3 = self.block if block is None else _check_block(block, self.gemms, ExecutionError)
        smem = (
            self.shared_memory if shared_memory is None else _check_shared_memory(shared_memory, kind=ExecutionError)
        )
        setup = (LaunchConfig(grid=grid3, block=block3, shmem_size=smem), smem, grid3, tuple(block3),
                 self._compiled_for_threads(math.prod(block3)))
        try:
            if len(self._configs) > _CACHE_LIMIT:
                self._configs.clear()
            self._configs[(grid, block, shared_memory)] = setup
        except TypeError:
            pass
        return setup

    def _device(self, views: Sequence[_arrays.ArrayView]) -> int:
        """The device a launch runs on: the arrays' (one for all), else the current one, else 0; arch checked once."""
        devices = sorted({v.device_id for v in views if v.device_id is not None})
        if len(devices) > 1:
            raise ExecutionError(
                f"the array arguments are on devices {', '.join(map(str, devices))}; a kernel runs on one GPU and "
                "reads only its memory, so move them to one device"
            )
        if devices:
            device_id = devices[0]
        else:
            current = _devices.current_device_id()
            device_id = 0 if current is None else current
        if device_id not in self._checked_devices:
            device = _cuda.core().Device(device_id)
            _execute.check_device(next(iter(self.gemms.values())), tuple(device.compute_capability), device_id)
            self._checked_devices.add(device_id)
        return device_id


# ---------------------------------------------------------------------------------------------
# compiling
# ---------------------------------------------------------------------------------------------

_USER_LINE = re.compile(rf"^{USER_SOURCE_NAME}\((\d+)\): (?:catastrophic )?(error|warning)[^:]*: (.*)$", re.M)
_INSTANTIATED_AT = re.compile(rf"at line (\d+) of {USER_SOURCE_NAME}")
_ANY_ERROR = re.compile(r"^(.+?)\((\d+)\): (?:catastrophic )?error[^:]*: (.*)$", re.M)


def _user_error(exc: CompileError, user_source: str, name: str, arch: str) -> CompileError:
    """The compile error with its first problem shown at the user's own line."""
    lines = user_source.splitlines()

    def quote(number: int) -> str:
        return f"\n  {number:5d} | {lines[number - 1]}" if 0 < number <= len(lines) else ""

    log = exc.log
    own = next((m for m in _USER_LINE.finditer(log) if m[2] == "error"), None)
    message = f"NVRTC could not compile {name} for {arch}"
    if own is not None:
        number = int(own[1])
        message += f"\n{USER_SOURCE_NAME}:{number}: {own[3].strip()}{quote(number)}"
    else:
        first = _ANY_ERROR.search(log)
        if first is not None:
            message += f"\n{first[1]}:{first[2]}: {first[3].strip()}"
        at = _INSTANTIATED_AT.search(log)
        if at is not None:
            number = int(at[1])
            message += f"\n  required from {USER_SOURCE_NAME}:{number}{quote(number)}"
        elif first is None:
            message = str(exc).split("\n--- NVRTC log ---", 1)[0]
    error = CompileError(message, log=log, source=exc.source, saved_to=exc.saved_to)
    error.user_source = user_source  # type: ignore[attr-defined]
    return error


def compile_kernel(
    source: str,
    name: str,
    gemms: Mapping[str, Descriptor] | Descriptor,
    *,
    options: CompileOptions = DEFAULT_OPTIONS,
    block: int | Sequence[int] | None = None,
    shared_memory: int | None = None,
) -> FusedKernel:
    """Compile ``source`` (defining ``extern "C" __global__ void name(...)``) with the GEMM types of ``gemms``.

    Args:
        source: your CUDA C++; each key of ``gemms`` is a type in scope (``GEMM::execute`` ...).
        name: the kernel to launch.
        gemms: ``{"GEMM": descriptor, ...}`` (or one descriptor, named ``GEMM``). All must target
            one SM and agree on block_dim unless ``block`` is given.
        options: NVRTC settings (``include_dirs`` for your own headers, ``defines`` ...).
        block: the default block shape, when the descriptors' block_dim do not agree or you want
            more threads (each GEMM uses its first ``max_threads_per_block`` threads). The kernel
            is compiled for blocks of at most this many threads (GEMMs on all of them skip their
            thread checks); a launch with more runs a second compile, made on first use.
        shared_memory: default dynamic shared memory in bytes (default: every GEMM's
            ``shared_memory_size`` side by side).

    Raises:
        CompileError: NVRTC rejected the source; the message points at your own line numbers.
    """
    if not isinstance(source, str):
        raise TypeError(f"source: expected CUDA C++ as str, got {type(source).__name__}")
    _nvrtc.check_kernel_name(name)
    if not isinstance(options, CompileOptions):
        raise TypeError(f"options: expected blasdx CompileOptions, got {type(options).__name__}")
    checked = _check_gemms(gemms)
    arch = _arch_of(checked)
    block3 = _default_block(checked) if block is None else _check_block(block, checked)
    smem = _default_shared_memory(checked) if shared_memory is None else _check_shared_memory(shared_memory)

    def compile_for(block_threads: int | None) -> CompiledKernel:
        try:
            return cached_compile(fused_source(source, checked, block_threads), name, arch, options)
        except CompileError as exc:
            raise _user_error(exc, source, name, arch) from None

    return FusedKernel(compile_for(math.prod(block3)), source, checked, block3, smem,
                       parse_signature(source, name, checked), compile_for_larger_blocks=lambda: compile_for(None))
