"""blasdx.arrays: dtype mapping, protocol parsing (CAI, DLPack, torch/cupy fast paths), streams,
DLPack export, DeviceArray metadata; and, on a GPU, to_device / from_device round trips.

CPU tests use fake objects: CAI dicts with fake device pointers, DLPack capsules made by
blasdx's own exporter (checked against numpy's importer over host memory), and stand-in
``torch`` / ``cupy`` modules placed in ``sys.modules``.
"""

from __future__ import annotations

import gc
import sys
import types

import ml_dtypes
import numpy as np
import pytest

import blasdx as bx
from blasdx import arrays
from blasdx.launch import devices
from blasdx.arrays import keys, streams
from blasdx.base import dtypes as dt
from blasdx.arrays import ArrayView, DeviceArray, as_array, array_dtype, resolve_stream, stream_handle
from blasdx.base.errors import ExecutionError

BASE = 0x7F00_0000_0000


class FakeCAI:
    """An object exporting __cuda_array_interface__ v3 over a fake device pointer."""

    def __init__(self, shape, dtype="float32", strides=None, ptr=BASE, readonly=False, stream=None, **extra):
        itemsize = np.dtype(dtype).itemsize if not isinstance(dtype, str) or not dtype.startswith(("<", "|")) else None
        typestr = np.dtype(dtype).str if itemsize else dtype
        self.__cuda_array_interface__ = {
            "shape": tuple(shape),
            "typestr": typestr,
            "data": (ptr, readonly),
            "strides": None if strides is None else tuple(s * (itemsize or 1) for s in strides),
            "version": 3,
            "stream": stream,
            **extra,
        }


@pytest.fixture(autouse=True)
def _fresh_caches():
    """Stand-in torch / cupy modules differ per test: forget the stream queries looked up in them."""
    for cache in (arrays._TORCH_STREAM, arrays._CUPY_STREAM, arrays._DEFAULT_STREAM):
        cache.clear()
    yield
    for cache in (arrays._TORCH_STREAM, arrays._CUPY_STREAM, arrays._DEFAULT_STREAM):
        cache.clear()


@pytest.fixture(autouse=True)
def _fake_pointers(request, monkeypatch):
    """CAI carries no device: on CPU tests pretend the driver places every fake pointer on device 0."""
    if request.node.get_closest_marker("gpu") is None:
        monkeypatch.setattr(devices, "pointer_device_id", lambda ptr, argument="array": 0)


# ---------------------------------------------------------------------------------------------
# dtype mapping
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value, name, parts",
    [
        (np.float16, "float16", None),
        ("float32", "float32", None),
        (np.dtype("float64"), "float64", None),
        (ml_dtypes.bfloat16, "bfloat16", None),
        (ml_dtypes.float8_e4m3fn, "float8_e4m3", None),
        (ml_dtypes.float8_e5m2, "float8_e5m2", None),
        (np.int8, "int8", None),
        (np.uint8, "uint8", None),
        (np.int32, "int32", None),
        (np.complex64, "complex64", "float32"),
        (np.complex128, "complex128", "float64"),
        (ml_dtypes.complex32, "complex32", "float16"),
        ("complex32", "complex32", "float16"),
    ],
)
def test_array_dtype_maps_to_blasdx_types(value, name, parts):
    d = array_dtype(value)
    assert d.name == name
    assert d.is_complex == (parts is not None)
    if parts:
        assert d == dt.complex_of(getattr(dt, parts))
        assert d.real_name == parts


def test_array_dtype_of_torch_names():
    class TorchDtype:  # what str(torch.complex32) looks like
        def __init__(self, name, itemsize):
            self.name, self.itemsize = name, itemsize

        def __str__(self):
            return f"torch.{self.name}"

    assert array_dtype(TorchDtype("complex32", 4)) == dt.complex_of(dt.float16)
    assert array_dtype(TorchDtype("float8_e4m3fn", 1)) == dt.float8_e4m3
    assert array_dtype(TorchDtype("bfloat16", 2)) == dt.bfloat16
    other = array_dtype(TorchDtype("int16", 2))
    assert other.name == "int16" and other.size == 2


def test_foreign_dtypes_equal_no_blasdx_type():
    d = array_dtype(np.int64)
    assert d.name == "int64" and d.size == 8
    assert d not in dt.REAL_DTYPES


@pytest.mark.parametrize(
    "code_bits, name",
    [((2, 16), "float16"), ((4, 16), "bfloat16"), ((2, 32), "float32"), ((5, 32), "complex32"),
     ((5, 64), "complex64"), ((5, 128), "complex128"), ((10, 8), "float8_e4m3"), ((12, 8), "float8_e5m2"),
     ((0, 8), "int8"), ((1, 8), "uint8"), ((0, 32), "int32"), ((0, 64), "int64")],
)
def test_dlpack_type_codes(code_bits, name):
    assert arrays._dl_dtype(*code_bits, 1, "a").name == name


def test_dlpack_ieee_e4m3_is_not_e4m3fn():
    assert arrays._dl_dtype(8, 8, 1, "a") != dt.float8_e4m3


def test_dlpack_vector_lanes_rejected():
    with pytest.raises(ExecutionError, match="a: DLPack vector element type"):
        arrays._dl_dtype(2, 32, 4, "a")


# ---------------------------------------------------------------------------------------------
# __cuda_array_interface__
# ---------------------------------------------------------------------------------------------


def test_cai_c_contiguous_default_strides():
    v = as_array(FakeCAI((3, 4), "float32"), "a")
    assert isinstance(v, ArrayView)
    assert v.shape == (3, 4) and v.strides == (4, 1)
    assert v.dtype == dt.float32 and v.device_id == 0 and v.ptr == BASE
    assert (v.low, v.high) == (BASE, BASE + 12 * 4)
    assert v.stream is None and not v.readonly


def test_cai_byte_strides_become_element_strides():
    v = as_array(FakeCAI((3, 4), "float16", strides=(1, 8)), "a")  # column-major, ld 8
    assert v.strides == (1, 8)
    assert v.nbytes == ((3 - 1) * 1 + (4 - 1) * 8 + 1) * 2


def test_cai_complex_element_is_one_element():
    v = as_array(FakeCAI((2, 2), "complex64", strides=(1, 2)), "a")
    assert v.strides == (1, 2) and v.dtype == dt.complex_of(dt.float32)


def test_cai_negative_strides_span():
    v = as_array(FakeCAI((4,), "float32", strides=(-1,), ptr=BASE + 12), "a")
    assert (v.low, v.high) == (BASE, BASE + 16)


def test_cai_readonly_and_stream():
    v = as_array(FakeCAI((2, 2), readonly=True, stream=0xBEEF), "b")
    assert v.readonly and v.stream == 0xBEEF


def test_cai_null_stream_means_default():
    assert as_array(FakeCAI((2, 2), stream=0), "a").stream == arrays.default_stream_handle()


def test_cai_untyped_bf16_points_to_dlpack():
    with pytest.raises(ExecutionError, match=r"a: .*'<V2'.*DLPack"):
        as_array(FakeCAI((2, 2), "<V2"), "a")


def test_cai_strides_not_multiple_of_itemsize():
    obj = FakeCAI((2, 2), "float32")
    obj.__cuda_array_interface__["strides"] = (6, 4)
    with pytest.raises(ExecutionError, match="c: byte strides .* not multiples of the element size"):
        as_array(obj, "c")


def test_cai_mask_rejected():
    with pytest.raises(ExecutionError, match="masked"):
        as_array(FakeCAI((2,), mask=object()), "a")


def test_cai_device_comes_from_the_driver(monkeypatch):
    monkeypatch.setattr(devices, "pointer_device_id", lambda ptr, argument="array": 3)
    assert as_array(FakeCAI((2, 2)), "a").device_id == 3


def test_cai_malformed():
    class Bad:
        __cuda_array_interface__ = {"shape": (2,)}

    with pytest.raises(ExecutionError, match="a: malformed __cuda_array_interface__"):
        as_array(Bad(), "a")


# ---------------------------------------------------------------------------------------------
# host memory and other non-device objects
# ---------------------------------------------------------------------------------------------


def test_numpy_array_is_host_memory():
    with pytest.raises(ExecutionError, match=r"a: numpy\.ndarray of shape \(2, 3\) is in host memory; move it to the GPU \(bx\.to_device"):
        as_array(np.zeros((2, 3)), "a")


class HostDLPack:
    """A DLPack producer over host memory (what numpy-like CPU libraries look like)."""

    def __init__(self, arr):
        self.arr = arr

    def __dlpack_device__(self):
        return (arrays.KDL_CPU, 0)

    def __dlpack__(self, stream=None, max_version=None, dl_device=None, copy=None):
        return self.arr.__dlpack__()


def test_dlpack_cpu_is_host_memory():
    with pytest.raises(ExecutionError, match="b: .* is in host memory; move it to the GPU"):
        as_array(HostDLPack(np.zeros(3)), "b")


def test_list_is_not_an_array():
    with pytest.raises(ExecutionError, match="c: builtins.list is not a device array"):
        as_array([[1.0]], "c")


def test_cuda_core_buffer_must_be_wrapped():
    from cuda.core import Buffer

    with pytest.raises(ExecutionError, match=r"a: a cuda\.core Buffer is untyped bytes .*DeviceArray\.from_buffer"):
        as_array(Buffer.from_handle(BASE, 64), "a")


# ---------------------------------------------------------------------------------------------
# DLPack: reading and exporting capsules
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("versioned", [False, True])
def test_read_capsule_from_numpy(versioned):
    x = np.arange(12, dtype=np.float32).reshape(3, 4)[:, ::2]
    capsule = x.__dlpack__(max_version=(1, 0)) if versioned else x.__dlpack__()
    info = arrays.read_capsule(capsule)
    assert info.versioned == versioned
    assert info.ptr == x.ctypes.data
    assert info.shape == (3, 2) and info.strides == (4, 2)
    assert (info.code, info.bits, info.lanes) == (2, 32, 1)
    assert (info.device_type, info.device_id) == (arrays.KDL_CPU, 0)


class Exporter:
    """Exports ``arr`` through blasdx's capsule maker (host memory, so numpy can import it)."""

    def __init__(self, arr, legacy_only=False, device=(arrays.KDL_CPU, 0), ptr=None):
        self.arr, self.legacy_only, self.device, self.ptr = arr, legacy_only, device, ptr
        self.streams = []

    def __dlpack_device__(self):
        return self.device

    def __dlpack__(self, stream=None, max_version=None, dl_device=None, copy=None):
        self.streams.append(stream)
        versioned = not self.legacy_only and max_version is not None and max_version[0] >= 1
        strides = tuple(s // self.arr.itemsize for s in self.arr.strides)
        return arrays.make_capsule(
            self.ptr if self.ptr is not None else self.arr.ctypes.data, self.arr.shape, strides,
            arrays._dl_code_of(self.arr.dtype), self.device, self.arr, versioned=versioned,
        )


@pytest.mark.parametrize("legacy_only", [False, True])
@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64, np.complex64, np.complex128, np.int8,
                                   np.uint8, np.int32])
def test_exported_capsules_import_into_numpy(dtype, legacy_only):
    x = (np.arange(24) % 7).astype(dtype).reshape(2, 3, 4).transpose(0, 2, 1)
    y = np.from_dlpack(Exporter(x, legacy_only))
    assert y.dtype == x.dtype and y.shape == x.shape and y.strides == x.strides
    assert np.array_equal(x, y)
    assert y.ctypes.data == x.ctypes.data  # no copy
    del y
    gc.collect()
    assert not arrays._LIVE


def test_unconsumed_capsule_releases_its_owner():
    x = np.ones(3)
    capsule = Exporter(x).__dlpack__(max_version=(1, 0))
    assert len(arrays._LIVE) == 1
    del capsule
    gc.collect()
    assert not arrays._LIVE


def test_fp8_bf16_export_codes():
    assert arrays._dl_code_of(np.dtype(ml_dtypes.bfloat16)) == (4, 16)
    assert arrays._dl_code_of(np.dtype(ml_dtypes.float8_e4m3fn)) == (10, 8)
    assert arrays._dl_code_of(np.dtype(ml_dtypes.float8_e5m2)) == (12, 8)
    assert arrays._dl_code_of(np.dtype(ml_dtypes.complex32)) == (5, 32)


def test_dlpack_cuda_producer_view():
    host = np.zeros((4, 8), ml_dtypes.bfloat16)
    producer = Exporter(host, device=(arrays.KDL_CUDA, 1), ptr=BASE)
    v = as_array(producer, "a", stream=0x1234)
    assert producer.streams == [0x1234]  # the producer orders its work before the consumer stream
    assert v.ptr == BASE and v.shape == (4, 8) and v.strides == (8, 1)
    assert v.dtype == dt.bfloat16 and v.device_id == 1
    assert v.stream is None
    assert len(arrays._LIVE) == 1  # the view keeps the capsule (and so the producer's tensor) alive
    del v
    gc.collect()
    assert not arrays._LIVE


def test_dlpack_consumer_null_stream_is_default():
    producer = Exporter(np.zeros(2, np.float32), device=(arrays.KDL_CUDA, 0), ptr=BASE)
    as_array(producer, "a", stream=0)
    assert producer.streams == [arrays.default_stream_handle()]


def test_dlpack_other_device_type():
    producer = Exporter(np.zeros(2, np.float32), device=(10, 0), ptr=BASE)  # ROCm
    with pytest.raises(ExecutionError, match="a: .* DLPack device type 10; blasdx needs CUDA memory"):
        as_array(producer, "a")


# ---------------------------------------------------------------------------------------------
# DeviceArray metadata (no GPU: an int address stands in for the Buffer)
# ---------------------------------------------------------------------------------------------


def test_device_array_cai_and_view():
    x = DeviceArray(BASE, (3, 4), np.float32, strides=(4, 12), device_id=0)  # column-major
    cai = x.__cuda_array_interface__
    assert cai["shape"] == (3, 4) and cai["typestr"] == "<f4" and cai["data"] == (BASE, False)
    assert cai["strides"] == (4, 12) and cai["version"] == 3 and cai["stream"] is None
    v = as_array(x, "a")
    assert v.strides == (1, 3) and v.dtype == dt.float32 and v.owner is x
    assert DeviceArray(BASE, (3, 4), np.float32).__cuda_array_interface__["strides"] is None


def test_device_array_dlpack_capsule():
    x = DeviceArray(BASE, (2, 5), ml_dtypes.float8_e4m3fn, strides=(1, 2), device_id=1)
    assert x.__dlpack_device__() == (arrays.KDL_CUDA, 1)
    info = arrays.read_capsule(x.__dlpack__(max_version=(1, 0)))
    assert info.versioned and info.ptr == BASE and info.shape == (2, 5) and info.strides == (1, 2)
    assert (info.code, info.bits) == (10, 8) and (info.device_type, info.device_id) == (arrays.KDL_CUDA, 1)
    assert not arrays.read_capsule(x.__dlpack__()).versioned
    gc.collect()
    assert not arrays._LIVE


def test_device_array_dlpack_refusals():
    x = DeviceArray(BASE, (2,), np.float32, device_id=0)
    with pytest.raises(BufferError, match="copy=True"):
        x.__dlpack__(copy=True)
    with pytest.raises(BufferError, match="requested"):
        x.__dlpack__(dl_device=(arrays.KDL_CUDA, 3))


def test_device_array_pending_stream_is_exported():
    x = DeviceArray(BASE, (2, 2), np.float32, device_id=0)
    x._set_stream(0xABC)
    assert x.__cuda_array_interface__["stream"] == 0xABC
    assert as_array(x, "a").stream == 0xABC


def test_device_array_from_buffer_bounds():
    class FakeBuffer:
        handle, size, device_id = BASE, 64, 0

    x = DeviceArray.from_buffer(FakeBuffer(), (4, 4), np.float32)
    assert x.ptr == BASE and x.device_id == 0 and x.nbytes == 64
    with pytest.raises(ValueError, match="64-byte buffer"):
        DeviceArray.from_buffer(FakeBuffer(), (4, 5), np.float32)


# ---------------------------------------------------------------------------------------------
# torch / cupy fast paths (stand-in modules)
# ---------------------------------------------------------------------------------------------


def _fake_torch(current_stream=0):
    torch = types.ModuleType("torch")

    class Tensor:
        def __init__(self, shape, strides, name="float32", itemsize=4, ptr=BASE, device=0, cuda=True, conj=False,
                     neg=False):
            self.shape, self._strides, self._ptr, self._device = shape, strides, ptr, device
            self.dtype = _TorchDtype(name, itemsize)
            self.is_cuda, self._conj, self._neg, self._itemsize = cuda, conj, neg, itemsize
            self.device = types.SimpleNamespace(type="cuda" if cuda else "cpu", index=device)

        def stride(self):
            return self._strides

        def data_ptr(self):
            return self._ptr

        def get_device(self):
            return self._device

        def element_size(self):
            return self._itemsize

        def is_conj(self):
            return self._conj

        def is_neg(self):
            return self._neg

    torch.Tensor = Tensor
    torch._C = types.SimpleNamespace(_cuda_getCurrentRawStream=lambda device: current_stream)
    return torch


class _TorchDtype:
    def __init__(self, name, itemsize):
        self.name, self.itemsize = name, itemsize

    def __str__(self):
        return f"torch.{self.name}"

    def __hash__(self):
        return hash(self.name)

    def __eq__(self, other):
        return isinstance(other, _TorchDtype) and other.name == self.name


def test_torch_fast_path(monkeypatch):
    torch = _fake_torch(current_stream=0x5000)
    monkeypatch.setitem(sys.modules, "torch", torch)
    t = torch.Tensor((2, 3, 4), (12, 1, 3), name="float16", itemsize=2, device=0)
    v = as_array(t, "a")
    assert v.ptr == BASE and v.shape == (2, 3, 4) and v.strides == (12, 1, 3)
    assert v.dtype == dt.float16 and v.device_id == 0 and v.owner is t
    assert v.stream == 0x5000  # torch's current stream is the producer stream
    assert resolve_stream(None, (t,)) == 0x5000


def test_torch_default_stream_is_legacy(monkeypatch):
    torch = _fake_torch(current_stream=0)
    monkeypatch.setitem(sys.modules, "torch", torch)
    assert resolve_stream(None, (torch.Tensor((2,), (1,)),)) == arrays.default_stream_handle()


def test_torch_cpu_tensor_is_host_memory(monkeypatch):
    torch = _fake_torch()
    monkeypatch.setitem(sys.modules, "torch", torch)
    with pytest.raises(ExecutionError, match=r"b: torch.Tensor of shape \(2, 2\) is in host memory"):
        as_array(torch.Tensor((2, 2), (2, 1), cuda=False), "b")


def test_torch_lazy_conjugate_rejected(monkeypatch):
    torch = _fake_torch()
    monkeypatch.setitem(sys.modules, "torch", torch)
    with pytest.raises(ExecutionError, match=r"a: .*resolve_conj"):
        as_array(torch.Tensor((2, 2), (2, 1), name="complex64", itemsize=8, conj=True), "a")


def test_torch_pending_negation_rejected_and_keyless(monkeypatch):
    """A real tensor with the negation bit (the .imag of a .conj() view) holds the values before the negation: the
    full path refuses it and the hot path's readers give it no key, so a bound call never reads it raw."""
    torch = _fake_torch()
    monkeypatch.setitem(sys.modules, "torch", torch)
    plain = torch.Tensor((2, 2), (2, 1), name="float32")
    negated = torch.Tensor((2, 2), (2, 1), name="float32", neg=True)
    as_array(plain, "x")  # the dtype is known to the readers from here on
    assert keys.read(plain) is not None
    with pytest.raises(ExecutionError, match=r"y: .*negation.*resolve_neg"):
        as_array(negated, "y")
    assert keys.read(negated) is None
    gather = keys.gatherer(torch.Tensor)
    assert gather(plain, plain, plain) is not None
    for i in range(3):
        trio = [plain, plain, plain]
        trio[i] = negated
        assert gather(*trio) is None


def test_torch_subclasses_are_read_through_their_own_methods(monkeypatch):
    """Keys of torch.Tensor itself call its methods unbound; a subclass's keys go through the subclass's methods."""
    torch = _fake_torch()
    monkeypatch.setitem(sys.modules, "torch", torch)

    class Sub(torch.Tensor):
        def stride(self):
            return (99, 1)

    plain, sub = torch.Tensor((2, 2), (2, 1)), Sub((2, 2), (2, 1))
    as_array(plain, "x")  # the dtype is known to the readers from here on
    assert keys.read(plain)[0][2] == (2, 1) and keys.read(sub)[0][2] == (99, 1)
    assert keys.gatherer(torch.Tensor)(plain, plain, plain)[0][2] == (2, 1)
    assert keys.gatherer(Sub)(sub, sub, sub)[0][2] == (99, 1)


def _fake_cupy(current_stream=0):
    cupy = types.ModuleType("cupy")

    class ndarray:  # noqa: N801 - cupy's name
        def __init__(self, shape, dtype, strides_bytes, ptr=BASE, device=0):
            self.shape, self.dtype, self.strides = shape, np.dtype(dtype), strides_bytes
            self.itemsize = self.dtype.itemsize
            self.data = types.SimpleNamespace(ptr=ptr, device_id=device)

    cupy.ndarray = ndarray
    streams = {0: types.SimpleNamespace(ptr=current_stream), 1: types.SimpleNamespace(ptr=current_stream + 0x100)}
    cupy.cuda = types.SimpleNamespace(get_current_stream=lambda device_id=-1: streams[max(device_id, 0)])
    return cupy


def test_cupy_fast_path(monkeypatch):
    cupy = _fake_cupy(current_stream=0x7000)
    monkeypatch.setitem(sys.modules, "cupy", cupy)
    x = cupy.ndarray((3, 4), np.complex64, (8, 24), device=1)
    v = as_array(x, "c")
    assert v.strides == (1, 3) and v.dtype == dt.complex_of(dt.float32) and v.device_id == 1
    assert v.stream == 0x7100 and not v.readonly  # CuPy's current stream on the array's device, 1
    assert resolve_stream(None, (x,)) == 0x7100
    y = cupy.ndarray((3, 4), np.float32, (16, 4), device=0)
    assert as_array(y, "a").stream == 0x7000 and resolve_stream(None, (y, x)) == 0x7000


# ---------------------------------------------------------------------------------------------
# streams
# ---------------------------------------------------------------------------------------------


def test_stream_int_handles():
    assert stream_handle(0x1234) == 0x1234
    assert stream_handle(np.int64(0x1234)) == 0x1234
    assert stream_handle(0) == arrays.default_stream_handle()


def test_stream_per_thread_default(monkeypatch):
    monkeypatch.setenv("CUDA_PYTHON_CUDA_PER_THREAD_DEFAULT_STREAM", "1")
    arrays._DEFAULT_STREAM.clear()
    assert stream_handle(0) == arrays.PER_THREAD_STREAM
    assert resolve_stream(None) == arrays.PER_THREAD_STREAM
    monkeypatch.setenv("CUDA_PYTHON_CUDA_PER_THREAD_DEFAULT_STREAM", "0")
    arrays._DEFAULT_STREAM.clear()
    assert resolve_stream(None) == arrays.LEGACY_STREAM


def test_stream_protocol_objects():
    class Protocol:
        def __cuda_stream__(self):
            return (0, 0xA000)

    class CupyStream:
        ptr = 0xB000

    class TorchStream:
        cuda_stream = 0xC000

    assert stream_handle(Protocol()) == 0xA000
    assert stream_handle(CupyStream()) == 0xB000
    assert stream_handle(TorchStream()) == 0xC000


def test_stream_cuda_core_and_bindings_objects():
    from cuda.bindings import driver
    from cuda.core import Stream

    assert stream_handle(Stream.from_handle(0xD000)) == 0xD000
    assert stream_handle(driver.CUstream(0xE000)) == 0xE000


@pytest.mark.parametrize("bad, match", [(-1, "negative"), (True, "not a stream"), ("s", "not a stream"),
                                        (1.5, "not a stream")])
def test_stream_rejects(bad, match):
    with pytest.raises(ExecutionError, match=f"stream: .*{match}"):
        stream_handle(bad)


def test_resolve_stream_without_library_is_default():
    assert resolve_stream(None, (FakeCAI((2,)),)) == arrays.default_stream_handle()


def test_core_stream_maps_default_handles():
    import cuda.core as core

    assert arrays.core_stream(arrays.LEGACY_STREAM) is core.LEGACY_DEFAULT_STREAM
    s = arrays.core_stream(0xF000)
    assert int(s.handle) == 0xF000 and arrays.core_stream(0xF000) is s


def test_wait_for_producers_skips_own_stream(monkeypatch):
    monkeypatch.setattr(streams, "core_stream", lambda handle: handle)
    waited = []
    consumer = types.SimpleNamespace(wait=waited.append)
    arrays.wait_for_producers(consumer, 0x10, (None, 0x10, 0x20))
    assert waited == [0x20]


# ---------------------------------------------------------------------------------------------
# GPU: to_device / from_device and interop
# ---------------------------------------------------------------------------------------------


def _gpu_available() -> bool:
    try:
        from cuda.core import Device, system

        if system.get_num_devices() < 1:
            return False
        Device(0).set_current()
        return True
    except Exception:
        return False


needs_gpu = pytest.mark.skipif(not _gpu_available(), reason="needs an NVIDIA GPU")

ROUND_TRIP_DTYPES = [np.float16, ml_dtypes.bfloat16, np.float32, np.float64, np.complex64, np.complex128,
                     np.int8, np.uint8, np.int32, ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2]


def _host(shape, dtype, rng):
    data = rng.standard_normal(shape) * 3
    if np.dtype(dtype).kind == "c":
        data = data + 1j * rng.standard_normal(shape)
    return data.astype(dtype)


@pytest.mark.gpu
@needs_gpu
@pytest.mark.parametrize("dtype", ROUND_TRIP_DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("layout", ["C", "F", "padded", "batched-F"])
def test_to_device_from_device_round_trip(dtype, layout):
    rng = np.random.default_rng(0)
    if layout == "C":
        host = _host((5, 7), dtype, rng)
    elif layout == "F":
        host = np.asfortranarray(_host((5, 7), dtype, rng))
    elif layout == "padded":
        host = _host((5, 16), dtype, rng)[:, :7]
    else:
        host = _host((3, 7, 5), dtype, rng).transpose(0, 2, 1)
    d = bx.to_device(host)
    assert d.shape == host.shape and d.dtype == host.dtype and d.strides == host.strides
    back = bx.from_device(d)
    assert back.dtype == host.dtype and back.shape == host.shape
    assert np.ascontiguousarray(back).tobytes() == np.ascontiguousarray(host).tobytes()


@pytest.mark.gpu
@needs_gpu
def test_to_device_empty_and_scalar():
    e = bx.to_device(np.zeros((0, 4), np.float32))
    assert bx.from_device(e).shape == (0, 4)
    s = bx.to_device(np.float64(2.5))
    assert bx.from_device(s)[()] == 2.5


@pytest.mark.gpu
@needs_gpu
def test_device_array_into_cupy_and_back():
    cupy = pytest.importorskip("cupy")
    host = np.asfortranarray(np.arange(12, dtype=np.float32).reshape(3, 4))
    d = bx.to_device(host)
    via_cai = cupy.asarray(d)  # __cuda_array_interface__
    assert via_cai.data.ptr == d.ptr and via_cai.strides == host.strides
    via_dlpack = cupy.from_dlpack(d)
    assert via_dlpack.data.ptr == d.ptr
    np.testing.assert_array_equal(cupy.asnumpy(via_dlpack), host)
    np.testing.assert_array_equal(bx.from_device(via_cai * 2), host * 2)


@pytest.mark.gpu
@needs_gpu
@pytest.mark.parametrize("dtype", [np.float16, ml_dtypes.bfloat16, np.complex64, ml_dtypes.float8_e4m3fn])
def test_device_array_into_torch_and_back(dtype):
    torch = pytest.importorskip("torch")
    host = _host((4, 6), dtype, np.random.default_rng(1))
    d = bx.to_device(host)
    t = torch.from_dlpack(d)
    assert t.data_ptr() == d.ptr and tuple(t.shape) == host.shape and t.is_cuda
    back = bx.from_device(t)
    assert back.dtype == host.dtype
    assert back.tobytes() == host.tobytes()
    del t
    gc.collect()


@pytest.mark.gpu
@needs_gpu
def test_torch_tensors_read_directly():
    torch = pytest.importorskip("torch")
    t = torch.arange(24, dtype=torch.float32, device="cuda").reshape(2, 3, 4).transpose(1, 2)
    v = as_array(t, "a")
    assert v.ptr == t.data_ptr() and v.strides == tuple(t.stride()) and v.device_id == t.get_device()
    np.testing.assert_array_equal(bx.from_device(t), t.cpu().numpy())
    c32 = torch.ones((2, 2), dtype=torch.complex32, device="cuda")
    assert as_array(c32, "a").dtype == dt.complex_of(dt.float16)


@pytest.mark.gpu
@needs_gpu
def test_from_device_on_library_streams():
    torch = pytest.importorskip("torch")
    s = torch.cuda.Stream()
    t = torch.full((1024, 1024), 3.0, device="cuda")
    torch.cuda.synchronize()
    with torch.cuda.stream(s):
        torch.cuda._sleep(50_000_000)  # keep s busy so that an unordered copy would see the old values
        t.mul_(2)
        assert resolve_stream(None, (t,)) == s.cuda_stream
        out = bx.from_device(t)  # on s, torch's current stream
        assert (out == 6.0).all()
        torch.cuda._sleep(50_000_000)
        t.add_(1)
        other = torch.cuda.Stream()
        out = bx.from_device(t, stream=other)  # another stream: it waits for the producer (s) first
    assert (out == 7.0).all()


@pytest.mark.gpu
@needs_gpu
def test_cupy_stream_and_pointer_device():
    cupy = pytest.importorskip("cupy")
    x = cupy.arange(16, dtype=cupy.float64).reshape(4, 4)
    s = cupy.cuda.Stream(non_blocking=True)
    with s:
        y = x * 2
        assert resolve_stream(None, (y,)) == s.ptr
        np.testing.assert_array_equal(bx.from_device(y), np.arange(16.0).reshape(4, 4) * 2)
    assert arrays.pointer_device_id(x.data.ptr) == x.device.id


@pytest.mark.gpu
@needs_gpu
def test_pointer_device_id_rejects_host_pointers():
    host = np.zeros(4)
    with pytest.raises(ExecutionError, match="a: .* not device memory"):
        arrays.pointer_device_id(host.ctypes.data, "a")


@pytest.mark.gpu
@needs_gpu
def test_device_array_pending_stream_orders_consumers():
    cupy = pytest.importorskip("cupy")
    host = np.ones((256, 256), np.float32)
    d = bx.to_device(host)
    s = cupy.cuda.Stream(non_blocking=True)
    d._set_stream(s.ptr)  # pretend blasdx wrote d on s
    view = cupy.asarray(d)  # CAI: cupy waits on d.stream
    assert view.__cuda_array_interface__["data"][0] == d.ptr
    np.testing.assert_array_equal(bx.from_device(d), host)
