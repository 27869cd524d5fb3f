"""execute()'s hot path without a GPU: a call bound to the kind of its arrays does what the full path does.

blasdx DeviceArrays at made-up addresses and the fake driver (tests/fake_driver.py) record
every launch. The first call of a kind takes the full path and binds the kind
(:class:`blasdx.run.execute.BoundLayout`); later calls with arrays of that kind take the
bound path. Both must launch the same parameters and refuse the same bad calls with the
same errors before anything is launched; arrays of another kind never take a binding.
"""

from __future__ import annotations

import numpy as np
import pytest

import blasdx as bx
from blasdx.arrays import DeviceArray, keys
from blasdx.base.errors import ExecutionError
from blasdx.launch import devices
from blasdx.run import execute as ex

from .fake_driver import install

A_PTR, B_PTR, C_PTR = 0x7F10_0000_0000, 0x7F20_0000_0000, 0x7F30_0000_0000

F16 = (bx.Size(64, 32, 16) + bx.Precision(bx.float16, bx.float16, bx.float32) + bx.Function.MM + bx.SM(80)
       + bx.Arrangement(bx.row_major, bx.col_major, bx.col_major) + bx.Block())


@pytest.fixture
def gpu(monkeypatch):
    fake = install(monkeypatch)
    monkeypatch.setattr(devices, "pointer_device_id", lambda ptr, argument="array": 0)
    return fake


def arrays_of(a_ptr=A_PTR, b_ptr=B_PTR, c_ptr=C_PTR, batch=None, a_strides=None):
    """DeviceArrays of F16's shapes: A row-major, B and C column-major (byte strides)."""
    lead = () if batch is None else (batch,)
    a = DeviceArray(a_ptr, lead + (64, 16), np.float16,
                    a_strides or (((64 * 16 * 2,) if batch else ()) + (32, 2)), device_id=0)
    b = DeviceArray(b_ptr, lead + (16, 32), np.float16, ((16 * 32 * 2,) if batch else ()) + (2, 32), device_id=0)
    c = DeviceArray(c_ptr, lead + (64, 32), np.float32, ((64 * 32 * 4,) if batch else ()) + (4, 256), device_id=0)
    return a, b, c


def stand_in_library(gpu, monkeypatch, name):
    """The stand-in module ``name`` ("torch" or "cupy") imported, its current stream 0x5000 on device 0, and F16's
    plan with nothing bound."""
    import sys

    from blasdx.arrays import cupy_adapter, torch_adapter

    from .test_arrays import _fake_cupy, _fake_torch

    module = (_fake_torch if name == "torch" else _fake_cupy)(current_stream=0x5000)
    monkeypatch.setitem(sys.modules, name, module)
    monkeypatch.setattr(torch_adapter, "_TORCH_STREAM", [])
    monkeypatch.setattr(cupy_adapter, "_CUPY_STREAM", [])
    gpu.stream(0x5000, 0)
    plan = ex.plan_for(F16)
    plan.unbind()
    return module, plan


def test_the_second_call_is_bound_and_launches_the_same(gpu, monkeypatch):
    plan = ex.plan_for(F16)
    plan.unbind()
    taken = []
    run = ex.BoundLayout.run

    def recording(self, *args):
        taken.append(args[4:7])
        return run(self, *args)

    monkeypatch.setattr(ex.BoundLayout, "run", recording)
    F16.execute(*arrays_of(), alpha=2.0, beta=0.5)
    assert taken == [] and len(plan._bound) == 1
    F16.execute(*arrays_of(A_PTR + 4096, B_PTR + 4096, C_PTR + 8192), alpha=2.0, beta=0.5)
    assert taken == [(A_PTR + 4096, B_PTR + 4096, C_PTR + 8192)]
    full, fast = gpu.launches
    assert fast.slots[:3] == (A_PTR + 4096, B_PTR + 4096, C_PTR + 8192)
    assert fast.slots[3:] == full.slots[3:] and fast.grid == full.grid and fast.stream == full.stream


def test_bound_and_full_paths_launch_alike(gpu):
    """The same calls with bindings cleared (full path) and kept (bound path) launch the same parameters."""
    calls = [dict(), dict(alpha=-1.5, beta=2), dict(alpha=np.float32(3), beta=0)]
    for kwargs in calls:
        for batch in (None, 3):
            F16.execute(*arrays_of(batch=batch), **kwargs)
            ex.plan_for(F16).unbind()
            F16.execute(*arrays_of(batch=batch), **kwargs)  # full again
            F16.execute(*arrays_of(batch=batch), **kwargs)  # bound
    launches = gpu.launches
    for i in range(0, len(launches), 3):
        assert launches[i] == launches[i + 1] == launches[i + 2]



def test_a_full_launch_between_bound_calls_makes_the_next_rewrite_its_tail(gpu):
    """A bound call writes the slots after the pointers only when its tail changed (PackedLaunch.launch_pointers);
    a full launch in between (another batch and alpha) leaves other values there, which the next bound call of
    the first kind rewrites, the same tail object notwithstanding."""
    plan = ex.plan_for(F16)
    plan.unbind()
    F16.execute(*arrays_of(), alpha=2.0)  # full: binds the kind
    F16.execute(*arrays_of(A_PTR + 256), alpha=2.0)  # bound: writes the whole block
    F16.execute(*arrays_of(batch=3), alpha=-1.0)  # another kind: the full path's launch
    F16.execute(*arrays_of(A_PTR + 512), alpha=2.0)  # bound again, its tail unchanged
    F16.execute(*arrays_of(A_PTR + 768), alpha=2.0)  # bound: the pointers alone are written
    first, bound, other, again, last = gpu.launches
    assert other.slots[3:] != first.slots[3:] and other.grid != first.grid
    for launch, a_ptr in ((bound, A_PTR + 256), (again, A_PTR + 512), (last, A_PTR + 768)):
        assert launch.slots == (a_ptr,) + first.slots[1:] and launch.grid == first.grid
    assert all(type(v) in (int, float) for v in plan._bound[next(iter(plan._bound))]._tail[1])

BAD = {
    "misaligned a": (lambda: arrays_of(a_ptr=A_PTR + 1), {}, r"a: address 0x7f1000000001 is not aligned to 2 bytes"),
    "c overlaps a": (lambda: arrays_of(c_ptr=A_PTR + 64), {}, r"c: its memory .* overlaps a's"),
    "alpha": (lambda: arrays_of(), {"alpha": "2"}, r"alpha: '2' \(str\) is not a number"),
    "beta overflows": (lambda: arrays_of(), {"beta": 1e300}, r"beta: 1e\+300 overflows float32"),
    "complex alpha": (lambda: arrays_of(), {"alpha": 1j}, r"alpha: 1j is complex but the GEMM is real"),
    "a's strides": (lambda: arrays_of(a_strides=(2, 128)), {}, r"a: element strides \(1, 64\)"),
    "a's shape": (lambda: (DeviceArray(A_PTR, (64, 15), np.float16, device_id=0),) + arrays_of()[1:], {},
                  r"a: shape \(64, 15\) does not match A"),
    "c's dtype": (lambda: arrays_of()[:2] + (DeviceArray(C_PTR, (64, 32), np.float16, (2, 128), device_id=0),),
                  {}, r"c: dtype float16 does not match C's type float32"),
}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_calls_raise_the_same_cold_and_bound(gpu, case):
    make, kwargs, pattern = BAD[case]
    ex.plan_for(F16).unbind()
    with pytest.raises(ExecutionError, match=pattern):
        F16.execute(*make(), **kwargs)
    F16.execute(*arrays_of())  # binds the good kind
    assert ex.plan_for(F16)._bound
    gpu.launches.clear()
    with pytest.raises(ExecutionError, match=pattern):
        F16.execute(*make(), **kwargs)
    assert gpu.launches == []


def test_arrays_of_another_kind_never_take_a_binding(gpu):
    F16.execute(*arrays_of())
    F16.execute(*arrays_of(batch=3))  # another shape: its own kind
    a, b, c = arrays_of()
    padded = DeviceArray(A_PTR, (64, 16), np.float16, (48, 2), device_id=0)  # lda 24: another kind, refused
    with pytest.raises(ExecutionError, match=r"a: element strides \(24, 1\)"):
        F16.execute(padded, b, c)
    assert len(ex.plan_for(F16)._bound) == 2
    assert [launch.grid for launch in gpu.launches] == [(1, 1, 1), (2, 1, 1)]


def test_kinds_called_in_turn_launch_with_their_own_bindings(gpu):
    """Two bound kinds called one after the other (the last bound kind is found without hashing): each call
    launches what the full path launched for its kind."""
    plan = ex.plan_for(F16)
    plan.unbind()
    F16.execute(*arrays_of(), alpha=2.0)  # full: binds the first kind
    F16.execute(*arrays_of(batch=3), alpha=2.0)  # full: binds the second
    full_one, full_three = gpu.launches
    for turn in range(6):
        F16.execute(*arrays_of(batch=3 if turn % 2 else None), alpha=2.0)
    assert len(plan._bound) == 2
    assert gpu.launches[2:] == [full_one, full_three] * 3
    assert full_one.grid != full_three.grid and full_one.slots[3:] != full_three.slots[3:]


def test_cupy_arrays_are_bound_on_their_current_stream(gpu, monkeypatch):
    """CuPy arrays (a stand-in module): bound after the first call, launched on CuPy's current stream (the handle
    is the ``ptr`` of the stream object CuPy answers with)."""
    cupy, plan = stand_in_library(gpu, monkeypatch, "cupy")

    def arrays(shift=0):
        return (cupy.ndarray((64, 16), np.float16, (32, 2), ptr=A_PTR + shift),
                cupy.ndarray((16, 32), np.float16, (2, 32), ptr=B_PTR + shift),
                cupy.ndarray((64, 32), np.float32, (4, 256), ptr=C_PTR + shift))

    full_calls = []
    run = ex._run
    monkeypatch.setattr(ex, "_run", lambda *args: full_calls.append(args) or run(*args))
    F16.execute(*arrays())
    assert len(plan._bound) == 1 and len(full_calls) == 1
    F16.execute(*arrays(4096))
    F16.execute(*arrays(8192), stream=0x5000)  # CuPy's current stream given: bound too
    assert len(full_calls) == 1
    full, bound, given = gpu.launches
    assert bound.stream == given.stream == full.stream == 0x5000 and gpu.waits == []
    for launch, shift in ((bound, 4096), (given, 8192)):
        assert launch.slots[:3] == (A_PTR + shift, B_PTR + shift, C_PTR + shift)
        assert launch.slots[3:] == full.slots[3:] and launch.grid == full.grid


def test_no_key_of_another_library_equals_a_blasdx_key(monkeypatch):
    """NumPy's dtypes equal their names, so a CuPy int8 array's key would equal a blasdx array's key of the same
    shape (byte and element strides agree for one-byte types) but for the class the latter holds; joined keys of
    mixed calls differ in the same way."""
    import sys

    from .test_arrays import _fake_cupy

    cupy = _fake_cupy()
    monkeypatch.setitem(sys.modules, "cupy", cupy)
    x = cupy.ndarray((4, 8), np.int8, (8, 1), ptr=A_PTR)
    y = DeviceArray(A_PTR, (4, 8), np.int8, (8, 1), device_id=0)
    (kx, _), (ky, _) = keys.read_with_blasdx(x), keys.read_with_blasdx(y)
    assert ky[:4] == kx and ky != kx and kx != ky
    joined = {order: keys.gatherer(type(order[0]))(*order)[0]
              for order in ((x, x, x), (y, x, x), (x, y, x), (x, x, y), (y, y, x), (y, y, y))}
    assert all((k1 == k2) == (o1 is o2) for o1, k1 in joined.items() for o2, k2 in joined.items())


def test_a_producer_stream_is_waited_for_by_the_full_path(gpu):
    """A blasdx array last written on another stream sends the call to the full path, which waits for it."""
    a, b, c = arrays_of()
    F16.execute(a, b, c)
    gpu.stream(0x8100, 0)
    F16.execute(a, b, c, stream=0x8100)  # c now belongs to stream 0x8100
    gpu.waits.clear()
    F16.execute(a, b, c)  # default stream: waits for c's producer
    assert gpu.waits == [(0x8100, 0)]
    assert c.stream == keys.library_stream(c)(0)
    gpu.waits.clear()
    F16.execute(a, b, c)  # bound: nothing pending
    assert gpu.waits == []
    assert len(gpu.launches) == 4


def test_keys_read_blasdx_arrays_without_views(gpu):
    a, _, c = arrays_of()
    assert keys.read(a) is None  # matmul's keys: PyTorch and CuPy only
    key, ptr = keys.read_with_blasdx(c)
    assert ptr == C_PTR and key[1:4] == ((64, 32), (1, 64), 0)


def test_torch_tensors_are_bound_on_their_current_stream(gpu, monkeypatch):
    """PyTorch tensors (a stand-in module): bound after the first call, launched on torch's current stream."""
    torch, plan = stand_in_library(gpu, monkeypatch, "torch")

    def tensors(shift=0):
        return (torch.Tensor((64, 16), (16, 1), name="float16", itemsize=2, ptr=A_PTR + shift),
                torch.Tensor((16, 32), (1, 16), name="float16", itemsize=2, ptr=B_PTR + shift),
                torch.Tensor((64, 32), (1, 64), name="float32", itemsize=4, ptr=C_PTR + shift))

    F16.execute(*tensors())
    assert len(plan._bound) == 1
    F16.execute(*tensors(4096))
    full, bound = gpu.launches
    assert bound.stream == full.stream == 0x5000 and gpu.waits == []
    assert bound.slots[:3] == (A_PTR + 4096, B_PTR + 4096, C_PTR + 4096) and bound.slots[3:] == full.slots[3:]
    cpu = torch.Tensor((64, 32), (1, 64), name="float32", itemsize=4, ptr=C_PTR, cuda=False)
    with pytest.raises(ExecutionError, match=r"c: torch.Tensor of shape \(64, 32\) is in host memory"):
        F16.execute(*tensors()[:2], cpu)
    # stream= torch's current stream: bound; another stream: the full path, which waits for torch's
    F16.execute(*tensors(8192), stream=0x5000)
    assert gpu.launches[-1].slots[:3] == (A_PTR + 8192, B_PTR + 8192, C_PTR + 8192) and gpu.waits == []
    gpu.stream(0x6000, 0)
    F16.execute(*tensors(), stream=0x6000)
    assert gpu.launches[-1].stream == 0x6000 and gpu.waits == [(0x5000, 0)]
    gpu.stream(0x7000, 1)
    with pytest.raises(ExecutionError, match="stream: handle 0x5000 belongs to device 1"):
        gpu.streams[0x5000] = 1
        F16.execute(*tensors(), stream=0x5000)


# ---------------------------------------------------------------------------------------------
# bx.matmul / bx.mma on PyTorch tensors (a stand-in module): keys, stale kinds, the bound calls' start
# ---------------------------------------------------------------------------------------------


@pytest.fixture
def torch_calls(gpu, monkeypatch):
    """A stand-in torch whose empty() hands out addresses, bx.matmul's device an sm_80 one (one-block plans)."""
    import itertools
    import sys

    from blasdx.arrays import torch_adapter
    from blasdx.calls import matmul as mm

    from .test_arrays import _fake_torch

    torch = _fake_torch(current_stream=0)
    addresses = itertools.count(0x7F50_0000_0000, 1 << 20)

    def empty(shape, dtype=None, device=None):
        return torch.Tensor(tuple(shape), (shape[1], 1), name=dtype.name, itemsize=dtype.itemsize,
                            ptr=next(addresses))

    def empty_strided(shape, strides, dtype=None, device=None):
        assert tuple(strides) == (shape[1], 1), "bound results are C-contiguous"
        return empty(shape, dtype, device)

    torch.empty = empty
    torch.empty_strided = empty_strided
    torch.float16 = torch.Tensor((1,), (1,), name="float16", itemsize=2).dtype
    torch.float32 = torch.Tensor((1,), (1,), name="float32", itemsize=4).dtype
    monkeypatch.setitem(sys.modules, "torch", torch)
    monkeypatch.setattr(torch_adapter, "_TORCH_STREAM", [])
    monkeypatch.setattr(mm, "_device_info", lambda device_id: mm._DeviceInfo(80, 132))
    monkeypatch.setattr(mm, "_BOUND", {})
    monkeypatch.setattr(mm, "_CALLS", {})
    return torch


def test_torch_keys_need_a_real_dtype_read_by_the_full_path_and_a_cuda_tensor(torch_calls):
    """A tensor has a key once the full path has read its dtype, never for complex dtypes (their conjugation bit
    is checked there) nor for host tensors; the key changes with dtype, shape, strides and device."""
    from blasdx.arrays import as_array

    torch = torch_calls
    x = torch.Tensor((8, 4), (4, 1), name="float64", itemsize=8)
    assert keys.read(x) is None  # float64 not read yet
    as_array(x, "x")
    key, ptr = keys.read(x)
    assert ptr == x.data_ptr() and key[1:] == ((8, 4), (4, 1), 0)
    z = torch.Tensor((8, 4), (4, 1), name="complex128", itemsize=16)
    as_array(z, "z")
    assert keys.read(z) is None
    assert keys.read(torch.Tensor((8, 4), (4, 1), name="float64", itemsize=8, cuda=False)) is None
    others = [torch.Tensor((8, 4), (1, 8), name="float64", itemsize=8),
              torch.Tensor((4, 8), (8, 1), name="float64", itemsize=8),
              torch.Tensor((8, 4), (4, 1), name="float64", itemsize=8, device=1)]
    assert all(keys.read(t)[0] != key for t in others)


def test_a_matmul_kind_that_changes_never_launches_with_the_bound_plan(torch_calls, gpu):
    """Tensors whose strides, dtype or device differ from a bound kind's take the full path: each launch equals
    the one the full path makes for those tensors with no binding at all."""
    from blasdx.calls import matmul as mm

    torch = torch_calls

    def x_of(ptr=A_PTR, strides=(32, 1), name="float16", itemsize=2, device=0):
        return torch.Tensor((32, 32), strides, name=name, itemsize=itemsize, ptr=ptr, device=device)

    y = x_of(B_PTR)
    bx.matmul(x_of(), y)  # full: binds the kind
    bx.matmul(x_of(A_PTR + 4096), y)  # bound
    assert len(mm._BOUND) == 1 and gpu.launches[1].slots[0] == A_PTR + 4096
    changed = {"strides": x_of(strides=(1, 32)), "dtype": (x_of(name="float32", itemsize=4),
                                                            x_of(B_PTR, name="float32", itemsize=4))}
    for what, arrays in changed.items():
        xs, ys = arrays if isinstance(arrays, tuple) else (arrays, y)
        gpu.launches.clear()
        bx.matmul(xs, ys)
        taken = gpu.launches[-1]
        mm._BOUND.clear()
        gpu.launches.clear()
        bx.matmul(xs, ys)  # the full path, nothing bound
        fresh = gpu.launches[-1]
        assert (taken.function, taken.grid, taken.slots[:2], taken.slots[3:]) == (
            fresh.function, fresh.grid, fresh.slots[:2], fresh.slots[3:]), what
        bx.matmul(x_of(), y)  # bind the first kind again
    with pytest.raises(ExecutionError, match="device"):  # x on device 1, y on device 0: refused, not launched
        bx.matmul(x_of(device=1), y)


def test_a_matmul_out_dtype_is_bound_apart_from_the_default(torch_calls, gpu):
    """matmul(x, y) and matmul(x, y, out_dtype=...) of the same tensors are two kinds: each bound call makes its
    own result type and launches what its full path launched."""
    from blasdx.calls import matmul as mm

    torch = torch_calls
    x = torch.Tensor((32, 32), (32, 1), name="float16", itemsize=2, ptr=A_PTR)
    y = torch.Tensor((32, 32), (32, 1), name="float16", itemsize=2, ptr=B_PTR)
    functions = {}
    for _ in range(2):  # the full paths, then the bound ones
        for out_dtype, name in ((None, "float16"), ("float32", "float32")):
            got = bx.matmul(x, y, out_dtype=out_dtype)
            assert got.dtype.name == name
            functions.setdefault(name, set()).add(gpu.launches[-1].function)
    assert len(mm._BOUND) == 2
    assert all(len(f) == 1 for f in functions.values()) and functions["float16"] != functions["float32"]


def test_a_bound_call_whose_allocation_fails_leaves_the_device_as_it_found_it(gpu):
    """BoundCall.begin makes the call's device current; a failing allocation pops it again."""
    from blasdx.calls.matmul import BoundCall

    class Failing(BoundCall):
        __slots__ = ()

    call = Failing()
    call.device_id, call.stream_of, call.pointer_of = 1, lambda device: 0, lambda out: 0

    def allocate(handle):
        raise MemoryError("out of memory")

    call.allocate = allocate
    before = list(gpu.stack())
    with pytest.raises(MemoryError):
        call.begin(None)
    assert gpu.stack() == before
    handle, token, out, pointer = call.begin("given")
    assert (handle, out, pointer) == (0, "given", None) and token is not None
    devices.leave(token)
    assert gpu.stack() == before


def test_bounded_memos_empty_when_full():
    from blasdx.launch.caches import cached, remember

    memo: dict[int, int] = {}
    for i in range(5):
        assert remember(memo, i, i * i, limit=3) == i * i
    assert memo == {3: 9, 4: 16}
    made = []
    assert cached(memo, 4, lambda: made.append(4) or 0, limit=3) == 16 and made == []
    assert cached(memo, 7, lambda: made.append(7) or 49, limit=3) == 49 and made == [7]


def test_cluster_launch_configurations_are_built_once_per_geometry_and_stream(gpu, monkeypatch):
    from blasdx.launch import cuda_driver

    built, launched = [], []
    monkeypatch.setattr(cuda_driver, "_CONFIGS", {})
    monkeypatch.setattr(cuda_driver, "_cluster_config", lambda *args: built.append(args[1:]) or object())
    gpu.cuLaunchKernelEx = lambda config, function, params, extra: launched.append(config) or (0,)
    params = cuda_driver.ParameterBlock(["u64"])
    for stream in (0x10, 0x10, 0x20):
        cuda_driver.launch(1, (4, 1, 1), (128, 1, 1), 1024, stream, params, cluster=2)
    assert [args[-2] for args in built] == [cuda_driver.stream_object(0x10), cuda_driver.stream_object(0x20)]
    assert launched[0] is launched[1] and launched[2] is not launched[0]


def test_a_bound_launch_that_fails_goes_through_the_full_launch_step(gpu):
    """launch_pointers launches by the thread's CUfunction itself; a refusal takes PackedLaunch._launch, which
    launches by the CUkernel when another context of the device is current, and raises otherwise."""
    from blasdx.base.errors import DeviceError

    from .fake_driver import CUresult

    F16.execute(*arrays_of())
    F16.execute(*arrays_of())  # bound: the thread's CUfunction is known
    launch = gpu.cuLaunchKernel
    refusals = [CUresult(201)]  # CUDA_ERROR_INVALID_CONTEXT once, then the launches go through

    def refusing(*args):
        return (refusals.pop(),) if refusals else launch(*args)

    gpu.cuLaunchKernel = refusing
    gpu.launches.clear()
    F16.execute(*arrays_of(A_PTR + 256))
    assert [lc.slots[0] for lc in gpu.launches] == [A_PTR + 256] and not refusals
    gpu.cuLaunchKernel = lambda *args: (CUresult(1),)  # CUDA_ERROR_INVALID_VALUE, every time
    with pytest.raises(DeviceError, match=r"launching .* failed"):
        F16.execute(*arrays_of(A_PTR + 512))


def test_a_bound_call_on_another_device_asks_first_after_one_refusal(gpu, monkeypatch):
    """Arrays of device 1 while device 0 is current: the driver refuses a launch by the function of device 1 on
    the default stream; the bound call then enters device 1 and launches there, and its next calls ask which
    device is current before launching (no refused launch each call) until device 1 is found current."""
    monkeypatch.setattr(devices, "pointer_device_id", lambda ptr, argument="array": 1)
    a, b, c = (DeviceArray(x.ptr, x.shape, x.dtype, x.strides, device_id=1) for x in arrays_of())
    launch = gpu.cuLaunchKernel
    attempts = []

    def like_the_driver(*args):  # a CUfunction of device 1 launches only with device 1's context current
        attempts.append(gpu.current())
        return (CUresult(201),) if gpu.current() != 1 else launch(*args)

    from .fake_driver import CUresult

    gpu.cuLaunchKernel = like_the_driver
    F16.execute(a, b, c)
    F16.execute(a, b, c)  # bound; the first try is refused, device 1 entered, launched
    attempts.clear()
    for _ in range(3):
        F16.execute(a, b, c)
    assert attempts == [1, 1, 1] and gpu.current() == 0  # asked first: no refusals; device 0 current again
    assert all(launch.device == 1 for launch in gpu.launches)
    gpu.make_current(1)
    attempts.clear()
    F16.execute(a, b, c)  # device 1 current: found so, and the next call launches without asking
    F16.execute(a, b, c)
    assert attempts == [1, 1]


def test_overlap_windows_decide_as_the_full_check():
    """bx.mma's bound check of out against x, y and acc (pointer differences inside windows) raises exactly when
    the full path's byte-span check does, empty spans included."""
    import random

    from blasdx.calls.matmul import _raise_overlap, overlap_windows

    rng = random.Random(3)
    for _ in range(3000):
        out_span = tuple(sorted(rng.randrange(0, 64) for _ in range(2)))
        others = tuple((name, *sorted(rng.randrange(0, 64) for _ in range(2))) for name in ("x", "y", "acc"))
        pout, pointers = rng.randrange(0, 128), tuple(rng.randrange(0, 128) for _ in range(3))
        try:
            _raise_overlap(pout, out_span, others, pointers)
            full = False
        except ExecutionError:
            full = True
        windows = overlap_windows(out_span, others)
        fast = windows is not None and any(below < p - pout < above for (below, above), p in zip(windows, pointers))
        assert fast == full, (out_span, others, pout, pointers)


def test_a_bound_mma_refuses_an_out_meeting_its_inputs(torch_calls, gpu, monkeypatch):
    """bx.mma(out=) bound on the engine (sm_90, kernels neither compiled nor launched): an out whose bytes meet x,
    y or acc is refused with the full path's error before any launch; an out just past acc is not."""
    from blasdx.calls import matmul as mm
    from blasdx.engine import hopper
    from blasdx.launch import cuda_driver

    from .tma_rules import FakeEncoder

    torch = torch_calls
    monkeypatch.setattr(cuda_driver, "encode_tiled", FakeEncoder())
    monkeypatch.setattr(cuda_driver.TensorMap, "replace_address", lambda self, p: None)
    monkeypatch.setattr(hopper._Kernel, "function", lambda self, device_id: 0)
    monkeypatch.setattr(mm, "_device_info", lambda device_id: mm._DeviceInfo(90, 132))
    size = 256 * 256 * 2

    def t(ptr):
        return torch.Tensor((256, 256), (256, 1), name="float16", itemsize=2, ptr=ptr)

    x, y, acc = t(A_PTR), t(B_PTR), t(C_PTR)
    bx.mma(x, y, acc, out=t(C_PTR + 2 * size))  # full: binds the kind
    assert len(mm._BOUND) == 1 and next(iter(mm._BOUND.values())).windows is not None
    for name, ptr in (("x", A_PTR + 512), ("y", B_PTR - size + 2), ("acc", C_PTR + size - 2)):
        gpu.launches.clear()
        with pytest.raises(ExecutionError, match=f"out: its memory overlaps {name}'s"):
            bx.mma(x, y, acc, out=t(ptr))
        assert gpu.launches == [], name
    bx.mma(x, y, acc, out=t(C_PTR + size))  # adjacent to acc: bound, launched
    assert gpu.launches


def test_the_array_calls_read_several_tensors_as_one_key(torch_calls):
    """read_pair / read_triple / read_quad join what read() gives each array (key, then the pointer's alignment
    class): the torch.Tensor route and the route of any other type agree; host tensors, pending negations and
    complex tensors have none."""
    from blasdx.arrays import as_array

    torch = torch_calls

    def t(ptr, strides=(4, 1), **kwargs):
        return torch.Tensor((8, 4), strides, name="float64", itemsize=8, ptr=ptr, **kwargs)

    a, b, c, d = t(A_PTR), t(B_PTR + 8, (1, 8)), t(C_PTR + 4, device=1), t(C_PTR)
    as_array(a, "a")  # float64 read once: read() gives its keys

    def joined(*arrays):
        found = [keys.read(x) for x in arrays]
        return (sum(((*k, p & 15) for k, p in found), ()), *(p for _, p in found))

    assert keys.read_pair(a, b) == joined(a, b)
    assert keys.read_triple(a, b, c) == joined(a, b, c)
    assert keys.read_quad(a, b, c, d) == joined(a, b, c, d)

    class Sub(torch.Tensor):  # a subclass takes read() per array
        pass

    s = Sub((8, 4), (4, 1), name="float64", itemsize=8, ptr=B_PTR)
    assert keys.read_pair(a, s) == joined(a, s) and keys.read_triple(s, a, b) == joined(s, a, b)
    z = torch.Tensor((8, 4), (4, 1), name="complex128", itemsize=16, ptr=C_PTR)
    as_array(z, "z")  # complex: never a key, whatever the full path read
    for bad in (t(A_PTR, cuda=False), t(A_PTR, neg=True), z):
        assert keys.read_pair(a, bad) is None and keys.read_triple(bad, a, b) is None
        assert keys.read_quad(a, b, c, bad) is None and keys.read_pair(bad, s) is None


@pytest.mark.parametrize("dtypes", [("float16", 2, "float16", 2), ("int8", 1, "int32", 4)], ids=["f16", "int8"])
def test_a_bound_mma_on_the_multi_block_kernel_launches_as_the_full_path(torch_calls, gpu, monkeypatch, dtypes):
    """bx.mma(out=) on the multi-block kernel (sm_80, one problem, out not acc): the bound call launches on
    pointers with the arguments the full path computes (int32 scalars for int8); out=acc and an out aliasing acc
    bind kinds of their own, which launch as the full path does too."""
    import types
    from itertools import count

    from blasdx.calls import matmul as mm
    from blasdx.calls import tiled

    from .fake_driver import FakeKernel

    handles = count(0xE000)  # the multi-block kernels load as fake ones (20 parameters), none kept past the test
    monkeypatch.setattr(tiled, "_KERNELS", {})
    monkeypatch.setattr(tiled.TiledKernel, "compile", lambda self: types.SimpleNamespace(
        kernel=lambda **kwargs: FakeKernel(gpu, next(handles), 20)))
    torch = torch_calls

    name_in, size_in, name_acc, size_acc = dtypes
    setattr(torch, name_acc, torch.Tensor((1,), (1,), name=name_acc, itemsize=size_acc).dtype)  # the stand-in's

    def t(ptr, name=name_acc, itemsize=size_acc):
        return torch.Tensor((64, 64), (64, 1), name=name, itemsize=itemsize, ptr=ptr)

    outs = {"out": lambda shift: t(C_PTR + (1 << 20) + shift), "out=acc": None,
            "alias": lambda shift: t(C_PTR + shift)}
    for name, make in outs.items():
        for shift in (0, 4096):
            xs, ys = t(A_PTR + shift, name_in, size_in), t(B_PTR + shift, name_in, size_in)
            accs = t(C_PTR + shift)
            out = accs if make is None else make(shift)
            mm._BOUND.clear()
            gpu.launches.clear()
            bx.mma(xs, ys, accs, out=out)  # full, binds
            bx.mma(xs, ys, accs, out=out)  # bound
            full, bound = gpu.launches[-2:]
            assert (bound.function, bound.grid, bound.slots, bound.stream) == (
                full.function, full.grid, full.slots, full.stream), (name, shift)
        assert len(mm._BOUND) == 1, name
        plan = next(iter(mm._BOUND.values()))
        if name == "out":
            assert plan.tiled is not None and plan.plan.kind == "tiled"


def test_a_bound_solve_launches_as_the_full_path(torch_calls, gpu, monkeypatch):
    """bx.solve_triangular bound to its kind (a new result, a given out, out=b in place, out aliasing b): each
    bound call launches what the full path launches for the same arrays, and an out meeting a is refused."""
    from blasdx.calls import solve_triangular as st
    from blasdx.run import trsm

    torch = torch_calls
    launches = []
    monkeypatch.setattr(trsm.TrsmKernel, "on_device", lambda self, device_id: None)
    monkeypatch.setattr(trsm.TrsmKernel, "launch", lambda self, stream, device_id, pointers, alpha, strides, chunks,
                        batch: launches.append((id(self), pointers, alpha, strides, chunks, batch)))
    monkeypatch.setattr(st, "_BOUND", {})
    ran = []  # what each bound call answered (None: it left the call to the full path)
    run = st._Bound.run
    monkeypatch.setattr(st._Bound, "run", lambda self, out, pointers: ran.append(run(self, out, pointers)) or ran[-1])

    def t(ptr, shape=(32, 16), strides=(16, 1)):
        return torch.Tensor(shape, strides, name="float32", itemsize=4, ptr=ptr)

    a = t(A_PTR, (32, 32), (32, 1))
    cases = {"new": lambda b: None, "out": lambda b: t(C_PTR), "out=b": lambda b: b,
             "alias": lambda b: t(b.data_ptr())}
    for name, out_of in cases.items():
        st._BOUND.clear()
        b = t(B_PTR)
        launches.clear()
        ran.clear()
        got = bx.solve_triangular(a, b, upper=True, out=out_of(b))  # full, binds
        again = bx.solve_triangular(a, b, upper=True, out=out_of(b))  # bound
        assert len(st._BOUND) == 1 and ran == [again] and again is not None, name
        assert next(iter(st._BOUND.values())).in_place == (name in ("out=b", "alias")), name
        full, bound = launches
        if name == "new":  # new results at new addresses
            assert full[1][:2] == bound[1][:2] and full[2:] == bound[2:] and got is not again
        else:
            assert full == bound, name
    with pytest.raises(ExecutionError, match="overlaps"):
        bx.solve_triangular(a, t(B_PTR), upper=True, out=t(A_PTR + 64))


def test_a_scaled_mm_key_holds_every_array_and_its_pointers_in_order(torch_calls):
    """bx.scaled_mm's key: x, y and the scales read in one go, then bias and out; a bias and an out of the same kind
    give different keys, pointers come back in argument order, and one array without a key leaves the call none."""
    from blasdx.arrays import as_array
    from blasdx.calls import scaled_mm as sm

    torch = torch_calls

    def t(ptr, shape=(8, 4), strides=(4, 1), name="float32", **kwargs):
        return torch.Tensor(shape, strides, name=name, itemsize=4, ptr=ptr, **kwargs)

    x, y, sx, sy = t(A_PTR), t(B_PTR, strides=(1, 8)), t(C_PTR, (8, 1), (1, 1)), t(C_PTR + 64, (1, 4), (4, 1))
    extra = t(C_PTR + 4096)
    as_array(x, "x")
    key, pointers = sm._bound_key(x, y, sx, sy, None, None, None, False)
    assert pointers == (A_PTR, B_PTR, C_PTR, C_PTR + 64, None, None)
    assert key[2] == keys.read_quad(x, y, sx, sy)[0]
    with_bias = sm._bound_key(x, y, sx, sy, extra, None, None, False)
    with_out = sm._bound_key(x, y, sx, sy, None, extra, None, False)
    assert with_bias[1][4:] == (C_PTR + 4096, None) and with_out[1][4:] == (None, C_PTR + 4096)
    assert len({key, with_bias[0], with_out[0], sm._bound_key(x, y, sx, sy, None, None, "float16", False)[0],
                sm._bound_key(x, y, sx, sy, None, None, None, True)[0]}) == 5
    host = t(C_PTR, cuda=False)
    for args in ((x, y, host, sy, None, None), (x, y, sx, sy, host, None), (x, y, sx, sy, None, host)):
        assert sm._bound_key(*args, None, False) is None
