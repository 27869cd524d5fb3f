"""Several GPUs: every public call with its operands on each device while another device is current.

Needs two GPUs (``pytest -m multigpu``; skipped with fewer). Each test makes one device
current (torch and the CUDA driver agree on it), puts the operands on the other one, runs
the call, checks the result against the float64 reference on fresh random data (outputs
poisoned with NaN first) and checks that the device that was current still is. Calls
mixing devices, or given a stream of another device, must fail before anything runs and
leave the process healthy.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest

import blasdx as bx
from blasdx.launch import devices
from blasdx.base import dtypes as dt
from blasdx.run import execute as ex
from blasdx.reference import assert_close, gemm_scale, random_operand, reference_gemm, tolerance

from .gpu_support import gemm_operands
from .test_fusion import type_descriptor, type_source

pytestmark = [pytest.mark.gpu, pytest.mark.multigpu]

F16_F32 = dt.find_combination(dt.float16, dt.float16, dt.float32, False)


F16_F16 = dt.find_combination(dt.float16, dt.float16, dt.float16, False)


def f16_tolerance(k: int) -> float:
    """matmul's f16 -> f16 tolerance (f16 accumulation, as the type table says)."""
    return tolerance(dt.float16, dt.float16, k, F16_F16.accumulator)


def gpu_count() -> int:
    """Visible GPUs (0 without a driver)."""
    try:
        from cuda.core import system

        return int(system.get_num_devices())
    except Exception:
        return 0


@pytest.fixture(scope="module")
def sms() -> list[int]:
    """Compute capability of each of the first two GPUs (90 for an H200); skips with fewer than two."""
    if gpu_count() < 2:
        pytest.skip("needs two GPUs")
    pytest.importorskip("torch")
    from cuda.core import Device

    ccs = [tuple(Device(d).compute_capability) for d in (0, 1)]
    return [major * 10 + minor for major, minor in ccs]


@pytest.fixture()
def current(sms):
    """``current(d)`` makes device ``d`` current for torch and the driver; device 0 is current again after the test."""
    import torch
    from cuda.core import Device

    def make(device: int) -> int:
        torch.cuda.set_device(device)
        Device(device).set_current()
        assert devices.current_device_id() == device
        return device

    yield make
    torch.cuda.synchronize(0)
    torch.cuda.synchronize(1)
    make(0)


def still_current(device: int) -> None:
    import torch

    assert devices.current_device_id() == device, "the call left another device current"
    assert torch.cuda.current_device() == device


def on(device: int, host: np.ndarray):
    """A torch tensor on ``device`` holding ``host`` (made without changing the current device)."""
    import torch

    return torch.from_numpy(np.ascontiguousarray(host)).to(f"cuda:{device}")


def to_host(tensor) -> np.ndarray:
    return tensor.detach().cpu().numpy()


def gemm(sm: int, size=(48, 40, 32), precision=(bx.float16, bx.float16, bx.float32)) -> bx.Descriptor:
    """Row-major A, B and C (what contiguous torch tensors are)."""
    return (bx.Size(*size) + bx.Precision(*precision) + bx.Function.MM + bx.SM(sm) + bx.Block()
            + bx.Arrangement(bx.row_major, bx.row_major, bx.row_major))


def torch_problem(sm: int, devices: tuple[int, int, int], seed: int):
    """gemm(sm), five problems (A, B, C) drawn from ``seed`` on the host, and torch copies of A, B, C on ``devices``."""
    desc = gemm(sm)
    host = gemm_operands(desc, np.random.default_rng(seed), 5)
    return desc, host, tuple(on(device, x) for device, x in zip(devices, host))


def check_product(c, a_h: np.ndarray, b_h: np.ndarray) -> None:
    """C (a torch tensor) holds A B within the f16 -> f32 tolerance."""
    assert_close(to_host(c), reference_gemm(a_h, b_h), tolerance(dt.float16, dt.float32, 32),
                 scale=gemm_scale(a_h, b_h))


BOTH = pytest.mark.parametrize("device", [0, 1])


# ---------------------------------------------------------------------------------------------
# every public call, on each device while the other is current
# ---------------------------------------------------------------------------------------------


@BOTH
def test_execute_torch_arrays(sms, current, device):
    desc, (a_h, b_h, c_h), (a, b, c) = torch_problem(sms[device], (device, device, device), 10 + device)
    current(1 - device)
    desc.execute(a, b, c, alpha=0.5, beta=-2.0)
    still_current(1 - device)
    assert_close(to_host(c), reference_gemm(a_h, b_h, c_h, 0.5, -2.0), tolerance(dt.float16, dt.float32, 32),
                 scale=gemm_scale(a_h, b_h, c_h, 0.5, -2.0))
    c.fill_(float("nan"))  # beta = 0 never reads C
    desc.execute(a, b, c)
    check_product(c, a_h, b_h)


@BOTH
def test_execute_cupy_arrays_on_cupy_current_stream(sms, current, device):
    cp = pytest.importorskip("cupy")
    desc = gemm(sms[device], precision=(bx.float32,))
    a_h, b_h, _ = gemm_operands(desc, np.random.default_rng(20 + device), 5)
    with cp.cuda.Device(device):
        stream = cp.cuda.Stream(non_blocking=True)
        stream.use()  # CuPy's current stream on device `device` (one per device and thread)
        a, b = cp.asarray(a_h), cp.asarray(b_h)
        a2 = a * 2  # queued on that stream: the GEMM must run after it
        c = cp.full((5, 48, 40), np.nan, np.float32)
    try:
        current(1 - device)
        desc.execute(a2, b, c)  # stream None: CuPy's current stream on the arrays' device
        still_current(1 - device)
        with cp.cuda.Device(device):
            stream.synchronize()
            got = cp.asnumpy(c)
    finally:
        with cp.cuda.Device(device):
            cp.cuda.Stream.null.use()
    assert_close(got, reference_gemm(2 * a_h.astype(np.float64), b_h), 1e-5,
                 scale=gemm_scale(2 * a_h.astype(np.float64), b_h))


@BOTH
def test_execute_blasdx_arrays_on_the_default_stream(sms, current, device):
    desc = gemm(sms[device], precision=(bx.float64,))
    a_h, b_h, c_h = gemm_operands(desc, np.random.default_rng(30 + device), 5)
    a, b, c = (bx.to_device(x, device) for x in (a_h, b_h, c_h))
    assert a.device_id == device
    current(1 - device)
    desc.execute(a, b, c, alpha=2.0, beta=1.0)  # the legacy default stream of device `device`
    still_current(1 - device)
    assert_close(bx.from_device(c), reference_gemm(a_h, b_h, c_h, 2.0, 1.0), 1e-12,
                 scale=gemm_scale(a_h, b_h, c_h, 2.0, 1.0))
    still_current(1 - device)


@BOTH
@pytest.mark.parametrize("size", [(32, 32, 32), (256, 256, 256)], ids=["one-block", "multi-block"])
def test_matmul(sms, current, device, size):
    rng = np.random.default_rng(40 + device)
    m, n, k = size
    x_h, y_h = random_operand(dt.float16, (m, k), rng), random_operand(dt.float16, (k, n), rng)
    x, y = on(device, x_h), on(device, y_h)
    current(1 - device)
    z = bx.matmul(x, y)
    still_current(1 - device)
    assert z.device.index == device
    assert_close(to_host(z).astype(np.float64), reference_gemm(x_h, y_h), f16_tolerance(k), scale=gemm_scale(x_h, y_h))


@BOTH
def test_mma_new_result_and_in_place(sms, current, device):
    import torch

    rng = np.random.default_rng(50 + device)
    x_h, y_h = random_operand(dt.bfloat16, (8, 64, 48), rng), random_operand(dt.bfloat16, (8, 48, 40), rng)
    acc_h = random_operand(dt.float32, (8, 64, 40), rng)
    x = torch.from_numpy(x_h.view(np.int16)).to(f"cuda:{device}").view(torch.bfloat16)
    y = torch.from_numpy(y_h.view(np.int16)).to(f"cuda:{device}").view(torch.bfloat16)
    acc = on(device, acc_h)
    current(1 - device)
    fresh = bx.mma(x, y, acc)
    bx.mma(x, y, acc, out=acc)
    still_current(1 - device)
    expected = reference_gemm(x_h, y_h, acc_h, 1, 1)
    scale = gemm_scale(x_h, y_h, acc_h, 1, 1)
    tol = tolerance(dt.bfloat16, dt.float32, 48)
    assert fresh.device.index == device
    assert_close(to_host(fresh), expected, tol, what="mma(x, y, acc)", scale=scale)
    assert_close(to_host(acc), expected, tol, what="mma(x, y, acc, out=acc)", scale=scale)


@BOTH
def test_fused_kernel_launch(sms, current, device):
    import torch

    desc = type_descriptor(F16_F32, sms[device], "odd")  # 33 x 17 x 40: A column-major, B and C row-major
    kernel = bx.compile_kernel(type_source(F16_F32), "register_api", {"GEMM": desc})
    rng = np.random.default_rng(60 + device)
    batch, (m, n, k) = 3, desc.size
    a_h = random_operand(dt.float16, (batch, m, k), rng)
    b_h = random_operand(dt.float16, (batch, k, n), rng)
    a = on(device, np.swapaxes(a_h, 1, 2)).transpose(1, 2)  # column-major problems, tightly stored
    b = on(device, b_h)
    c = torch.full((batch, m, n), float("nan"), device=f"cuda:{device}")
    current(1 - device)
    kernel.launch(batch, (a, b, c, 1.0, 0.0))
    still_current(1 - device)
    # the kernel's load transform doubles A (tests/test_fusion.py TYPE_KERNELS)
    assert_close(to_host(c), reference_gemm(2.0 * a_h.astype(np.float64), b_h), tolerance(dt.float16, dt.float32, k),
                 scale=gemm_scale(2.0 * a_h.astype(np.float64), b_h))


@BOTH
def test_to_device_and_from_device(sms, current, device):
    host = np.random.default_rng(70 + device).standard_normal((33, 7)).astype(np.float32)
    current(1 - device)
    array = bx.to_device(host, device)
    assert array.device_id == device
    np.testing.assert_array_equal(bx.from_device(array), host)
    still_current(1 - device)


# ---------------------------------------------------------------------------------------------
# refused before anything runs; the process stays healthy
# ---------------------------------------------------------------------------------------------


def test_mixed_devices_are_refused_and_nothing_runs(sms, current):
    import torch

    desc, (a_h, b_h, _), (a, b, c) = torch_problem(sms[0], (0, 1, 0), 80)
    before = c.clone()
    current(0)
    with pytest.raises(bx.ExecutionError, match="b: the array is on device 1 but a is on device 0"):
        desc.execute(a, b, c)
    with pytest.raises(bx.ExecutionError, match=r"arrays on different devices \(x on device 0, y on device 1\)"):
        bx.matmul(a[0], b[0])
    with pytest.raises(bx.ExecutionError, match="arrays on different devices"):
        bx.mma(a[0], on(0, b_h[0]), c[0].to("cuda:1"))
    kernel = bx.compile_kernel(type_source(F16_F32), "register_api", {"GEMM": type_descriptor(F16_F32, sms[0], "odd")})
    x = torch.zeros(3, 40, 33, device="cuda:0", dtype=torch.float16).transpose(1, 2)
    y = torch.zeros(3, 40, 17, device="cuda:1", dtype=torch.float16)
    z = torch.zeros(3, 33, 17, device="cuda:0")
    with pytest.raises(bx.ExecutionError, match="the array arguments are on devices 0, 1"):
        kernel.launch(3, (x, y, z, 1.0, 0.0))
    torch.cuda.synchronize(0)
    torch.cuda.synchronize(1)
    assert torch.equal(c, before)
    desc.execute(a, on(0, b_h), c)  # still healthy
    check_product(c, a_h, b_h)


def test_a_stream_of_another_device_is_refused(sms, current):
    import torch

    desc, (a_h, b_h, _), (a, b, c) = torch_problem(sms[1], (1, 1, 1), 90)
    before = c.clone()
    current(0)
    foreign = torch.cuda.Stream(device=0)
    with pytest.raises(bx.ExecutionError, match="stream: .* belongs to device 0 but the arrays are on device 1"):
        desc.execute(a, b, c, stream=foreign)
    with pytest.raises(bx.ExecutionError, match="belongs to device 0 but the arrays are on device 1"):
        desc.execute(a, b, c, stream=foreign.cuda_stream)  # a bare handle: the driver says whose it is
    with pytest.raises(bx.ExecutionError, match="belongs to device 0 but the arrays are on device 1"):
        bx.matmul(a[0], b[0], stream=foreign)
    from cuda.core import Device

    core_stream = Device(0).create_stream()
    with pytest.raises(bx.ExecutionError, match="belongs to device 0 but the arrays are on device 1"):
        bx.mma(a[0], b[0], c[0], out=c[0], stream=core_stream)
    torch.cuda.synchronize(1)
    assert torch.equal(c, before)
    own = torch.cuda.Stream(device=1)
    desc.execute(a, b, c, stream=own)
    own.synchronize()
    check_product(c, a_h, b_h)


# ---------------------------------------------------------------------------------------------
# one thread per device; module cache per device; precompile for several devices
# ---------------------------------------------------------------------------------------------


def test_one_thread_per_device_each_with_its_own_stream(sms, current):
    import torch

    desc = gemm(sms[0], size=(64, 64, 64))
    results: dict[int, object] = {}
    failures: list[str] = []

    def work(device: int) -> None:
        try:
            torch.cuda.set_device(1 - device)  # this thread's current device is the other one
            rng = np.random.default_rng(100 + device)
            a_h, b_h, _ = gemm_operands(desc, rng, 16)
            a, b = on(device, a_h), on(device, b_h)
            stream = torch.cuda.Stream(device=device)
            c = torch.full((16, 64, 64), float("nan"), device=f"cuda:{device}")
            for _ in range(50):
                desc.execute(a, b, c, stream=stream)
                z = bx.matmul(a, b, stream=stream)
            stream.synchronize()
            results[device] = (a_h, b_h, to_host(c), to_host(z))
            if devices.current_device_id() != 1 - device:
                failures.append(f"thread of device {device}: the current device changed")
        except Exception as exc:  # reported below
            failures.append(f"thread of device {device}: {type(exc).__name__}: {exc}")

    threads = [threading.Thread(target=work, args=(d,)) for d in (0, 1)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    assert failures == []
    for device, (a_h, b_h, c, z) in results.items():
        ref = reference_gemm(a_h, b_h)
        assert_close(c, ref, tolerance(dt.float16, dt.float32, 64), what=f"execute on device {device}")
        assert_close(z.astype(np.float64), ref, f16_tolerance(64), what=f"matmul on {device}")


def test_compiled_modules_are_cached_per_device(sms, current):
    desc = gemm(sms[0], size=(24, 24, 24))
    a_h, b_h, c_h = gemm_operands(desc, np.random.default_rng(110), 5)
    for device in (0, 1):
        current(1 - device)
        desc.execute(on(device, a_h), on(device, b_h), on(device, c_h))
    compiled = desc.compile()
    assert compiled.loaded_devices() == (0, 1)
    plans = ex.plan_for(desc)._devices
    assert sorted(plans) == [0, 1] and plans[0].kernel is not plans[1].kernel
    assert plans[0].kernel is compiled.kernel(device_id=0) and plans[1].kernel is compiled.kernel(device_id=1)


def test_precompile_for_several_devices(sms, current):
    desc = gemm(sms[0], size=(56, 24, 40), precision=(bx.float32,))  # a descriptor no other test uses
    [compiled] = bx.precompile([desc], devices=[0, 1])
    assert compiled.loaded_devices() == (0, 1) and sorted(ex.plan_for(desc)._devices) == [0, 1]
    a_h, b_h, _ = gemm_operands(desc, np.random.default_rng(120), 5)
    current(0)
    c = on(1, np.full((5, 56, 24), np.nan, np.float32))
    desc.execute(on(1, a_h), on(1, b_h), c)
    assert_close(to_host(c), reference_gemm(a_h, b_h), 1e-5, scale=gemm_scale(a_h, b_h))
    assert bx.precompile([desc], devices="all")[0] is compiled
