"""Lowering of a blasdx GEMM's methods in Numba kernels: calls of the LTO-IR entry points, linked by the call.

Each method becomes a call of the descriptor's ``extern "C"`` entry point
(:mod:`blasdx.codegen.ltoir`) and adds the descriptor's LTO-IR to the kernel's link, so the
user passes no ``link=``. The kernel's own code library is switched to link-time optimisation
as well, so that nvJitLink inlines the GEMM into the kernel (a fragment then stays in
registers); without it the entry points would be real calls.

Shared buffers are views into the kernel's dynamic shared memory, placed by the entry point
``slice_shared_memory`` (which finds the 1024-byte boundary swizzled plans need); the LTO-IR's
setup callback opts the loaded kernels in to the device's whole dynamic shared memory. Copies check
the global matrix's shape on the device and stop the kernel (``trap``) on a mismatch, before
reading anything: shapes are run-time values in Numba.

A kernel that calls a GEMM keeps its linked cubin in blasdx's disk cache (:func:`_linked_cubin`):
nvJitLink's link-time optimisation of the inlined GEMM is most of a warm build, and Numba's own
``cache=True`` refuses code libraries with linked files.
"""

from __future__ import annotations

import re
import types as _pytypes
from typing import Any

from llvmlite import ir
from numba.cuda import cgutils, types
from numba.cuda.core.imputils import lower_builtin as lower
from numba.cuda.core.imputils import lower_constant, lower_getattr
from numba.cuda.np.arrayobj import make_array, populate_array

from .numba_types import Fragment, GemmType, SharedBuffer

__all__: list[str] = []

_I8P = ir.IntType(8).as_pointer()
_I32 = ir.IntType(32)
_VOID = ir.VoidType()
_DYNAMIC_SMEM = "blasdx_dynamic_shared_memory"

_ltoir_objects: dict[Any, Any] = {}


def _link(context: Any, gemm: GemmType) -> None:
    """Add the descriptor's LTO-IR to the kernel being compiled, and compile that kernel for LTO."""
    from numba.cuda.cudadrv.linkable_code import LTOIR

    obj = _ltoir_objects.get(gemm.desc)
    if obj is None:
        lto = gemm.desc.ltoir()
        obj = _ltoir_objects[gemm.desc] = LTOIR(lto.data, name=lto.name, setup_callback=_allow_dynamic_shared_memory)
    library = context.active_code_library
    library.add_linking_file(obj)
    if hasattr(library, "_lto"):  # numba-cuda's CUDACodeLibrary: link this kernel as LTO-IR too
        library._lto = True
    if hasattr(library, "_cubin_cache") and "get_cubin" not in vars(library):
        library.get_cubin = _pytypes.MethodType(_linked_cubin, library)


#: the kernel's name in the text its cache key hashes (Numba numbers each compile's name)
_ENTRY = b"__blasdx_entry__"
_MODULE_ID = re.compile(rb"^; ModuleID = .*$", re.MULTILINE)


def _link_key(library: Any, cc: tuple) -> str | None:
    """The disk key of ``library``'s link for ``cc``: its LLVM IR with the kernel's name set aside, the NVVM
    and linker options and every linked file; None when something in it cannot be hashed."""
    from numba.cuda.cudadrv.linkable_code import LinkableCode

    from ..compile import ltoir as _ltoir

    identity = _ltoir.linker_identity()
    entry = library._entry_name
    if identity is None or not entry or library.needs_cudadevrt:
        return None
    files = []
    for item in library._linking_files:
        if isinstance(item, LinkableCode):
            data = item.data.encode() if isinstance(item.data, str) else bytes(item.data)  # sources are text
            files.append(str(item.kind).encode() + b"\0" + data)
        else:
            return None  # a path: its content may change under the same name
    options = repr((tuple(cc), sorted(library._nvvm_options.items()), library._max_registers, library._lto))
    # the kernel's mangled name (after "_ZN") is in its own name and its environment's; the module's ID comment
    # ends in the compile's number
    ir_text = _MODULE_ID.sub(b"", "\n".join(library.llvm_strs).encode()).replace(entry[3:].encode(), _ENTRY)
    return _ltoir.linked_key([options.encode(), ir_text, *sorted(files)], identity)


def _linked_cubin(library: Any, cc: Any = None) -> Any:
    """``CUDACodeLibrary.get_cubin`` through blasdx's disk cache of linked cubins.

    A hit names the kernel as it was when the cubin was linked (an earlier compile's number), so
    the library loads it by that name.
    """
    from cuda.core import ObjectCode

    from ..compile import ltoir as _ltoir

    cc = library._ensure_cc(cc)
    cubin = library._cubin_cache.get(cc)
    if cubin:
        return cubin
    key = _link_key(library, cc)
    found = _ltoir.find_linked(key) if key else None
    if found is not None:
        data, entry = found
        library._entry_name = entry
        cubin = library._cubin_cache[cc] = ObjectCode.from_cubin(data, name=entry)
        return cubin
    cubin = type(library).get_cubin(library, cc)
    if key:
        data = cubin if isinstance(cubin, bytes) else bytes(cubin.code)
        _ltoir.keep_linked(key, data, library._entry_name)
    return cubin


def _allow_dynamic_shared_memory(object_code: Any) -> None:
    """Let every kernel of a freshly loaded module take as much dynamic shared memory as the device allows.

    A GEMM's buffers live in dynamic shared memory, and above 48 KB a kernel must opt in
    before its launch; Numba calls this once per loaded module (the LTO-IR's setup callback).
    A failure here only warns: launches within 48 KB still work, larger ones then fail with
    the driver's own error.
    """
    try:
        _opt_in(object_code)
    except Exception as exc:  # noqa: BLE001 - never break a module load for an optional opt-in
        import warnings

        warnings.warn(f"blasdx: could not opt the kernel in to more than 48 KB of dynamic shared memory ({exc})",
                      RuntimeWarning, stacklevel=2)


def _opt_in(object_code: Any) -> None:
    from cuda.bindings import driver

    def check(result: Any) -> Any:
        err, *rest = result if isinstance(result, tuple) else (result,)
        if int(err) != 0:
            raise RuntimeError(f"driver call failed: {err}")
        return rest[0] if len(rest) == 1 else rest

    handle = object_code.handle
    if not isinstance(handle, driver.CUlibrary):
        handle = driver.CUlibrary(int(handle))
    device = check(driver.cuCtxGetDevice())
    optin = check(driver.cuDeviceGetAttribute(
        driver.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, device))
    count = check(driver.cuLibraryGetKernelCount(handle))
    attribute = driver.CUfunction_attribute
    for kernel in check(driver.cuLibraryEnumerateKernels(count, handle)):
        static = check(driver.cuKernelGetAttribute(attribute.CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, kernel, device))
        check(driver.cuKernelSetAttribute(attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                          int(optin) - int(static), kernel, device))


def _call(context: Any, builder: ir.IRBuilder, gemm: GemmType, role: str, result: ir.Type,
          args: list[ir.Value]) -> ir.Value:
    """Call entry point ``role`` of ``gemm`` with ``args`` (already of the C types)."""
    _link(context, gemm)
    name = f"{gemm.info.prefix}_{role}"
    fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(result, [a.type for a in args]), name)
    return builder.call(fn, args)


def _data(context: Any, builder: ir.IRBuilder, ty: Any, value: ir.Value) -> ir.Value:
    """The data pointer of an array value, as ``i8*``."""
    return builder.bitcast(make_array(ty)(context, builder, value=value).data, _I8P)


def _scalar(context: Any, builder: ir.IRBuilder, gemm: GemmType, ty: Any, value: ir.Value) -> tuple[ir.Value, ...]:
    """(real, imaginary) parts of a scalar argument in the GEMM's scalar type."""
    scalar = gemm.info.scalar
    if isinstance(ty, types.Complex):
        cplx = context.make_complex(builder, ty, value=value)
        part = ty.underlying_float
        return (context.cast(builder, cplx.real, part, scalar), context.cast(builder, cplx.imag, part, scalar))
    return (context.cast(builder, value, ty, scalar), context.get_constant(scalar, 0))


def _trap_unless(builder: ir.IRBuilder, ok: ir.Value) -> None:
    """Stop the kernel when ``ok`` is false (a shape that does not match the descriptor)."""
    with builder.if_then(builder.not_(ok), likely=False):
        trap = cgutils.get_or_insert_function(builder.module, ir.FunctionType(_VOID, []), "llvm.trap")
        builder.call(trap, [])


def _check_shape(context: Any, builder: ir.IRBuilder, ty: Any, value: ir.Value, shape: tuple[int, int]) -> None:
    array = make_array(ty)(context, builder, value=value)
    dims = cgutils.unpack_tuple(builder, array.shape, ty.ndim)
    ok = cgutils.true_bit
    for dim, want in zip(dims, shape):
        ok = builder.and_(ok, builder.icmp_signed("==", dim, context.get_constant(types.intp, want)))
    _trap_unless(builder, ok)


@lower("blasdx.Gemm.shared_memory", GemmType, types.VarArg(types.Any))
@lower("blasdx.Gemm.shared_memory_ab", GemmType, types.VarArg(types.Any))
def _lower_shared_memory(context: Any, builder: ir.IRBuilder, sig: Any, args: list) -> ir.Value:
    gemm = sig.args[0]
    info = gemm.info
    module = builder.module
    smem = module.globals.get(_DYNAMIC_SMEM)
    if smem is None:
        smem = cgutils.add_global_variable(module, ir.ArrayType(ir.IntType(8), 0), _DYNAMIC_SMEM, addrspace=3)
        smem.linkage = "external"
        smem.align = 16
    base = builder.addrspacecast(builder.bitcast(smem, ir.IntType(8).as_pointer(3)), _I8P)
    if len(args) > 1:
        offset = context.cast(builder, args[1], sig.args[1], types.intp)
        aligned = builder.icmp_signed("==", builder.and_(offset, context.get_constant(types.intp, 15)),
                                      context.get_constant(types.intp, 0))
        _trap_unless(builder, aligned)  # a run-time offset that is not a multiple of 16
        base = builder.gep(base, [offset])
    slots = [cgutils.alloca_once(builder, _I8P) for _ in range(3)]
    _call(context, builder, gemm, "slice_shared_memory", _VOID, [base, *slots])
    buffers = []
    for role, slot, ty in zip("abc", slots, sig.return_type.types):  # A and B only for shared_memory_ab
        itemsize = context.get_abi_sizeof(context.get_data_type(ty.dtype))
        if ty.ndim == 1:
            panels = {"a": info.desc.m * info.desc.k, "b": info.desc.k * info.desc.n}[role]
            shape, strides = (panels,), (itemsize,)
        else:
            rows, cols = info.shape(role)
            ld = info.ld(role)
            shape = (rows, cols)
            strides = (ld * itemsize, itemsize) if info.row_major(role) else (itemsize, ld * itemsize)
        array = make_array(ty)(context, builder)
        data = builder.bitcast(builder.load(slot), context.get_data_type(ty.dtype).as_pointer())
        populate_array(array, data=data, shape=[context.get_constant(types.intp, s) for s in shape],
                       strides=[context.get_constant(types.intp, s) for s in strides],
                       itemsize=context.get_constant(types.intp, itemsize), meminfo=None)
        buffers.append(array._getvalue())
    return context.make_tuple(builder, sig.return_type, buffers)


def _lower_copy(role: str, to_shared: bool) -> None:
    method = f"{'load' if to_shared else 'store'}_{role}"

    @lower(f"blasdx.Gemm.{method}", GemmType, types.Any, types.Any)
    def impl(context: Any, builder: ir.IRBuilder, sig: Any, args: list) -> ir.Value:
        gemm = sig.args[0]
        first, second = (1, 2)
        g_index, s_index = (first, second) if to_shared else (second, first)
        _check_shape(context, builder, sig.args[g_index], args[g_index], gemm.info.shape(role))
        g = _data(context, builder, sig.args[g_index], args[g_index])
        s = _data(context, builder, sig.args[s_index], args[s_index])
        _call(context, builder, gemm, method, _VOID, [g, s] if to_shared else [s, g])
        return context.get_dummy_value()


for _role, _to_shared in (("a", True), ("b", True), ("c", True), ("c", False)):
    _lower_copy(_role, _to_shared)


@lower("blasdx.Gemm.copy_wait", GemmType)
def _lower_copy_wait(context: Any, builder: ir.IRBuilder, sig: Any, args: list) -> ir.Value:
    _call(context, builder, sig.args[0], "copy_wait", _VOID, [])
    return context.get_dummy_value()


@lower("blasdx.Gemm.execute", GemmType, types.Any, types.Any, types.Any, types.Any, types.Any)
def _lower_execute(context: Any, builder: ir.IRBuilder, sig: Any, args: list) -> ir.Value:
    gemm, alpha_t, a_t, b_t, beta_t, c_t = sig.args
    _, alpha, a, b, beta, c = args
    call_args = [*_scalar(context, builder, gemm, alpha_t, alpha), _data(context, builder, a_t, a),
                 _data(context, builder, b_t, b), *_scalar(context, builder, gemm, beta_t, beta),
                 _data(context, builder, c_t, c)]
    _call(context, builder, gemm, "execute", _VOID, call_args)
    return context.get_dummy_value()


def _local_array(context: Any, builder: ir.IRBuilder, ty: Any, size: int, name: str) -> ir.Value:
    """A zeroed 1-D array of ``size`` elements in the calling thread's registers (an alloca)."""
    element = context.get_data_type(ty.dtype)
    storage = cgutils.alloca_once(builder, ir.ArrayType(element, size), name=name)
    builder.store(ir.Constant(ir.ArrayType(element, size), None), storage)
    itemsize = context.get_abi_sizeof(element)
    array = make_array(ty)(context, builder)
    populate_array(array, data=builder.bitcast(storage, element.as_pointer()),
                   shape=[context.get_constant(types.intp, size)], strides=[context.get_constant(types.intp, itemsize)],
                   itemsize=context.get_constant(types.intp, itemsize), meminfo=None)
    return array._getvalue()


@lower("blasdx.Gemm.accumulator", GemmType)
def _lower_accumulator(context: Any, builder: ir.IRBuilder, sig: Any, args: list) -> ir.Value:
    ty: Fragment = sig.return_type
    return _local_array(context, builder, ty, ty.info.fragment_size, "blasdx_fragment")


@lower("blasdx.Gemm.fragment_positions", GemmType)
def _lower_fragment_positions(context: Any, builder: ir.IRBuilder, sig: Any, args: list) -> ir.Value:
    gemm = sig.args[0]
    ty = sig.return_type.dtype
    size = gemm.info.fragment_size
    rows = _local_array(context, builder, ty, size, "blasdx_fragment_rows")
    cols = _local_array(context, builder, ty, size, "blasdx_fragment_cols")
    _call(context, builder, gemm, "fragment_positions", _VOID,
          [_data(context, builder, ty, rows), _data(context, builder, ty, cols)])
    return context.make_tuple(builder, sig.return_type, [rows, cols])


@lower("blasdx.Gemm.accumulate", GemmType, types.Any, types.Any, types.Any)
def _lower_accumulate(context: Any, builder: ir.IRBuilder, sig: Any, args: list) -> ir.Value:
    gemm, a_t, b_t, acc_t = sig.args
    _, a, b, acc = args
    call_args = [_data(context, builder, a_t, a), _data(context, builder, b_t, b), _data(context, builder, acc_t, acc)]
    _call(context, builder, gemm, "accumulate", _VOID, call_args)
    return context.get_dummy_value()


def _lower_fragment_index(role: str) -> None:
    @lower(f"blasdx.Gemm.{role}", GemmType, types.Any)
    def impl(context: Any, builder: ir.IRBuilder, sig: Any, args: list) -> ir.Value:
        index = context.cast(builder, args[1], sig.args[1], types.int32)
        value = _call(context, builder, sig.args[0], role, _I32, [index])
        if role == "fragment_valid":
            return builder.icmp_signed("!=", value, ir.Constant(_I32, 0))
        return value


for _role in ("fragment_row", "fragment_col", "fragment_valid"):
    _lower_fragment_index(_role)


@lower("blasdx.Gemm.fragment_axpby", GemmType, types.Any, types.Any, types.Any, types.Any)
def _lower_fragment_axpby(context: Any, builder: ir.IRBuilder, sig: Any, args: list) -> ir.Value:
    gemm, alpha_t, acc_t, beta_t, c_t = sig.args
    _, alpha, acc, beta, c = args
    info = gemm.info
    if isinstance(c_t, SharedBuffer):
        ld = context.get_constant(types.int32, info.ld("c"))
    else:
        _check_shape(context, builder, c_t, c, info.shape("c"))
        array = make_array(c_t)(context, builder, value=c)
        strides = cgutils.unpack_tuple(builder, array.strides, 2)
        outer = strides[0] if info.row_major("c") else strides[1]
        itemsize = context.get_constant(types.intp, context.get_abi_sizeof(context.get_data_type(c_t.dtype)))
        ld = builder.trunc(builder.sdiv(outer, itemsize), _I32)
    call_args = [_data(context, builder, acc_t, acc), *_scalar(context, builder, gemm, alpha_t, alpha),
                 *_scalar(context, builder, gemm, beta_t, beta), _data(context, builder, c_t, c), ld]
    _call(context, builder, gemm, "fragment_axpby", _VOID, call_args)
    return context.get_dummy_value()


@lower_constant(GemmType)
def _lower_gemm_constant(context: Any, builder: ir.IRBuilder, ty: GemmType, value: Any) -> ir.Value:
    return context.get_dummy_value()


def _lower_trait(name: str) -> None:
    from .numba_types import CONSTANTS

    @lower_getattr(GemmType, name)
    def impl(context: Any, builder: ir.IRBuilder, ty: GemmType, value: ir.Value) -> ir.Value:
        return context.get_constant(types.intp, int(CONSTANTS[name](ty.info)))


def _register_traits() -> None:
    from .numba_types import CONSTANTS

    for name in CONSTANTS:
        _lower_trait(name)

    @lower_getattr(GemmType, "block_dim")
    def block_dim(context: Any, builder: ir.IRBuilder, ty: GemmType, value: ir.Value) -> ir.Value:
        dims = [context.get_constant(types.intp, d) for d in ty.desc.block_dim]
        return context.make_tuple(builder, types.UniTuple(types.intp, 3), dims)

_register_traits()
