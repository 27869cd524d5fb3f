"""The one driver layer: every CUDA driver call blasdx makes to run its kernels, and its launches.

Every launch goes one way: ``cuLaunchKernel`` (``cuLaunchKernelEx`` for clusters), by the
kernel's CUfunction in the current context (:func:`function_of`; a launch by CUkernel makes
the driver look that function up on every call), with the parameters as one packed block of
8-byte slots and the array of slot pointers the driver reads. The driver copies the
parameters before the launch returns, so a block is reused call after call. The call itself
goes through blasdx's C launch call where blasdx.compile.host_launch could build it
(:func:`use_host_launch`: plain integers in, no argument objects; about 1.5 us less per
launch), else through cuda.bindings; first launches, retries and clusters always take
cuda.bindings.

* Packed launches of blasdx's own kernels (:class:`PackedLaunch`): a kernel whose parameter
  list is fixed by its plan; a launch writes the values with one ``struct.pack_into`` into
  the calling thread's block (``cuda.core.launch`` converts every argument on every call
  and rebuilds its configuration).
* Parameter blocks with tensor maps (:class:`ParameterBlock`, :func:`launch`): a TMA kernel
  takes its maps by value (128-byte ``CUtensorMap`` parameters); the Hopper engine keeps one
  block per plan (slots written in place, runs of them with one ``struct.pack_into``) and
  launches it, in clusters where the plan says.
* Tensor maps (:func:`encode_tiled`, :meth:`TensorMap.replace_address`, which keeps the
  encoded bytes of the addresses it has seen, so a map re-pointed at a known address is a
  128-byte copy and no driver call), stream-ordered allocation (:func:`allocate_async`,
  :func:`free_async`), whether a stream captures a CUDA graph (:func:`is_capturing`) and
  cluster occupancy.
* ``cuda.core.launch`` for kernels whose parameters the user typed (:func:`core_launch`).

Only ``cuTensorMapEncodeTiled`` goes through ctypes: it writes into blasdx's own 64-byte
aligned storage (once per plan). Launches run in the current context: callers make the
operands' device current first (:func:`blasdx.launch.devices.enter`). Enum values come from
cuda.bindings, the library's own names for them.
"""

from __future__ import annotations

import ctypes
import struct
import threading
from collections.abc import Sequence
from typing import Any

from ..base.errors import DeviceError, ExecutionError
from . import devices as _devices
from .caches import remember

__all__ = [
    "TensorMap", "ParameterBlock", "PackedLaunch", "SLOT_FORMATS", "TENSOR_MAP_TYPES", "allocate_async",
    "core_launch", "encode_tiled", "free_async", "function_of", "is_capturing", "launch", "max_active_clusters",
    "parameters_of", "stream_object", "use_host_launch", "zero_async",
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
            p = ctypes.c_void_p
            lib.cuTensorMapEncodeTiled.argtypes = [
                p, ctypes.c_int, ctypes.c_uint32, p, p, p, p, p, ctypes.c_int, ctypes.c_int, ctypes.c_int,
                ctypes.c_int,
            ]
            lib.cuTensorMapEncodeTiled.restype = ctypes.c_int
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
    """A 64-byte aligned CUtensorMap (128 bytes) in host memory: the kernel parameter's value.

    :meth:`replace_address` keeps the bytes the driver encoded for each address it was
    pointed at (the map's shape, strides and box never change), so pointing it again at an
    address seen before copies those bytes back and makes no driver call.
    """

    __slots__ = ("_storage", "address", "_bytes", "_known", "_wrapped")

    KNOWN_LIMIT = 64  # addresses whose encoding a map keeps

    def __init__(self) -> None:
        self._storage = ctypes.create_string_buffer(128 + 64)
        base = ctypes.addressof(self._storage)
        self.address = base + (-base % 64)
        self._bytes = memoryview((ctypes.c_ubyte * 128).from_address(self.address)).cast("B")
        self._known: dict[int, bytes] = {}
        self._wrapped: Any = None

    def remember(self, pointer: int) -> None:
        """The map now holds ``pointer``'s encoding: keep it for later re-pointing."""
        if len(self._known) >= self.KNOWN_LIMIT:
            self._known.clear()
        self._known[pointer] = self._bytes.tobytes()

    def replace_address(self, pointer: int) -> None:
        """Point the map at another tensor of the same shape and strides (16-byte aligned)."""
        found = self._known.get(pointer)
        if found is not None:
            self._bytes[:] = found
            return
        drv = _devices.driver()
        wrapped = self._wrapped
        if wrapped is None:
            wrapped = self._wrapped = drv.CUtensorMap(_ptr=self.address)
        (err,) = drv.cuTensorMapReplaceAddress(wrapped, pointer)
        if int(err):
            raise ExecutionError(f"cuTensorMapReplaceAddress({pointer:#x}) failed: {getattr(err, 'name', err)}")
        self.remember(pointer)


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
    tmap.remember(pointer)
    return tmap


#: struct format of each slot kind, padded to 8 bytes: PackedLaunch's letters and ParameterBlock's names.
SLOT_FORMATS = {"P": "Q", "q": "q", "d": "d", "i": "i4x", "f": "f4x"}
_KIND_FORMATS = {"u64": "Q", "i64": "q", "f64": "d", "i32": "i4x", "f32": "f4x"}
_SLOT_BYTES = 8
_STRUCTS: dict[str, struct.Struct] = {}


def _struct(formats: str) -> struct.Struct:
    """The little-endian struct of consecutive 8-byte slots (memoised)."""
    found = _STRUCTS.get(formats)
    if found is None:
        found = _STRUCTS[formats] = struct.Struct("<" + formats)
    return found


class ParameterBlock:
    """A kernel's parameters in order, in one buffer of 8-byte slots, and the pointer array cuLaunchKernel reads.

    ``kinds`` names each parameter: "map" (a TensorMap, set with :meth:`set_map`), a scalar
    slot "u64" (pointers), "i32", "i64", "f32", "f64" (set with :meth:`set`, or a run of them
    at once with :meth:`packer`), or "bytesN" (N raw bytes, filled by :func:`parameters_of`).
    The driver copies the values at launch, so a block is reused call after call; a lock
    keeps two threads from filling it at once (take it with ``with block.lock:``).
    """

    __slots__ = ("kinds", "data", "offsets", "maps", "pointers", "address", "lock")

    def __init__(self, kinds: Sequence[str]) -> None:
        self.kinds = tuple(kinds)
        offsets, size = [], 0
        for kind in self.kinds:
            offsets.append(size)
            if kind != "map":
                width = int(kind[5:]) if kind.startswith("bytes") else _SLOT_BYTES
                size += -(-width // _SLOT_BYTES) * _SLOT_BYTES
        self.offsets = tuple(offsets)
        self.data = (ctypes.c_uint64 * max(size // _SLOT_BYTES, 1))()
        base = ctypes.addressof(self.data)
        self.maps: dict[int, TensorMap] = {}
        self.pointers = (ctypes.c_void_p * max(len(self.kinds), 1))(
            *(0 if kind == "map" else base + offset for kind, offset in zip(self.kinds, self.offsets)))
        self.address = ctypes.addressof(self.pointers)
        self.lock = threading.Lock()

    def set_map(self, index: int, tmap: TensorMap) -> None:
        """Parameter ``index`` is this tensor map (its bytes are read at launch)."""
        self.maps[index] = tmap
        self.pointers[index] = tmap.address

    def set(self, index: int, value: Any) -> None:
        """Scalar parameter ``index`` takes ``value``."""
        _struct(_KIND_FORMATS[self.kinds[index]]).pack_into(self.data, self.offsets[index], value)

    def packer(self, first: int, count: int) -> tuple[Any, int]:
        """(pack_into, byte offset) writing scalar parameters ``first`` .. ``first + count - 1`` in one call:
        ``pack_into(block.data, offset, *values)``."""
        kinds = self.kinds[first:first + count]
        if len(kinds) != count or any(kind not in _KIND_FORMATS for kind in kinds):
            raise ValueError(f"parameters {first}..{first + count - 1} of {self.kinds} are not all scalar slots")
        return _struct("".join(_KIND_FORMATS[kind] for kind in kinds)).pack_into, self.offsets[first]

    def fill(self, values: Sequence[Any]) -> None:
        """Set every scalar parameter in order (None: a map, set by the caller)."""
        for i, value in enumerate(values):
            if value is not None:
                self.set(i, value)


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


def _check(err: Any, what: str) -> None:
    if int(err):
        raise DeviceError(f"{what} failed: {getattr(err, 'name', err)}")


def allocate_async(nbytes: int, stream: int) -> int:
    """cuMemAllocAsync: ``nbytes`` of device memory from the current device's pool, ordered on ``stream``."""
    err, pointer = _devices.driver().cuMemAllocAsync(nbytes, stream_object(stream))
    _check(err, f"cuMemAllocAsync of {nbytes} bytes")
    return int(pointer)


def zero_async(pointer: int, words: int, stream: int) -> None:
    """cuMemsetD32Async: ``words`` 32-bit words at ``pointer`` set to zero, ordered on ``stream``."""
    (err,) = _devices.driver().cuMemsetD32Async(pointer, 0, words, stream_object(stream))
    _check(err, f"cuMemsetD32Async({pointer:#x}, {words} words)")


def free_async(pointer: int, stream: int) -> None:
    """cuMemFreeAsync: give ``pointer`` back once the work queued on ``stream`` before now is done."""
    (err,) = _devices.driver().cuMemFreeAsync(pointer, stream_object(stream))
    _check(err, f"cuMemFreeAsync({pointer:#x})")


def is_capturing(stream: int) -> bool:
    """Whether ``stream`` is capturing a CUDA graph (or holds a capture an error invalidated).

    DeviceError when the driver cannot say: the legacy default stream while another stream
    of its context captures, which no work may use then.
    """
    found = _STREAMS.get(stream)
    loaded = _devices._DRIVER  # asked on every split-K call: the driver module without a frame
    drv = loaded[0] if loaded else _devices.driver()
    err, status = drv.cuStreamIsCapturing(found if found is not None else stream_object(stream))
    if err:
        raise DeviceError(f"stream {stream:#x}: cuStreamIsCapturing failed: {getattr(err, 'name', err)} (the "
                          "legacy default stream cannot take work while another stream captures a CUDA graph)")
    return int(status) != 0


def function_of(handle: int) -> Any:
    """The driver CUfunction of the CUkernel ``handle`` in the current context, for :func:`launch`.

    A launch by CUfunction costs the driver less than one by CUkernel (which it resolves on
    every call). Where the driver has no such function (``handle`` is a CUfunction
    already), the handle itself.
    """
    drv = _devices.driver()
    try:
        err, function = drv.cuKernelGetFunction(drv.CUkernel(handle))
        if not int(err):
            return function
    except (AttributeError, TypeError):  # a driver module without the library API
        pass
    return drv.CUfunction(handle)


def _cluster_config(drv: Any, grid: tuple[int, int, int], block: tuple[int, int, int], shared_memory: int,
                    stream: Any, cluster: int) -> Any:
    """A CUlaunchConfig of ``cluster`` blocks along x."""
    attribute = drv.CUlaunchAttribute()
    attribute.id = drv.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
    attribute.value.clusterDim.x, attribute.value.clusterDim.y, attribute.value.clusterDim.z = cluster, 1, 1
    config = drv.CUlaunchConfig()
    config.gridDimX, config.gridDimY, config.gridDimZ = grid
    config.blockDimX, config.blockDimY, config.blockDimZ = block
    config.sharedMemBytes = shared_memory
    config.hStream = stream
    config.attrs = [attribute]
    config.numAttrs = 1
    return config


def max_active_clusters(function: Any, block: tuple[int, int, int], shared_memory: int, cluster: int) -> int | None:
    """How many clusters of ``cluster`` blocks of ``function`` (a CUfunction, or a CUkernel address) the current
    device runs at once (None: unknown)."""
    drv = _devices.driver()
    try:
        if isinstance(function, int):
            function = function_of(function)
        config = _cluster_config(drv, (cluster, 1, 1), block, shared_memory, stream_object(0), cluster)
        err, count = drv.cuOccupancyMaxActiveClusters(function, config)
        return None if int(err) else int(count)
    except AttributeError:  # a driver without these entry points
        return None


#: The CUlaunchConfigs of cluster launches by (grid, block, shared memory, stream handle, cluster, driver).
_CONFIGS: dict[tuple[Any, ...], Any] = {}

#: Launch results that mean the CUfunction belongs to another context of the device (one the caller made
#: current): CUDA_ERROR_INVALID_CONTEXT, CUDA_ERROR_INVALID_HANDLE. The CUkernel launches in any context.
_OTHER_CONTEXT = (201, 400)

#: blasdx's launch call in C (blasdx.compile.host_launch) once installed: ``launch`` and ``launch_pointers``
#: take the function, the stream and the parameter arrays as plain integers; None: launches go through
#: cuda.bindings.
_host: Any = None


def use_host_launch(module: Any) -> None:
    """Launch through ``module`` (the C launch call, its entry points set) from now on; None: through cuda.bindings."""
    global _host
    _host = module


def _result_name(err: Any) -> str:
    """A launch result's name, whether cuda.bindings' enum or the C call's integer."""
    if isinstance(err, int):
        try:
            return _devices.driver().CUresult(err).name
        except ValueError:
            return f"CUresult {err}"
    return getattr(err, "name", str(err))


def launch(function: Any, grid: tuple[int, int, int], block: tuple[int, int, int], shared_memory: int, stream: int,
           params: ParameterBlock, cluster: int = 1, kernel: int | None = None) -> None:
    """Launch ``function`` (a CUfunction from :func:`function_of`, or a CUkernel address) in the current context;
    ``cluster`` blocks along x. ``kernel``: the CUkernel address, launched instead when ``function`` belongs to
    another context than the current one."""
    host = _host
    if cluster == 1 and host is not None and grid[2] == 1:
        gx, gy, _ = grid
        bx, by, bz = block
        err = host.launch(int(function), gx, gy, bx, by, bz, shared_memory, stream, params.address)
        if err and kernel is not None and err in _OTHER_CONTEXT:
            err = host.launch(kernel, gx, gy, bx, by, bz, shared_memory, stream, params.address)
        if err:
            raise DeviceError(f"cuLaunchKernel failed: {_result_name(err)} (grid {grid}, block {block}, "
                              f"{shared_memory} bytes of shared memory)")
        return
    drv = _devices.driver()
    found = _STREAMS.get(stream)
    handle = found if found is not None else stream_object(stream)
    if cluster == 1:  # the dimensions unpacked, not splatted: no argument tuple is built per call
        gx, gy, gz = grid
        bx, by, bz = block
        (err,) = drv.cuLaunchKernel(function, gx, gy, gz, bx, by, bz, shared_memory, handle, params.address, 0)
        if err and kernel is not None and int(err) in _OTHER_CONTEXT:
            (err,) = drv.cuLaunchKernel(drv.CUfunction(kernel), gx, gy, gz, bx, by, bz, shared_memory, handle,
                                        params.address, 0)
    else:
        key = (grid, block, shared_memory, stream, cluster, drv)
        config = _CONFIGS.get(key)
        if config is None:  # built once per geometry and stream (the driver only reads it)
            config = remember(_CONFIGS, key, _cluster_config(drv, grid, block, shared_memory, handle, cluster), 256)
        (err,) = drv.cuLaunchKernelEx(config, function, params.address, 0)
        if err and kernel is not None and int(err) in _OTHER_CONTEXT:
            (err,) = drv.cuLaunchKernelEx(config, drv.CUfunction(kernel), params.address, 0)
    if err:
        raise DeviceError(f"cuLaunchKernel failed: {getattr(err, 'name', err)} (grid {grid}, block {block}, "
                          f"{shared_memory} bytes of shared memory, clusters of {cluster})")


# ---------------------------------------------------------------------------------------------
# packed launches of blasdx's own kernels
# ---------------------------------------------------------------------------------------------

_STREAMS: dict[int, Any] = {}


def stream_object(handle: int) -> Any:
    """The driver ``CUstream`` of ``handle`` (memoised: building one per launch costs more than the look-up)."""
    found = _STREAMS.get(handle)
    return found if found is not None else remember(_STREAMS, handle, _devices.driver().CUstream(handle), 256)


class _Buffers:
    """One thread's parameter block of a PackedLaunch: the slots, the pointer array the driver reads, the
    kernel's CUfunction in the context its launches run in (looked up at the thread's first launch), and the
    tail (:meth:`PackedLaunch.launch_pointers`) whose values the slots after the first three hold now."""

    __slots__ = ("data", "view", "pointers", "address", "slots", "function", "function_address", "tail")

    def __init__(self, count: int) -> None:
        self.data = (ctypes.c_uint64 * max(count, 1))()
        self.view = memoryview(self.data).cast("B")  # what launches pack into: cheaper to pack than the ctypes array
        base = self.slots = ctypes.addressof(self.data)
        self.pointers = (ctypes.c_void_p * max(count, 1))(*(base + _SLOT_BYTES * i for i in range(count)))
        self.address = ctypes.addressof(self.pointers)
        self.function: Any = None
        self.function_address = 0  # the CUfunction as an integer, for the C launch call
        self.tail: tuple[Any, ...] | None = None


class PackedLaunch:
    """One loaded kernel with a fixed parameter list: ``launch(grid_x, grid_y, stream_handle, *values)``, or, for a
    list that starts with three pointers, ``launch_pointers(grid_x, stream_handle, p0, p1, p2, tail)``."""

    __slots__ = ("name", "slots", "block", "shared_memory", "_kernel", "_struct", "_pack_head", "_local",
                 "_driver", "_geometry")

    def __init__(
        self, kernel: Any, slots: str, block: tuple[int, int, int], shared_memory: int, name: str = ""
    ) -> None:
        unknown = sorted(set(slots) - set(SLOT_FORMATS))
        if unknown:
            raise ValueError(
                f"slots={slots!r}: unknown slot kinds {unknown}; expected letters of {''.join(SLOT_FORMATS)}"
            )
        self.name = name
        self.slots = slots
        self.block = tuple(int(v) for v in block)
        self.shared_memory = int(shared_memory)
        self._kernel = int(kernel.handle)
        self._struct = struct.Struct("<" + "".join(SLOT_FORMATS[s] for s in slots))
        # packs the three pointers alone
        self._pack_head = _struct("QQQ").pack_into if slots[:3] == "PPP" else None
        self._local = threading.local()
        self._driver = _devices.driver()
        self._geometry = (*self.block, self.shared_memory)  # what every launch passes after the grid, in one load

    @property
    def _function(self) -> Any:
        """The kernel's handle as the driver takes it (the CUkernel address)."""
        return self._driver.CUfunction(self._kernel)

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
        self._struct.pack_into(buffers.view, 0, *values)
        buffers.tail = None
        host = _host
        if host is not None and buffers.function is not None:
            bx, by, bz, shared_memory = self._geometry
            if not host.launch(buffers.function_address, grid_x, grid_y, bx, by, bz, shared_memory, stream,
                               buffers.address):
                return
        self._launch(buffers, grid_x, grid_y, stream)  # the first launch, or a refused one: retries or raises

    def launch_pointers(self, grid_x: int, stream: int, p0: int, p1: int, p2: int, tail: tuple[Any, ...]) -> None:
        """:meth:`launch` of ``(p0, p1, p2, *tail)`` on ``grid_x`` blocks: the slots after the pointers are written
        only when ``tail`` is another object than the one they hold (a bound call keeps one tail per kind of call,
        of Python ints and floats), so a call writes three pointers."""
        if not self.try_launch_pointers(grid_x, stream, p0, p1, p2, tail):
            self._launch(self._local.buffers, grid_x, 1, stream)  # the first launch, or a failed one: _launch
            # retries or raises

    def try_launch_pointers(self, grid_x: int, stream: int, p0: int, p1: int, p2: int,
                            tail: tuple[Any, ...]) -> bool:
        """:meth:`launch_pointers` by the thread's CUfunction, whichever context is current; False, with nothing
        launched, on the thread's first launch or when the driver refuses (the function's context is not the
        current one and ``stream`` does not name it: a caller that did not make the device current does that
        and launches again)."""
        try:
            buffers = self._local.buffers
        except AttributeError:
            buffers = self.buffers()
        host = _host
        if buffers.tail is tail:
            if host is not None and buffers.function is not None:  # the C call writes the pointers and launches
                bx, by, bz, shared_memory = self._geometry
                return not host.launch_pointers(buffers.function_address, grid_x, bx, by, bz, shared_memory, stream,
                                                buffers.address, buffers.slots, p0, p1, p2)
            self._pack_head(buffers.view, 0, p0, p1, p2)
        else:
            self._struct.pack_into(buffers.view, 0, p0, p1, p2, *tail)
            buffers.tail = tail  # held here, so no other tuple can take its identity
        function = buffers.function
        if function is None:
            return False
        bx, by, bz, shared_memory = self._geometry
        if host is not None:
            return not host.launch(buffers.function_address, grid_x, 1, bx, by, bz, shared_memory, stream,
                                   buffers.address)
        found = _STREAMS.get(stream)
        (err,) = self._driver.cuLaunchKernel(function, grid_x, 1, 1, bx, by, bz, shared_memory,
                                             found if found is not None else stream_object(stream),
                                             buffers.address, 0)
        return not err

    def try_launch_pointers_on(self, device_id: int, grid_x: int, stream: int, p0: int, p1: int, p2: int,
                               tail: tuple[Any, ...]) -> bool:
        """:meth:`try_launch_pointers` with ``device_id`` current for the launch, in one C call: as it is when a
        context of the device is current, else with its primary context pushed around the launch. False, with
        nothing launched, where the C call is not installed, on the thread's first launch or when the driver
        refuses (the caller then makes the device current itself)."""
        host = _host
        if host is None:
            return False
        try:
            buffers = self._local.buffers
        except AttributeError:
            return False
        if buffers.function is None:
            return False
        if buffers.tail is not tail:
            self._struct.pack_into(buffers.view, 0, p0, p1, p2, *tail)
            buffers.tail = tail
        bx, by, bz, shared_memory = self._geometry
        return not host.launch_pointers_on(device_id, int(_devices.primary_context(device_id)),
                                           buffers.function_address, grid_x, bx, by, bz, shared_memory, stream,
                                           buffers.address, buffers.slots, p0, p1, p2)

    def _launch(self, buffers: _Buffers, grid_x: int, grid_y: int, stream: int) -> None:
        """cuLaunchKernel of the thread's block as packed, by the CUfunction of the current context."""
        function = buffers.function
        if function is None:
            function = buffers.function = function_of(self._kernel)
            buffers.function_address = int(function)
        bx, by, bz = self.block
        found = _STREAMS.get(stream)
        handle = found if found is not None else stream_object(stream)
        (err,) = self._driver.cuLaunchKernel(function, grid_x, grid_y, 1, bx, by, bz, self.shared_memory, handle,
                                             buffers.address, 0)
        if err and int(err) in _OTHER_CONTEXT:  # another context of the device is current: launch the CUkernel
            (err,) = self._driver.cuLaunchKernel(self._function, grid_x, grid_y, 1, bx, by, bz, self.shared_memory,
                                                 handle, buffers.address, 0)
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
