"""The Hopper engine's launch without a GPU: parameter blocks, tensor maps re-pointed, and a launch on pointers.

The fake driver (tests/fake_driver.py) records every launch with its parameter slots read
back; a map's slot reads the first 8 bytes of the map, where the stand-in of
cuTensorMapReplaceAddress below writes the address (the real layout is the driver's own:
nothing here depends on it). A call bound to its layouts (:meth:`EnginePlan.launch` on
pointers, its scalars computed once) must launch exactly what :meth:`EnginePlan.run` on
views launches.
"""

from __future__ import annotations

import ctypes

import pytest

from blasdx.base import dtypes as dt
from blasdx.calls import matmul as array_gemm
from blasdx.engine import hopper
from blasdx.launch import cuda_driver
from blasdx.launch import scratch as sc

from .fake_driver import install
from .test_hopper import PTR, plan, view


class _Map:
    """cuda.bindings' CUtensorMap wrapping host memory (``_ptr``)."""

    def __init__(self, _ptr: int) -> None:
        self.address = _ptr


@pytest.fixture
def gpu(monkeypatch, encoder):
    """The fake driver, with tensor-map replacement (counted), kernels loaded as fake handles and the scratch
    calls recorded."""
    fake = install(monkeypatch)
    fake.replaced = []

    def replace(tmap, pointer):
        fake.replaced.append(pointer)
        ctypes.c_uint64.from_address(tmap.address).value = pointer
        return (0,)

    fake.CUtensorMap = _Map
    fake.cuTensorMapReplaceAddress = replace
    handles = iter(range(0xE000, 0xEF00))

    def load(kernel, device_id):
        handle = next(handles)
        fake.params[handle] = len(kernel.params.kinds)
        return handle

    monkeypatch.setattr(hopper._Kernel, "_load", load)
    fake.scratch = []
    addresses = iter(range(0x6000_0000, 0x7000_0000, 0x100_0000))

    def allocate(nbytes, stream):
        fake.scratch.append(("alloc", nbytes, stream))
        return next(addresses)

    monkeypatch.setattr(cuda_driver, "allocate_async", allocate)
    monkeypatch.setattr(cuda_driver, "zero_async", lambda ptr, words, stream: fake.scratch.append(("zero", ptr)))
    monkeypatch.setattr(cuda_driver, "is_capturing", lambda stream: False)
    monkeypatch.setattr(sc, "POOL", sc.ScratchPool())
    return fake


def test_parameter_block_packs_runs_as_set_does():
    kinds = ("map", "u64", "i32", "i64", "f32", "f64", "bytes16", "u64")
    one, other = cuda_driver.ParameterBlock(kinds), cuda_driver.ParameterBlock(kinds)
    values = (0xDEAD_BEEF_0000, -7, -(2**40), 0.25, 1e300)
    for i, value in enumerate(values, start=1):
        one.set(i, value)
    pack, offset = other.packer(1, len(values))
    pack(other.data, offset, *values)
    assert bytes(one.data) == bytes(other.data)
    assert ctypes.c_int32.from_address(other.pointers[2]).value == -7
    assert ctypes.c_double.from_address(other.pointers[5]).value == 1e300
    assert other.pointers[7] - other.pointers[6] == 16  # the 16-byte slot takes two
    with pytest.raises(ValueError, match="not all scalar slots"):
        other.packer(0, 2)  # a map
    with pytest.raises(ValueError, match="not all scalar slots"):
        other.packer(5, 2)  # raw bytes


def test_tensor_maps_keep_the_encodings_of_addresses_seen(gpu):
    tmap = cuda_driver.TensorMap()
    ctypes.c_uint64.from_address(tmap.address).value = 0x1000
    tmap.remember(0x1000)  # what encode_tiled does with the address it encoded
    first = bytes((ctypes.c_ubyte * 128).from_address(tmap.address))
    tmap.replace_address(0x2000)
    assert gpu.replaced == [0x2000]
    tmap.replace_address(0x1000)  # seen: its bytes come back without the driver
    assert gpu.replaced == [0x2000] and bytes((ctypes.c_ubyte * 128).from_address(tmap.address)) == first
    tmap.replace_address(0x2000)
    assert gpu.replaced == [0x2000] and ctypes.c_uint64.from_address(tmap.address).value == 0x2000
    for i in range(cuda_driver.TensorMap.KNOWN_LIMIT + 1):  # bounded: the oldest are forgotten
        tmap.replace_address(0x10000 + 16 * i)
    assert len(tmap._known) <= cuda_driver.TensorMap.KNOWN_LIMIT


def _engine(shape, splits):
    m, n, k = shape
    x, y, acc = view((m, k)), view((k, n), ptr=PTR + 2**30), view((m, n), dt.float32, ptr=PTR + 2**31)
    p = plan(x, y, acc)
    assert p.kind == "hopper" and p.kernel.splits == splits, p.describe()
    return p.kernel, x, y, acc


@pytest.mark.parametrize(("shape", "splits"), [((256, 256, 256), 1), ((512, 2112, 7168), 3)])
def test_launch_on_pointers_is_run_on_views(gpu, shape, splits):
    engine, x, y, acc = _engine(shape, splits)
    out = acc._replace(ptr=PTR + 3 * 2**30)
    engine.run(0, None, 0, x, y, acc, out, 2.0, 0.5)
    scalars = engine.scalars(acc, out, 2.0, 0.5)
    engine.launch(0, 0, x.ptr, y.ptr, acc.ptr, out.ptr, scalars)
    by_views, by_pointers = gpu.launches
    assert by_pointers == by_views
    assert by_views.slots[3:5] == (acc.ptr, out.ptr)
    assert (by_views.slots[0], by_views.slots[1]) == (0, 0)  # the fake encoder's maps: never re-pointed yet
    workspace, counters = by_views.slots[5:7]
    if splits > 1:  # sums and counters in two pool buffers: the sums left as split K leaves them, counters zeroed
        assert workspace and counters and workspace != counters
        assert [e[0] for e in gpu.scratch] == ["alloc", "alloc", "zero"]
        assert gpu.scratch[0][1] >= engine._split_bytes[0] and gpu.scratch[1][1] >= engine._split_bytes[1]
        assert gpu.scratch[2][1] == counters
    else:
        assert (workspace, counters) == (0, 0) and gpu.scratch == []
    assert by_views.float32(20) == 2.0 and by_views.float32(21) == 0.5


def test_launch_on_new_pointers_repoints_the_maps_once(gpu):
    engine, x, y, acc = _engine((256, 256, 256), 1)
    out = acc._replace(ptr=PTR + 3 * 2**30)
    scalars = engine.scalars(acc, out, 1.0, 1.0)
    calls = [(PTR + 4096, y.ptr + 256, PTR + 2**32), (PTR + 8192, y.ptr + 512, PTR + 2**32 + 512),
             (PTR + 4096, y.ptr + 256, PTR + 2**32)]
    for a_ptr, b_ptr, d_ptr in calls:
        engine.launch(0, 0, a_ptr, b_ptr, acc.ptr, d_ptr, scalars)
        launch = gpu.launches[-1]
        assert launch.slots[:2] == (a_ptr, b_ptr) and launch.slots[3:5] == (acc.ptr, d_ptr)
    # f32 D is not stored by TMA here (its slot is A's map); the third call's addresses were seen before
    assert engine.store_d is None or gpu.launches[-1].slots[2] == calls[-1][2]
    assert gpu.replaced.count(PTR + 4096) == 1 and gpu.replaced.count(PTR + 8192) == 1
    # other alpha / beta rewrite the scalars; the pointers of the call are the ones launched
    engine.run(0, None, 0, x, y, acc, out, 3.0, 0.0)
    assert gpu.launches[-1].float32(20) == 3.0 and gpu.launches[-1].float32(21) == 0.0
    engine.launch(0, 0, x.ptr, y.ptr, acc.ptr, out.ptr, scalars)
    assert gpu.launches[-1].float32(20) == 1.0 and gpu.launches[-1].float32(21) == 1.0


def test_a_bound_engine_call_launches_on_pointers(gpu):
    """_Bound computes the engine's scalars once (plans reading their operands in place) and launches on pointers."""
    _, x, y, acc = _engine((256, 256, 256), 1)
    call = array_gemm.plan_call(x, y, acc, dt.float32, array_gemm._DeviceInfo(90, 132), 0)
    rests = tuple(array_gemm._rest(v) for v in (x, y, acc, acc))
    bound = array_gemm._Bound(call, lambda device: 0, None, None, rests)
    assert bound.scalars == call.kernel.scalars(acc, acc, 1.0, float(call.beta))
    bound.mma(None, object(), (x.ptr, y.ptr, acc.ptr, PTR + 2**33))
    assert gpu.launches[-1].slots[3:5] == (acc.ptr, PTR + 2**33)


def test_a_bound_wide_path_call_runs_on_views(gpu):
    """Plans with their own kernel parameters (the f32 / f64 wide path) are bound without pointer scalars and
    launch through their own run."""
    x, y, acc = (view(s, dt.float64, ptr=PTR + i * 2**30) for i, s in enumerate(((512, 512), (512, 512), (512, 512))))
    call = array_gemm.plan_call(x, y, acc, dt.float64, array_gemm._DeviceInfo(90, 132), 0)
    assert call.kind == "hopper" and not call.kernel.on_pointers, call.describe()
    rests = tuple(array_gemm._rest(v) for v in (x, y, acc, acc))
    bound = array_gemm._Bound(call, lambda device: 0, None, None, rests)
    assert bound.scalars is None
    bound.mma(None, object(), (x.ptr, y.ptr, acc.ptr, PTR + 2**33))
    assert gpu.launches, "the wide plan did not launch"


def test_a_decode_plan_reads_y_as_a_and_x_as_b(gpu):
    """The swapped plan (D^T = y^T x^T): A's map follows y, B's map x, and D's strides are exchanged."""
    x, y = view((16, 4096)), view((4096, 4096), strides=(1, 4096), ptr=PTR + 2**30)
    engine = plan(x, y).kernel
    assert engine.swapped
    out = view((16, 4096), dt.float32, ptr=PTR + 2**31)
    moved_x, moved_y = x._replace(ptr=PTR + 5 * 2**28), y._replace(ptr=PTR + 7 * 2**28)
    engine.run(0, None, 0, moved_x, moved_y, None, out, 1.0, 0.0)
    engine.launch(0, 0, moved_x.ptr, moved_y.ptr, 0, out.ptr, engine.scalars(None, out, 1.0, 0.0))
    by_views, by_pointers = gpu.launches
    assert by_pointers == by_views
    assert (by_views.slots[0], by_views.slots[1]) == (moved_y.ptr, moved_x.ptr)
    assert by_views.slots[7:10] == (4096, 16, 4096)  # the kernel's M is the weights' N


@pytest.mark.parametrize("k", [256, 16384])  # one split, and K split (tiles few, K deep: 128 steps and more)
def test_scaled_plans_launch_with_their_scratch(gpu, k):
    """bx.scaled_mm's plan (its own parameter block) launches through the engine's operand and split preparation."""
    from blasdx.calls import scaled_mm

    e4m3 = dt.float8_e4m3
    m = n = 256
    route_a = hopper.route("x", e4m3, PTR, True, k, m, m * k, False)
    route_b = hopper.route("y", e4m3, PTR + 2**30, True, k, n, n * k, False)
    engine = scaled_mm.ScaledPlan(e4m3, e4m3, dt.float16, m, n, k, route_a, route_b, k, k, PTR, PTR + 2**30, 132,
                                  None, "tensor", "tensor")
    x, y = view((m, k), e4m3), view((k, n), e4m3, strides=(1, k), ptr=PTR + 2**30)
    sx, sy = view((), dt.float32, ptr=PTR + 2**31), view((), dt.float32, ptr=PTR + 2**31 + 256)
    d = view((m, n), dt.float16, ptr=PTR + 3 * 2**30)
    engine.run(0, None, 0, x, y, sx, sy, None, d)
    (launch,) = gpu.launches
    workspace, counters = launch.slots[4:6]
    assert launch.slots[3] == d.ptr and (workspace != 0) == (engine.splits > 1)
    assert launch.slots[6:11] == (m, n, k, engine.splits, sx.ptr) and launch.slots[13] == sy.ptr
    assert launch.slots[16:] == (0, n, 1)  # no bias; D row-major
    assert (engine.splits > 1) == (k == 16384), engine.describe()
    if engine.splits > 1:
        assert counters and counters != workspace
    # the bound call launches on pointers what run() launches on views (the pool's scratch again)
    rests = tuple(None if v is None else array_gemm._rest(v) for v in (x, y, sx, sy, None, d))
    bound = scaled_mm._Bound(scaled_mm._Call(engine, (m, n), dt.float16, 0), lambda device: 0, None, None, rests, None)
    assert bound.strides == engine.strides_of(sx, sy, d)
    bound.run(object(), (x.ptr, y.ptr, sx.ptr, sy.ptr, None, d.ptr))
    assert gpu.launches[-1] == launch


def test_split_sums_come_from_the_pool_unless_the_stream_captures(gpu, monkeypatch):
    """A split call on pointers takes its sums from the pool (one buffer, kept); while its stream captures a graph,
    a buffer of its own, allocated, zeroed and freed on the stream around the launch, and the pool is left alone."""
    engine, x, y, acc = _engine((512, 2112, 7168), 3)
    out = acc._replace(ptr=PTR + 3 * 2**30)
    scalars = engine.scalars(acc, out, 1.0, 0.0)
    engine.launch(0, 0, x.ptr, y.ptr, acc.ptr, out.ptr, scalars)
    engine.launch(0, 0, x.ptr, y.ptr, acc.ptr, out.ptr, scalars)
    pooled, pooled_counters = gpu.launches[-1].slots[5:7]
    assert gpu.launches[-2].slots[5:7] == (pooled, pooled_counters)
    assert [e[0] for e in gpu.scratch] == ["alloc", "alloc", "zero"]
    monkeypatch.setattr(cuda_driver, "is_capturing", lambda stream: True)
    monkeypatch.setattr(cuda_driver, "free_async", lambda ptr, stream: gpu.scratch.append(("free", ptr)))
    engine.launch(0, 0, x.ptr, y.ptr, acc.ptr, out.ptr, scalars)
    own, counters = gpu.launches[-1].slots[5:7]
    assert own != pooled and counters not in (own, pooled_counters)
    sums_bytes = -(-engine._split_bytes[0] // 4) * 4
    assert gpu.scratch[3:] == [("alloc", sums_bytes, 0), ("alloc", engine._split_bytes[1], 0), ("zero", counters),
                               ("free", own), ("free", counters)]
    assert sorted(address for address, _ in sc.POOL.held().values()) == sorted([pooled, pooled_counters])


def test_split_calls_keep_their_pool_buffers_until_the_pool_gives_one_back(gpu, monkeypatch):
    """A split call asks the pool for its two buffers once; later calls on that stream launch with them until the
    pool gives a buffer back (a regrowth or an eviction), and a call on another stream asks again."""
    engine, x, y, acc = _engine((512, 2112, 7168), 3)
    out = acc._replace(ptr=PTR + 3 * 2**30)
    scalars = engine.scalars(acc, out, 1.0, 0.0)
    asked = []
    real_get = sc.POOL.get
    monkeypatch.setattr(sc.POOL, "get", lambda *args: asked.append(args[:3]) or real_get(*args))
    for _ in range(3):
        engine.launch(0, 0, x.ptr, y.ptr, acc.ptr, out.ptr, scalars)
    assert [use for _, _, use in asked] == ["split sums", "split counters"]
    first = gpu.launches[-1].slots[5:7]
    assert all(launch.slots[5:7] == first for launch in gpu.launches[-3:])
    engine.launch(0, 2, x.ptr, y.ptr, acc.ptr, out.ptr, scalars)  # another stream: its own buffers
    assert len(asked) == 4 and gpu.launches[-1].slots[5:7] != first
    monkeypatch.setattr(cuda_driver, "free_async", lambda ptr, stream: gpu.scratch.append(("free", ptr)))
    real_get(0, 0, "split sums", 1 << 30)  # the pool regrows the stream's sums: the old address is given back
    assert ("free", first[0]) in gpu.scratch
    engine.launch(0, 0, x.ptr, y.ptr, acc.ptr, out.ptr, scalars)
    assert len(asked) == 6 and gpu.launches[-1].slots[5] != first[0]
