"""blasdx's launch call in C (blasdx.compile.host_launch), without a GPU: it builds, checks its arguments, and
hands the driver exactly what it was given; the driver's functions are stood in for by ctypes callbacks that
record their arguments. Where it cannot be installed, launches stay on cuda.bindings and the status says why."""

from __future__ import annotations

import ctypes
import sysconfig
from pathlib import Path

import pytest

from blasdx.compile import host_launch
from blasdx.launch import cuda_driver

pytestmark = pytest.mark.skipif(
    host_launch._compiler() is None or not (Path(sysconfig.get_paths()["include"]) / "Python.h").is_file(),
    reason="needs a C compiler and Python headers",
)

_LAUNCH = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, *[ctypes.c_uint] * 7, ctypes.c_void_p,
                           ctypes.c_void_p, ctypes.c_void_p)
_PUSH = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p)
_POP = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_void_p))
_DEVICE = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_int))


class FakeDriver:
    """The four driver functions as C callbacks that log their calls; ``current`` is the current device (None:
    no context, the query fails); ``result`` is what the launch returns."""

    def __init__(self, current: int | None = 0, result: int = 0) -> None:
        self.current, self.result, self.calls = current, result, []

        def launch(function, gx, gy, gz, bx, by, bz, shared, stream, params, extra):
            slots = ctypes.cast(ctypes.cast(params, ctypes.POINTER(ctypes.c_void_p))[0],
                                ctypes.POINTER(ctypes.c_uint64))
            self.calls.append(("launch", function, (gx, gy, gz), (bx, by, bz), shared, stream, params, extra,
                               tuple(slots[i] for i in range(3))))
            return self.result

        def push(context):
            self.calls.append(("push", context))
            return 0

        def pop(out):
            self.calls.append(("pop",))
            return 0

        def device(out):
            if self.current is None:
                return 201  # CUDA_ERROR_INVALID_CONTEXT
            out[0] = self.current
            return 0

        self.callbacks = (_LAUNCH(launch), _PUSH(push), _POP(pop), _DEVICE(device))  # kept alive while in use

    def addresses(self) -> tuple[int, ...]:
        return tuple(ctypes.cast(c, ctypes.c_void_p).value for c in self.callbacks)


@pytest.fixture(scope="module")
def module(tmp_path_factory):
    """A private build of the launch call (its own file, so its entry points are its own)."""
    return host_launch._load(host_launch.build(tmp_path_factory.mktemp("host")))


@pytest.fixture
def params():
    """A parameter block of three 8-byte slots and the pointer array the driver reads."""
    slots = (ctypes.c_uint64 * 3)()
    pointers = (ctypes.c_void_p * 3)(*(ctypes.addressof(slots) + 8 * i for i in range(3)))
    return slots, pointers, ctypes.addressof(slots), ctypes.addressof(pointers)


def test_build_is_kept_and_reused(tmp_path):
    first = host_launch.build(tmp_path)
    stamp = first.stat().st_mtime_ns
    assert host_launch.build(tmp_path) == first and first.stat().st_mtime_ns == stamp
    assert [p.name for p in tmp_path.iterdir()] == [first.name]  # no temporary left behind


def test_build_without_a_compiler_raises(tmp_path, monkeypatch):
    monkeypatch.setattr(host_launch, "_compiler", lambda: None)
    with pytest.raises(OSError, match="no C compiler"):
        host_launch.build(tmp_path)


def test_arguments_are_checked(module):
    with pytest.raises(TypeError, match=r"launch\(\) takes 9 integer arguments \(3 given\)"):
        module.launch(1, 2, 3)
    with pytest.raises(TypeError, match=r"launch_pointers\(\): argument 11 must be an int"):
        module.launch_pointers(*range(11), "p2")
    with pytest.raises(TypeError, match="set_entry_points"):
        module.set_entry_points(1, 2)


def test_launch_hands_the_driver_its_arguments(module, params):
    fake = FakeDriver(result=0)
    module.set_entry_points(*fake.addresses())
    _, _, slots, pointers = params
    assert module.launch(0xF00, 3, 2, 128, 1, 1, 4096, 0x2, pointers) == 0
    (call,) = fake.calls
    assert call[:8] == ("launch", 0xF00, (3, 2, 1), (128, 1, 1), 4096, 0x2, pointers, None)
    fake.result = 719  # CUDA_ERROR_LAUNCH_FAILED comes back as it is
    assert module.launch(0xF00, 1, 1, 32, 1, 1, 0, 0, pointers) == 719


def test_launch_pointers_writes_the_three_pointers_first(module, params):
    fake = FakeDriver()
    module.set_entry_points(*fake.addresses())
    values, _, slots, pointers = params
    big = 0xFFFF_FFFF_FFFF_FF00  # a full 64-bit address survives
    assert module.launch_pointers(0xF00, 7, 256, 1, 1, 1024, 0x1, pointers, slots, 0x1000, 0x2000, big) == 0
    assert list(values) == [0x1000, 0x2000, big]
    (call,) = fake.calls
    assert call[2:6] == ((7, 1, 1), (256, 1, 1), 1024, 0x1) and call[8] == (0x1000, 0x2000, big)


@pytest.mark.parametrize("current, pushes", [(1, False), (0, True), (None, True)])
def test_launch_pointers_on_pushes_the_context_only_for_another_device(module, params, current, pushes):
    fake = FakeDriver(current=current)
    module.set_entry_points(*fake.addresses())
    _, _, slots, pointers = params
    assert module.launch_pointers_on(1, 0xC0, 0xF00, 4, 128, 1, 1, 0, 0x2, pointers, slots, 1, 2, 3) == 0
    names = [c[0] for c in fake.calls]
    assert names == (["push", "launch", "pop"] if pushes else ["launch"])
    if pushes:
        assert fake.calls[0] == ("push", 0xC0)
    assert fake.calls[names.index("launch")][8] == (1, 2, 3)


def test_a_refused_launch_still_pops(module, params):
    fake = FakeDriver(current=0, result=201)
    module.set_entry_points(*fake.addresses())
    _, _, slots, pointers = params
    assert module.launch_pointers_on(1, 0xC0, 0xF00, 4, 128, 1, 1, 0, 0x2, pointers, slots, 1, 2, 3) == 201
    assert [c[0] for c in fake.calls] == ["push", "launch", "pop"]


def test_install_stays_off_without_the_real_driver(monkeypatch):
    monkeypatch.setattr(host_launch, "_STATE", {})
    monkeypatch.setattr(cuda_driver, "_host", None)

    class NotTheDriver:
        __name__ = "fake"

    monkeypatch.setattr(host_launch._devices, "driver", lambda: NotTheDriver())
    host_launch.install()
    assert host_launch.status() == "off (the driver module is not cuda.bindings')"
    assert cuda_driver._host is None


def test_install_can_be_turned_off(monkeypatch):
    monkeypatch.setattr(host_launch, "_STATE", {})
    monkeypatch.setattr(cuda_driver, "_host", None)
    monkeypatch.setenv("BLASDX_HOST_LAUNCH", "0")
    host_launch.install()
    assert host_launch.status() == "off (BLASDX_HOST_LAUNCH=0)" and cuda_driver._host is None


def test_source_ships_with_the_package():
    assert host_launch.SOURCE.is_file()  # and the package data rule names *.c under blasdx.compile
    text = (Path(__file__).parents[1] / "pyproject.toml").read_text()
    assert '"blasdx.compile" = ["*.c"]' in text
