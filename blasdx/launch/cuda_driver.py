"""The one driver layer: every CUDA driver call blasdx makes to run its kernels, and its launches.

* Packed launches of blasdx's own kernels (:class:`PackedLaunch`): a kernel whose parameter
  list is fixed by its plan lays it out once -- one 8-byte slot per parameter and the array
  of slot pointers the driver reads -- and a launch writes the values with one
  ``struct.pack_into`` and makes one ``cuLaunchKernel`` call (``cuda.core.launch`` converts
  every argument on every call and rebuilds its configuration). Each thread packs into
  buffers of its own; the driver copies the parameters before ``cuLaunchKernel`` returns.
* Parameter blocks with tensor maps (:class:`ParameterBlock`, :func:`launch`): a TMA kernel
  takes its maps by value (128-byte ``CUtensorMap`` parameters), which ``cuda.core.launch``
  cannot pass in every version blasdx supports; the Hopper engine keeps one block per plan
  (a slot per parameter, filled in place) and launches it, in clusters where the plan says.
* Tensor maps (:func:`encode_tiled`, :meth:`TensorMap.replace_address`), stream-ordered
  allocation (:func:`allocate_async`, :func:`free_async`), whether a stream captures a CUDA
  graph (:func:`is_capturing`) and cluster occupancy.
* ``cuda.core.launch`` for kernels whose parameters the user typed (:func:`core_launch`).

Launches run in the current context: callers make the operands' device current first
(:func:`blasdx.launch.devices.enter`). Enum values come from cuda.bindings, the library's
own names for them.
"""

from __future__ import annotations

import ctypes
import struct
import threading
from collections.abc import Sequence
from typing import Any

from ..errors import DeviceError, ExecutionError
from . import devices as _devices

__all__ = [
    "TensorMap", "ParameterBlock", "PackedLaunch", "SLOT_FORMATS", "TENSOR_MAP_TYPES", "allocate_async",
    "core_launch", "encode_tiled", "free_async", "is_capturing", "launch", "max_active_clusters", "parameters_of",
    "stream_object",
]

_LIB: list[Any] = []
_LIB_LOCK = threading.Lock()


def _libcuda() -> Any:
    """libcuda with the prototypes of the calls below (loaded once)."""
    if _LIB:
        return _LIB[0]
    with _LIB_LOCK:
        if not _LIB:
            try:
                lib = ctypes.CDLL("libcuda.so.1")
            except OSError as exc:
                raise DeviceError(f"the Hopper engine needs the CUDA driver (libcuda.so.1): {exc}") from exc
            c_uint, p = ctypes.c_uint, ctypes.c_void_p
            lib.cuTensorMapEncodeTiled.argtypes = [
                p, ctypes.c_int, ctypes.c_uint32, p, p, p, p, p, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                ctypes.c_int,
            ]
            lib.cuTensorMapEncodeTiled.restype = ctypes.c_int
            lib.cuTensorMapReplaceAddress.argtypes = [p, p]
            lib.cuTensorMapReplaceAddress.restype = ctypes.c_int
            lib.cuLaunchKernel.argtypes = [p, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, c_uint, p, p, p]
            lib.cuLaunchKernel.restype = ctypes.c_int
            lib.cuMemAllocAsync.argtypes = [p, ctypes.c_size_t, p]
            lib.cuMemAllocAsync.restype = ctypes.c_int
            lib.cuMemFreeAsync.argtypes = [ctypes.c_uint64, p]
            lib.cuMemFreeAsync.restype = ctypes.c_int
            lib.cuMemsetD32Async.argtypes = [ctypes.c_uint64, ctypes.c_uint, ctypes.c_size_t, p]
            lib.cuMemsetD32Async.restype = ctypes.c_int
            lib.cuKernelGetFunction.argtypes = [p, p]
            lib.cuKernelGetFunction.restype = ctypes.c_int
            lib.cuOccupancyMaxActiveClusters.argtypes = [p, p, p]
            lib.cuOccupancyMaxActiveClusters.restype = ctypes.c_int
            lib.cuLaunchKernelEx.argtypes = [p, p, p, p]
            lib.cuLaunchKernelEx.restype = ctypes.c_int
            lib.cuStreamIsCapturing.argtypes = [p, ctypes.POINTER(ctypes.c_int)]
            lib.cuStreamIsCapturing.restype = ctypes.c_int
            lib.cuGetErrorName.argtypes = [ctypes.c_int, ctypes.POINTER(ctypes.c_char_p)]
            lib.cuGetErrorName.restype = ctypes.c_int
            _LIB.append(lib)
    return _LIB[0]


def _error_name(lib: Any, code: int) -> str:
    name = ctypes.c_char_p()
    if lib.cuGetErrorName(code, ctypes.byref(name)) == 0 and name.value:
        return name.value.decode()
    return f"CUresult {code}"


def _enum(kind: str, member: str) -> int:
    from cuda.bindings import driver

    return int(getattr(getattr(driver, kind), member))


#: cuTensorMapEncodeTiled data type of each blasdx type name that TMA moves.
TENSOR_MAP_TYPES = {
    "float16": "CU_TENSOR_MAP_DATA_TYPE_FLOAT16",
    "bfloat16": "CU_TENSOR_MAP_DATA_TYPE_BFLOAT16",
    "tfloat32": "CU_TENSOR_MAP_DATA_TYPE_FLOAT32",  # the tensor core reads the upper 19 bits
    "float32": "CU_TENSOR_MAP_DATA_TYPE_FLOAT32",
    "float64": "CU_TENSOR_MAP_DATA_TYPE_FLOAT64",
    # TMA moves bytes and zero-fills outside the tensor: 8-bit types go as UINT8 (the byte 0 is
    # +0.0 in e4m3 and e5m2, and 0 in int8)
    "float8_e4m3": "CU_TENSOR_MAP_DATA_TYPE_UINT8",
    "float8_e5m2": "CU_TENSOR_MAP_DATA_TYPE_UINT8",
    "int8": "CU_TENSOR_MAP_DATA_TYPE_UINT8",
    "uint8": "CU_TENSOR_MAP_DATA_TYPE_UINT8",
    "int32": "CU_TENSOR_MAP_DATA_TYPE_INT32",
}

_SWIZZLES = {0: "CU_TENSOR_MAP_SWIZZLE_NONE", 32: "CU_TENSOR_MAP_SWIZZLE_32B", 64: "CU_TENSOR_MAP_SWIZZLE_64B",
             128: "CU_TENSOR_MAP_SWIZZLE_128B"}


class TensorMap:
    """A 64-byte aligned CUtensorMap (128 bytes) in host memory: the kernel parameter's value."""

    __slots__ = ("_storage", "address")

    def __init__(self) -> None:
        self._storage = ctypes.create_string_buffer(128 + 64)
        base = ctypes.addressof(self._storage)
        self.address = base + (-base % 64)

    def replace_address(self, pointer: int) -> None:
        """Point the map at another tensor of the same shape and strides (16-byte aligned)."""
        lib = _libcuda()
        code = lib.cuTensorMapReplaceAddress(self.address, pointer)
        if code:
            raise ExecutionError(f"cuTensorMapReplaceAddress({pointer:#x}) failed: {_error_name(lib, code)}")


def encode_tiled(
    type_name: str, pointer: int, dims: Sequence[int], strides: Sequence[int], box: Sequence[int], swizzle: int = 128
) -> TensorMap:
    """A tiled tensor map: ``dims`` innermost first, byte ``strides`` of dims 1.., ``box`` per dim.

    Elements outside the tensor read as zeros. Raises ExecutionError with the driver's
    reason when TMA cannot describe the tensor (alignment, stride or box rules).
    """
    from cuda.bindings import driver  # noqa: F401  (enum values)

    rank = len(dims)
    if len(strides) != rank - 1 or len(box) != rank:
        raise ValueError(f"a rank-{rank} tensor map takes {rank - 1} strides and {rank} box extents")
    lib = _libcuda()
    tmap = TensorMap()
    u64s, u32s = ctypes.c_uint64 * rank, ctypes.c_uint32 * rank
    dims_c = u64s(*dims)
    strides_c = (ctypes.c_uint64 * max(rank - 1, 1))(*strides)
    box_c = u32s(*box)
    ones = u32s(*([1] * rank))
    code = lib.cuTensorMapEncodeTiled(
        tmap.address,
        _enum("CUtensorMapDataType", TENSOR_MAP_TYPES[type_name]),
        rank,
        pointer,
        dims_c,
        strides_c,
        box_c,
        ones,
        _enum("CUtensorMapInterleave", "CU_TENSOR_MAP_INTERLEAVE_NONE"),
        _enum("CUtensorMapSwizzle", _SWIZZLES[swizzle]),
        _enum("CUtensorMapL2promotion", "CU_TENSOR_MAP_L2_PROMOTION_L2_256B"),
        _enum("CUtensorMapFloatOOBfill", "CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE"),
    )
    if code:
        raise ExecutionError(
            f"cuTensorMapEncodeTiled refused a {type_name} tensor at {pointer:#x} with extents {tuple(dims)}, byte "
            f"strides {tuple(strides)} and box {tuple(box)}: {_error_name(lib, code)}"
        )
    return tmap


_SLOT_TYPES = {"u64": ctypes.c_uint64, "i32": ctypes.c_int32, "i64": ctypes.c_int64, "f32": ctypes.c_float,
               "f64": ctypes.c_double}


class ParameterBlock:
    """Storage for a kernel's parameters in order, and the pointer array cuLaunchKernel reads.

    ``kinds`` names each parameter: "map" (a TensorMap, set with :meth:`set_map`), a scalar
    slot "u64" (pointers), "i32", "i64", "f32", "f64" (set with :meth:`set`), or "bytesN"
    (N raw bytes, filled by :func:`parameters_of`). The
    driver copies the values at launch, so a block is reused call after call; a lock keeps
    two threads from filling it at once (take it with ``with block.lock:``).
    """

    __slots__ = ("kinds", "slots", "maps", "pointers", "lock")

    def __init__(self, kinds: Sequence[str]) -> None:
        self.kinds = tuple(kinds)
        self.slots: list[Any] = []
        self.maps: dict[int, TensorMap] = {}
        self.pointers = (ctypes.c_void_p * len(self.kinds))()
        self.lock = threading.Lock()
        for i, kind in enumerate(self.kinds):
            if kind == "map":
                self.slots.append(None)
            else:
                slot = (ctypes.c_char * int(kind[5:]))() if kind.startswith("bytes") else _SLOT_TYPES[kind]()
                self.slots.append(slot)
                self.pointers[i] = ctypes.addressof(slot)

    def set_map(self, index: int, tmap: TensorMap) -> None:
        """Parameter ``index`` is this tensor map (its bytes are read at launch)."""
        self.maps[index] = tmap
        self.pointers[index] = tmap.address

    def set(self, index: int, value: Any) -> None:
        """Scalar parameter ``index`` takes ``value``."""
        self.slots[index].value = value


def parameters_of(values: Sequence[Any]) -> ParameterBlock:
    """A block holding ``values`` as they are: TensorMaps, ints (addresses, 64-bit), numpy scalars (their bytes)."""
    import numpy as np

    kinds: list[str] = []
    for value in values:
        if isinstance(value, TensorMap):
            kinds.append("map")
        elif isinstance(value, np.generic):
            kinds.append(f"bytes{value.dtype.itemsize}")
        else:
            kinds.append("u64")
    block = ParameterBlock(kinds)
    for i, value in enumerate(values):
        if isinstance(value, TensorMap):
            block.set_map(i, value)
        elif isinstance(value, np.generic):
            raw = value.tobytes()
            ctypes.memmove(block.pointers[i], raw, len(raw))
        else:
            block.set(i, int(value))
    return block


class _LaunchAttribute(ctypes.Structure):
    """CUlaunchAttribute: an id, padding, and a 64-byte value union."""

    _fields_ = [("id", ctypes.c_int), ("pad", ctypes.c_char * 4), ("value", ctypes.c_uint * 16)]


class _LaunchConfig(ctypes.Structure):
    """CUlaunchConfig."""

    _fields_ = [("grid", ctypes.c_uint * 3), ("block", ctypes.c_uint * 3), ("shared_memory", ctypes.c_uint),
                ("stream", ctypes.c_void_p), ("attrs", ctypes.POINTER(_LaunchAttribute)), ("count", ctypes.c_uint)]


def _cluster_config(grid: tuple[int, int, int], block: tuple[int, int, int], shared_memory: int, stream: int,
                    cluster: int) -> tuple[_LaunchConfig, _LaunchAttribute]:
    attribute = _LaunchAttribute()
    attribute.id = _enum("CUlaunchAttributeID", "CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION")
    attribute.value[0], attribute.value[1], attribute.value[2] = cluster, 1, 1
    config = _LaunchConfig((ctypes.c_uint * 3)(*grid), (ctypes.c_uint * 3)(*block), shared_memory, stream,
                           ctypes.pointer(attribute), 1)
    return config, attribute


def allocate_async(nbytes: int, stream: int) -> int:
    """cuMemAllocAsync: ``nbytes`` of device memory from the current device's pool, ordered on ``stream``."""
    lib = _libcuda()
    pointer = ctypes.c_uint64()
    code = lib.cuMemAllocAsync(ctypes.byref(pointer), nbytes, stream)
    if code:
        raise DeviceError(f"cuMemAllocAsync of {nbytes} bytes failed: {_error_name(lib, code)}")
    return pointer.value


def zero_async(pointer: int, words: int, stream: int) -> None:
    """cuMemsetD32Async: ``words`` 32-bit words at ``pointer`` set to zero, ordered on ``stream``."""
    lib = _libcuda()
    code = lib.cuMemsetD32Async(pointer, 0, words, stream)
    if code:
        raise DeviceError(f"cuMemsetD32Async({pointer:#x}, {words} words) failed: {_error_name(lib, code)}")


def free_async(pointer: int, stream: int) -> None:
    """cuMemFreeAsync: give ``pointer`` back once the work queued on ``stream`` before now is done."""
    lib = _libcuda()
    code = lib.cuMemFreeAsync(pointer, stream)
    if code:
        raise DeviceError(f"cuMemFreeAsync({pointer:#x}) failed: {_error_name(lib, code)}")


def is_capturing(stream: int) -> bool:
    """Whether ``stream`` is capturing a CUDA graph (or holds a capture an error invalidated).

    DeviceError when the driver cannot say: the legacy default stream while another stream
    of its context captures, which no work may use then.
    """
    lib = _libcuda()
    status = ctypes.c_int()
    code = lib.cuStreamIsCapturing(stream, ctypes.byref(status))
    if code:
        raise DeviceError(f"stream {stream:#x}: cuStreamIsCapturing failed: {_error_name(lib, code)} (the legacy "
                          "default stream cannot take work while another stream captures a CUDA graph)")
    return status.value != 0


def max_active_clusters(function: int, block: tuple[int, int, int], shared_memory: int, cluster: int) -> int | None:
    """How many clusters of ``cluster`` blocks of ``function`` the current device runs at once (None: unknown)."""
    lib = _libcuda()
    try:
        handle = ctypes.c_void_p()
        if lib.cuKernelGetFunction(ctypes.byref(handle), function):  # a CUfunction already
            handle = ctypes.c_void_p(function)
        config, _attribute = _cluster_config((cluster, 1, 1), block, shared_memory, 0, cluster)
        count = ctypes.c_int()
        if lib.cuOccupancyMaxActiveClusters(ctypes.byref(count), handle, ctypes.byref(config)):
            return None
        return count.value
    except AttributeError:  # a driver without these entry points
        return None


def launch(function: int, grid: tuple[int, int, int], block: tuple[int, int, int], shared_memory: int, stream: int,
           params: ParameterBlock, cluster: int = 1) -> None:
    """Launch ``function`` (a CUfunction or CUkernel address) in the current context; ``cluster`` blocks along x."""
    lib = _libcuda()
    if cluster == 1:
        code = lib.cuLaunchKernel(function, *grid, *block, shared_memory, stream, params.pointers, None)
    else:
        config, _attribute = _cluster_config(grid, block, shared_memory, stream, cluster)
        code = lib.cuLaunchKernelEx(ctypes.byref(config), function, params.pointers, None)
    if code:
        raise DeviceError(f"cuLaunchKernel failed: {_error_name(lib, code)} (grid {grid}, block {block}, "
                          f"{shared_memory} bytes of shared memory, clusters of {cluster})")


# ---------------------------------------------------------------------------------------------
# packed launches of blasdx's own kernels (through cuda.bindings)
# ---------------------------------------------------------------------------------------------

#: struct format of each slot kind, padded to 8 bytes.
SLOT_FORMATS = {"P": "Q", "q": "q", "d": "d", "i": "i4x", "f": "f4x"}
_SLOT_BYTES = 8

_STREAMS: dict[int, Any] = {}


def stream_object(handle: int) -> Any:
    """The driver ``CUstream`` of ``handle`` (memoised: building one per launch costs more than the look-up)."""
    found = _STREAMS.get(handle)
    if found is None:
        if len(_STREAMS) > 256:
            _STREAMS.clear()
        found = _STREAMS[handle] = _devices.driver().CUstream(handle)
    return found


class _Buffers:
    """One thread's parameter block of a PackedLaunch: the slots and the pointer array the driver reads."""

    __slots__ = ("data", "pointers", "address")

    def __init__(self, count: int) -> None:
        self.data = (ctypes.c_uint64 * max(count, 1))()
        base = ctypes.addressof(self.data)
        self.pointers = (ctypes.c_void_p * max(count, 1))(*(base + _SLOT_BYTES * i for i in range(count)))
        self.address = ctypes.addressof(self.pointers)


class PackedLaunch:
    """One loaded kernel with a fixed parameter list: ``launch(grid_x, grid_y, stream_handle, *values)``."""

    __slots__ = ("name", "slots", "block", "shared_memory", "_function", "_struct", "_local", "_driver")

    def __init__(
        self, kernel: Any, slots: str, block: tuple[int, int, int], shared_memory: int, name: str = ""
    ) -> None:
        unknown = sorted(set(slots) - set(SLOT_FORMATS))
        if unknown:
            raise ValueError(
                f"slots={slots!r}: unknown slot kinds {unknown}; expected letters of {''.join(SLOT_FORMATS)}"
            )
        drv = _devices.driver()
        self.name = name
        self.slots = slots
        self.block = tuple(int(v) for v in block)
        self.shared_memory = int(shared_memory)
        self._function = drv.CUfunction(int(kernel.handle))
        self._struct = struct.Struct("<" + "".join(SLOT_FORMATS[s] for s in slots))
        self._local = threading.local()
        self._driver = drv

    def buffers(self) -> _Buffers:
        """The calling thread's parameter block (made on its first launch)."""
        try:
            return self._local.buffers
        except AttributeError:
            found = self._local.buffers = _Buffers(len(self.slots))
            return found

    def launch(self, grid_x: int, grid_y: int, stream: int, *values: Any) -> None:
        """Pack ``values`` (one per slot) and launch on ``grid_x`` x ``grid_y`` blocks on stream handle ``stream``."""
        try:
            buffers = self._local.buffers
        except AttributeError:
            buffers = self.buffers()
        self._struct.pack_into(buffers.data, 0, *values)
        bx, by, bz = self.block
        found = _STREAMS.get(stream)
        (err,) = self._driver.cuLaunchKernel(
            self._function, grid_x, grid_y, 1, bx, by, bz, self.shared_memory,
            found if found is not None else stream_object(stream), buffers.address, 0,
        )
        if err:
            raise DeviceError(
                f"launching {self.name or 'the kernel'} on grid ({grid_x}, {grid_y}, 1), block {self.block}, "
                f"{self.shared_memory} B of shared memory failed: {getattr(err, 'name', err)}"
            )


def core_launch(stream: Any, config: Any, kernel: Any, *args: Any) -> None:
    """``cuda.core.launch(stream, config, kernel, *args)``: for kernels whose parameters the user typed (fusion)."""
    launch = _CORE_LAUNCH[0] if _CORE_LAUNCH else _load_core_launch()
    launch(stream, config, kernel, *args)


_CORE_LAUNCH: list[Any] = []


def _load_core_launch() -> Any:
    """cuda.core.launch, imported on first use."""
    from . import cuda_modules

    _CORE_LAUNCH[:] = [cuda_modules.core().launch]
    return _CORE_LAUNCH[0]
