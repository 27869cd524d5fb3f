"""Call scratch (blasdx.launch.scratch) without a GPU: the pool outside captures, the call's own memory inside."""

from __future__ import annotations

import pytest

from blasdx.base.errors import DeviceError
from blasdx.launch import cuda_driver
from blasdx.launch import scratch as sc


class FakeDriver:
    """Records stream-ordered allocations and frees; says which streams capture."""

    def __init__(self) -> None:
        self.events: list[tuple[str, int, int]] = []  # (what, address or bytes, stream)
        self.capturing: set[int] = set()
        self.next = 0x10000

    def allocate_async(self, nbytes: int, stream: int) -> int:
        address = self.next
        self.next += max(nbytes, 256)
        self.events.append(("alloc", nbytes, stream))
        return address

    def free_async(self, address: int, stream: int) -> None:
        self.events.append(("free", address, stream))

    def is_capturing(self, stream: int) -> bool:
        if stream == 1 and self.capturing:
            raise DeviceError("stream 0x1: cuStreamIsCapturing failed: CUDA_ERROR_STREAM_CAPTURE_IMPLICIT")
        return stream in self.capturing


@pytest.fixture
def driver(monkeypatch):
    fake = FakeDriver()
    for name in ("allocate_async", "free_async", "is_capturing"):
        monkeypatch.setattr(cuda_driver, name, getattr(fake, name))
    monkeypatch.setattr(sc, "POOL", sc.ScratchPool())
    return fake


def test_pool_reuses_per_stream_and_use(driver):
    with sc.call_scratch(0, 7) as scratch:
        first = scratch.get("splits", 1000)
    with sc.call_scratch(0, 7) as scratch:
        assert scratch.get("splits", 1000) == first  # the same stream's next call: the same buffer
        assert scratch.get("splits", 1024) == first  # rounded up to a power of two
        other_use = scratch.get("a", 1000)
    with sc.call_scratch(0, 8) as scratch:
        other_stream = scratch.get("splits", 1000)
    assert len({first, other_use, other_stream}) == 3
    assert driver.events == [("alloc", 1024, 7), ("alloc", 1024, 7), ("alloc", 1024, 8)]


def test_pool_regrows_stream_ordered(driver):
    with sc.call_scratch(0, 7) as scratch:
        small = scratch.get("splits", 300)
    with sc.call_scratch(0, 7) as scratch:
        large = scratch.get("splits", 5000)
    assert large != small
    assert driver.events == [("alloc", 512, 7), ("free", small, 7), ("alloc", 8192, 7)]
    assert sc.POOL.held() == {(0, 7, "splits"): (large, 8192)}


def test_capture_takes_its_own_memory_and_frees_it_after_the_call(driver):
    with sc.call_scratch(0, 7) as scratch:
        pooled = scratch.get("splits", 4096)
    held = sc.POOL.held()
    driver.events.clear()
    driver.capturing.add(7)
    for _ in range(2):  # every captured call: an allocation and a free of its own, in stream order
        with sc.call_scratch(0, 7) as scratch:
            assert scratch.capturing
            workspace = scratch.get("splits", 4096)
            repacked = scratch.get("a", 100)
            assert workspace != pooled and repacked != pooled
            driver.events.append(("kernels", 0, 7))
    assert [e[0] for e in driver.events] == ["alloc", "alloc", "kernels", "free", "free"] * 2
    assert all(e[2] == 7 for e in driver.events)
    assert sc.POOL.held() == held  # nothing of the capture is kept; the pool's buffer is untouched
    driver.capturing.clear()
    with sc.call_scratch(0, 7) as scratch:
        assert scratch.get("splits", 4096) == pooled  # after the capture: the pool again


def test_capture_frees_even_when_a_launch_fails(driver):
    driver.capturing.add(7)
    with pytest.raises(DeviceError, match="launch failed"):
        with sc.call_scratch(0, 7) as scratch:
            address = scratch.get("splits", 4096)
            raise DeviceError("launch failed")
    assert driver.events[-1] == ("free", address, 7)


def test_legacy_stream_during_another_capture_is_a_device_error(driver):
    driver.capturing.add(7)
    with pytest.raises(DeviceError, match="CUDA_ERROR_STREAM_CAPTURE_IMPLICIT"):
        sc.call_scratch(0, 1)
    assert driver.events == []
