"""Host-side cost of a warm ``GEMM.execute(...)`` against a bare ``cuda.core.launch``, and of ``bx.matmul``
against ``torch.matmul``.

    python benchmarks/launch_overhead.py [--calls 200] [--rounds 21] [--out benchmarks/results/launch_overhead.json]

1. One small descriptor (32x32x32, f16 x f16 -> f32, one problem) so that the GPU keeps up
   with the host. For each kind of array available (blasdx ``to_device``, CuPy, PyTorch):

   * execute   ``desc.execute(a, b, c)`` with the default arguments (stream from the library);
   * bind      the host-side checks alone (``ExecutionPlan.bind``: read three arrays, check
               them, convert alpha/beta) — what execute adds before the launch;
   * packed    the launch execute makes: the device plan's pre-packed ``cuLaunchKernel``;
   * bare      ``cuda.core.launch(stream, config, kernel, *args)`` with exactly the stream,
               LaunchConfig, Kernel and arguments that execute uses.

   ratio = execute / bare (goal: <= 1.5). With two GPUs, one more PyTorch row has the
   arrays on device 1 while device 0 is current (execute makes device 1 current and back).

2. ``bx.matmul(x, y)`` against ``torch.matmul(x, y)`` on single f16 matrices of 32^3 to
   512^3 (new result each call): ratio = matmul / torch (goal: <= 1); ``bx.mma(x, y, acc,
   out=out)`` against the same torch.matmul (goal: <= 0.9).

3. ``bx.scaled_mm`` (fp8, sm_90) against ``torch._scaled_mm`` and ``bx.solve_triangular``
   against ``torch.linalg.solve_triangular``, per call; and the pieces a call is made of
   (attribute reads, allocation, driver queries, one launch by blasdx's packed route and
   through cuda.bindings by CUkernel and by CUfunction, whole calls without the launch).

Each round times ``--calls`` back-to-back calls with ``time.perf_counter`` and synchronises
afterwards; the calls a ratio compares take their rounds in turn, and tables show the median
per call over ``--rounds`` rounds (host time while the
GPU keeps up; at the larger matmul sizes the GPU's own time shows through). Writes JSON.
Without a GPU it says so and exits 0.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable, Iterator

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402

import blasdx as bx  # noqa: E402
from blasdx.compile import host_launch  # noqa: E402
from blasdx.launch import devices  # noqa: E402
from blasdx.run import execute as ex  # noqa: E402

GOAL_RATIO = 1.5
MATMUL_GOAL = 1.0
MATMUL_SIZES = (32, 64, 128, 256, 512)


def gpu_count() -> int:
    """Visible GPUs; device 0 made current when there is one."""
    try:
        from cuda.core import Device, system

        count = int(system.get_num_devices())
        if count:
            Device(0).set_current()
        return count
    except Exception:
        return 0


def operand_sets(desc: bx.Descriptor, device: int = 0) -> dict[str, tuple[Any, Any, Any, Callable[[], None]]]:
    """(a, b, c, synchronize) per array library available, laid out as ``desc`` expects, on ``device``."""
    rng = np.random.default_rng(0)
    m, n, k = desc.size
    a_host = rng.standard_normal((m, k)).astype(np.float16)  # row-major A
    b_host = np.asfortranarray(rng.standard_normal((k, n)).astype(np.float16))  # column-major B
    c_host = np.zeros((m, n), np.float32, order="F")  # column-major C
    from cuda.core import Device

    def sync_device() -> None:
        with devices.on_device(device):
            Device(device).sync()

    sets: dict[str, tuple[Any, Any, Any, Callable[[], None]]] = {}
    if device == 0:
        sets["blasdx"] = (bx.to_device(a_host), bx.to_device(b_host), bx.to_device(c_host), sync_device)
    try:
        import cupy

        if device == 0:
            sets["cupy"] = (
                cupy.asarray(a_host), cupy.asfortranarray(cupy.asarray(b_host)),
                cupy.asfortranarray(cupy.asarray(c_host)), cupy.cuda.get_current_stream().synchronize,
            )
    except Exception:
        pass
    try:
        import torch

        where = f"cuda:{device}"
        sets["torch" if device == 0 else f"torch on device {device}, device 0 current"] = (
            torch.from_numpy(a_host).to(where), torch.from_numpy(np.ascontiguousarray(b_host.T)).to(where).T,
            torch.from_numpy(np.ascontiguousarray(c_host.T)).to(where).T, lambda: torch.cuda.synchronize(device),
        )
    except Exception:
        pass
    return sets


def per_call(fn: Callable[[], None], calls: int, rounds: int, sync: Callable[[], None]) -> float:
    """Median over rounds of the host time per call, in seconds."""
    return side_by_side([fn], calls, rounds, sync)[0]


def side_by_side(fns: list[Callable[[], None]], calls: int, rounds: int, sync: Callable[[], None],
                 devices_of: list[int | None] | None = None) -> list[float]:
    """:func:`per_call` of several calls whose times are compared, their rounds taken in turn (call 1, call 2, ...,
    call 1, ...): a drift of the host's speed during the run (clock, other load) reaches each the same way.
    ``devices_of[i]``, when not None, is made current around call i's rounds (outside the timing)."""
    where = devices_of or [None] * len(fns)
    for fn, device in zip(fns, where):
        with devices.on_device(device) if device is not None else contextlib.nullcontext():
            for _ in range(max(10, calls // 4)):
                fn()
    sync()
    times: list[list[float]] = [[] for _ in fns]
    for _ in range(rounds):
        for fn, device, found in zip(fns, where, times):
            with devices.on_device(device) if device is not None else contextlib.nullcontext():
                start = time.perf_counter()
                for _ in range(calls):
                    fn()
                found.append((time.perf_counter() - start) / calls)
            sync()
    return [statistics.median(found) for found in times]


def measure(desc: bx.Descriptor, calls: int, rounds: int, device: int = 0) -> list[dict[str, Any]]:
    """The four timings per array library, arrays on ``device`` (device 0 current)."""
    from cuda.core import launch

    rows = []
    for kind, (a, b, c, sync) in operand_sets(desc, device).items():
        desc.execute(a, b, c)  # compile, load, plan
        sync()
        ready = ex.prepare(desc, a, b, c)
        plan = ex.plan_for(desc)
        handle = ready.launch.stream
        stream, config, kernel, args = ready.stream, ready.config, ready.kernel, ready.args
        device_plan = plan.on_device(device)

        def run_execute() -> None:
            desc.execute(a, b, c)

        def run_bind() -> None:
            plan.bind(a, b, c, 1, 0, handle)

        def run_packed() -> None:
            device_plan.launch(1, handle, args)

        def run_bare() -> None:
            launch(stream, config, kernel, *args)

        # the packed and bare launches run in the arrays' context (execute and bind find it themselves)
        t_exec, t_bind, t_packed, t_bare = side_by_side([run_execute, run_bind, run_packed, run_bare], calls, rounds,
                                                        sync, [None, None, device, device])
        rows.append(
            {
                "arrays": kind,
                "execute_us": t_exec * 1e6,
                "bind_us": t_bind * 1e6,
                "packed_launch_us": t_packed * 1e6,
                "bare_launch_us": t_bare * 1e6,
                "ratio": t_exec / t_bare,
            }
        )
    return rows


def _relative_error(torch: Any, got: Any, ref: Any) -> float:
    return float((got.double() - ref).norm() / ref.norm())


def measure_matmul(calls: int, rounds: int) -> list[dict[str, Any]]:
    """bx.matmul against torch.matmul per call on f16 s x s matrices; bx.mma(out=) against both."""
    try:
        import torch
    except Exception:
        return []
    rows = []
    for s in MATMUL_SIZES:
        x = torch.randn(s, s, device="cuda:0", dtype=torch.float16)
        y = torch.randn(s, s, device="cuda:0", dtype=torch.float16)
        acc = torch.randn(s, s, device="cuda:0", dtype=torch.float16)
        out = torch.empty_like(acc)
        ref = x.double() @ y.double()
        err = _relative_error(torch, bx.matmul(x, y), ref)
        assert err < 1e-2, f"bx.matmul {s}^3: relative error {err}"
        bx.mma(x, y, acc, out=out)
        err = _relative_error(torch, out, ref + acc.double())
        assert err < 1e-2, f"bx.mma {s}^3: relative error {err}"
        sync = torch.cuda.synchronize
        t_bx, t_torch, t_mma = side_by_side([lambda: bx.matmul(x, y), lambda: torch.matmul(x, y),
                                             lambda: bx.mma(x, y, acc, out=out)], calls, rounds, sync)
        rows.append({"size": s, "bx_matmul_us": t_bx * 1e6, "torch_matmul_us": t_torch * 1e6, "ratio": t_bx / t_torch,
                     "bx_mma_out_us": t_mma * 1e6, "mma_out_ratio": t_mma / t_torch})
    return rows


def measure_other_calls(calls: int, rounds: int) -> dict[str, list[dict[str, Any]]]:
    """bx.scaled_mm (fp8, sm_90) against torch._scaled_mm and bx.solve_triangular against torch's, per call."""
    try:
        import torch
    except Exception:
        return {}
    from cuda.core import Device

    sync = torch.cuda.synchronize
    found: dict[str, list[dict[str, Any]]] = {"scaled_mm": [], "solve_triangular": []}
    major, _ = Device(0).compute_capability
    for s in (64, 256, 512) if major == 9 else ():
        x = torch.randn(s, s, device="cuda:0").to(torch.float8_e4m3fn)
        y = torch.randn(s, s, device="cuda:0").to(torch.float8_e4m3fn).t()  # column-major, as torch wants it
        one = torch.ones((), device="cuda:0")
        ref = x.double() @ y.double()
        err = _relative_error(torch, bx.scaled_mm(x, y, one, one, out_dtype=bx.bfloat16), ref)
        assert err < 2e-2, f"bx.scaled_mm {s}^3: relative error {err}"
        t_bx, t_torch = side_by_side([lambda: bx.scaled_mm(x, y, one, one, out_dtype=bx.bfloat16),
                                      lambda: torch._scaled_mm(x, y, one, one, out_dtype=torch.bfloat16)], calls,
                                     rounds, sync)
        found["scaled_mm"].append({"size": s, "bx_us": t_bx * 1e6, "torch_us": t_torch * 1e6,
                                   "ratio": t_bx / t_torch})
    for s in (32, 64):
        a = torch.randn(s, s, device="cuda:0").tril() * 0.1 + 4 * torch.eye(s, device="cuda:0")
        b = torch.randn(s, 64, device="cuda:0")
        ref = torch.linalg.solve_triangular(a.double(), b.double(), upper=False)
        err = _relative_error(torch, bx.solve_triangular(a, b, lower=True), ref)
        assert err < 1e-4, f"bx.solve_triangular {s}: relative error {err}"
        t_bx, t_torch = side_by_side([lambda: bx.solve_triangular(a, b, lower=True),
                                      lambda: torch.linalg.solve_triangular(a, b, upper=False)], calls, rounds, sync)
        found["solve_triangular"].append({"size": s, "rhs": 64, "bx_us": t_bx * 1e6, "torch_us": t_torch * 1e6,
                                          "ratio": t_bx / t_torch})
    return found


@contextlib.contextmanager
def no_launches() -> Iterator[None]:
    """Every launch step made a no-op: PackedLaunch's launch, launch_pointers and try_launch_pointers (packing and
    driver call; the bound paths hold their PackedLaunch, so the class is patched) and the engine's
    cuda_driver.launch. What a call costs the host besides its launch."""
    from blasdx.launch import cuda_driver

    cls = cuda_driver.PackedLaunch
    saved = (cls.launch, cls.launch_pointers, cls.try_launch_pointers, cuda_driver.launch)
    cls.launch = cls.launch_pointers = lambda self, *args: None  # type: ignore[method-assign]
    cls.try_launch_pointers = lambda self, *args: True  # type: ignore[method-assign]
    cuda_driver.launch = lambda *args, **kwargs: None
    try:
        yield
    finally:
        cls.launch, cls.launch_pointers, cls.try_launch_pointers, cuda_driver.launch = saved  # type: ignore


def ctypes_pieces(function: int, block: tuple[int, int, int], shared_memory: int, stream: int,
                  params: int) -> dict[str, Callable[[], Any]]:
    """The driver's launch and capture query called through ctypes (libcuda's C functions, no cuda.bindings
    wrapper), to weigh against the cuda.bindings rows; empty where libcuda cannot be loaded."""
    import ctypes

    try:
        lib = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return {}
    launch = lib.cuLaunchKernel
    launch.argtypes = [ctypes.c_void_p] + [ctypes.c_uint] * 7 + [ctypes.c_void_p] * 3
    launch.restype = ctypes.c_int
    capturing = lib.cuStreamIsCapturing
    capturing.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_int)]
    capturing.restype = ctypes.c_int
    status = ctypes.c_int()
    where = ctypes.byref(status)
    bx_, by_, bz_ = block
    return {
        "launch, ctypes, CUfunction": lambda: launch(function, 1, 1, 1, bx_, by_, bz_, shared_memory, stream, params,
                                                     None),
        "cuStreamIsCapturing (ctypes)": lambda: capturing(stream, where),
    }


def measure_pieces(desc: bx.Descriptor, calls: int, rounds: int) -> dict[str, float]:
    """Host cost of the pieces a call is made of (us per call): where the time of a call goes.

    PyTorch attribute reads, torch's allocation, the driver queries a call makes, one launch
    of ``desc``'s packed kernel (blasdx's packed route, and cuda.bindings by its CUkernel and
    by its CUfunction), and whole calls with the driver's launch left out.
    """
    try:
        import torch
    except Exception:
        return {}
    from blasdx.arrays import as_array, keys
    from blasdx.launch import cuda_driver

    x = torch.randn(32, 32, device="cuda:0", dtype=torch.float16)
    dev, f16 = x.device, torch.float16
    a, b, c, sync = operand_sets(desc)["torch"]
    desc.execute(a, b, c)
    sync()
    plan = ex.plan_for(desc)
    ready = ex.prepare(desc, a, b, c)
    handle, args = ready.launch.stream, ready.args
    device_plan = plan.on_device(0)
    packed = device_plan.packed
    buffers = packed.buffers()
    block = packed.block
    drv = devices.driver()
    with devices.on_device(0):
        by_function = cuda_driver.function_of(packed._kernel)
    stream = cuda_driver.stream_object(handle)
    raw_stream = torch._C._cuda_getCurrentRawStream
    tail = ex.python_numbers(args[3:])  # one tuple, as a bound call keeps it: the launch writes the pointers
    gather = keys.gatherer(type(a))
    pieces = {
        "torch.empty 32x32 f16": lambda: torch.empty((32, 32), dtype=torch.float16, device=x.device),
        # the ways of allocating bx.matmul's result (blasdx.calls.matmul keeps the device and dtype objects)
        "torch.empty((32, 32), dtype=, device=torch.device)": lambda: torch.empty((32, 32), dtype=f16, device=dev),
        "torch.empty(32, 32, dtype=, device=torch.device)": lambda: torch.empty(32, 32, dtype=f16, device=dev),
        "torch.empty((32, 32), dtype=, device=int)": lambda: torch.empty((32, 32), dtype=f16, device=0),
        "torch.empty_strided((32, 32), (32, 1), ...)": lambda: torch.empty_strided((32, 32), (32, 1), dtype=f16,
                                                                                    device=dev),
        "tensor.new_empty((32, 32))": lambda: x.new_empty((32, 32)),
        "tensor.data_ptr()": x.data_ptr,
        "tensor.shape + stride()": lambda: (x.shape, x.stride()),
        "keys.read(tensor)": lambda: keys.read(x),
        "keys gather, 3 tensors (execute's key)": lambda: gather(a, b, c),
        "keys.read_pair, 2 tensors (bx.matmul's key)": lambda: keys.read_pair(a, b),
        "keys.read_quad, 4 tensors (bx.mma(out=)'s key)": lambda: keys.read_quad(a, b, c, x),
        "torch raw current stream": lambda: raw_stream(0),
        "as_array(tensor)": lambda: as_array(x, "x", stream=handle),
        "cuCtxGetDevice (cuda.bindings)": drv.cuCtxGetDevice,
        "cuStreamIsCapturing (cuda.bindings)": lambda: drv.cuStreamIsCapturing(stream),
        "cuda_driver.is_capturing (blasdx)": lambda: cuda_driver.is_capturing(handle),
        "launch, packed (blasdx's route)": lambda: packed.launch(1, 1, handle, *args),
        "launch, packed on pointers (bound calls' route)": lambda: packed.launch_pointers(1, handle, *args[:3], tail),
        "launch, cuda.bindings, CUfunction": lambda: drv.cuLaunchKernel(by_function, 1, 1, 1, *block,
                                                                         packed.shared_memory, stream,
                                                                         buffers.address, 0),
        "launch, cuda.bindings, CUkernel, no packing": lambda: drv.cuLaunchKernel(packed._function, 1, 1, 1, *block,
                                                                                   packed.shared_memory, stream,
                                                                                   buffers.address, 0),
    }
    side = torch.cuda.Stream()  # a stream of its own: no legacy-stream ordering for the driver to keep
    side_handle = side.cuda_stream
    side_stream = cuda_driver.stream_object(side_handle)
    from cuda.core import launch as core_launch

    from blasdx.arrays import core_stream

    pieces["launch, cuda.bindings, CUfunction, own stream"] = lambda: drv.cuLaunchKernel(
        by_function, 1, 1, 1, *block, packed.shared_memory, side_stream, buffers.address, 0)
    pieces["launch, cuda.core (bare)"] = lambda: core_launch(ready.stream, ready.config, ready.kernel, *args)
    pieces["launch, cuda.core (bare), own stream"] = lambda: core_launch(core_stream(side_handle), ready.config,
                                                                         ready.kernel, *args)
    pieces.update(ctypes_pieces(int(by_function), block, packed.shared_memory, handle, buffers.address))
    found = {name: per_call(fn, calls, rounds, sync) * 1e6 for name, fn in pieces.items()}
    # whole calls with the driver's launch left out: what blasdx itself costs
    sizes = (256, 512)
    operands = {s: (torch.randn(s, s, device="cuda:0", dtype=torch.float16),
                    torch.randn(s, s, device="cuda:0", dtype=torch.float16),
                    torch.empty(s, s, device="cuda:0", dtype=torch.float16)) for s in sizes}
    for xs, acc, out in operands.values():  # plans made and bound with the real launches
        bx.matmul(xs, xs)
        bx.mma(xs, xs, acc, out=out)
    sync()
    # each whole call measured next to its no-launch twin, so that the two rows differ by the launch alone
    found["execute (torch)"] = per_call(lambda: desc.execute(a, b, c), calls, rounds, sync) * 1e6
    for s, (xs, acc, out) in operands.items():
        found[f"bx.matmul {s}^3"] = per_call(lambda: bx.matmul(xs, xs), calls, rounds, sync) * 1e6
        found[f"bx.mma(out=) {s}^3"] = per_call(lambda: bx.mma(xs, xs, acc, out=out), calls, rounds, sync) * 1e6
    with no_launches():
        found["execute (torch), no launch"] = per_call(lambda: desc.execute(a, b, c), calls, rounds, sync) * 1e6
        for s, (xs, acc, out) in operands.items():
            found[f"bx.matmul {s}^3, no launch"] = per_call(lambda: bx.matmul(xs, xs), calls, rounds, sync) * 1e6
            found[f"bx.mma(out=) {s}^3, no launch"] = per_call(lambda: bx.mma(xs, xs, acc, out=out), calls, rounds,
                                                               sync) * 1e6
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200, help="calls per timed round (default 200)")
    parser.add_argument("--rounds", type=int, default=21, help="timed rounds; the median is reported (default 21)")
    default_out = Path(__file__).resolve().parent / "results" / "launch_overhead.json"
    parser.add_argument("--out", type=Path, default=default_out, help="where the JSON goes")
    args = parser.parse_args(argv)

    count = gpu_count()
    if count == 0:
        print("launch_overhead: skipped, no NVIDIA GPU / driver available")
        return 0
    import cuda.core
    from cuda.core import Device

    major, minor = Device(0).compute_capability
    sm = major * 10 + minor
    desc = (
        bx.Size(32, 32, 32) + bx.Precision(bx.float16, bx.float16, bx.float32) + bx.Type.real + bx.Function.MM
        + bx.SM(sm) + bx.Block()
    )
    name = Device(0).name
    result: dict[str, Any] = {
        "benchmark": "launch_overhead",
        "device": name,
        "gpus": count,
        "sm": sm,
        "descriptor": repr(desc),
        "calls_per_round": args.calls,
        "rounds": args.rounds,
        "goal_ratio": GOAL_RATIO,
        "matmul_goal_ratio": MATMUL_GOAL,
        "python": platform.python_version(),
        "cuda_core": getattr(cuda.core, "__version__", "?"),
        "blasdx": bx.__version__,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)

    def save(**found: Any) -> None:  # after each part: what was measured survives a run cut short
        result.update(found)
        args.out.write_text(json.dumps(result, indent=2) + "\n")

    print(f"launch overhead on {name} (sm_{sm}, {count} GPU(s)), {desc!r}")
    print(f"median host time per call over {args.rounds} rounds of {args.calls} calls")
    rows = measure(desc, args.calls, args.rounds)
    if count > 1:
        rows += measure(desc, args.calls, args.rounds, device=1)
    # decided at the first kernel load, inside measure()
    print(f"blasdx's C launch call: {host_launch.status()} (BLASDX_HOST_LAUNCH=0 turns it off)")
    save(rows=rows, host_launch=host_launch.status())
    print(f"{'arrays':<38} {'execute us':>11} {'bind us':>9} {'packed us':>10} {'bare launch us':>15} {'ratio':>7}")
    for r in rows:
        mark = "" if r["ratio"] <= GOAL_RATIO else f"  (> goal {GOAL_RATIO:g}x)"
        print(
            f"{r['arrays']:<38} {r['execute_us']:>11.2f} {r['bind_us']:>9.2f} {r['packed_launch_us']:>10.2f} "
            f"{r['bare_launch_us']:>15.2f} {r['ratio']:>6.2f}x{mark}"
        )
    matmul_rows = measure_matmul(args.calls, args.rounds)
    save(matmul=matmul_rows)
    if matmul_rows:
        print("bx.matmul against torch.matmul, f16 s x s x s, a new result per call:")
        print(f"{'s':>5} {'bx.matmul us':>13} {'torch.matmul us':>16} {'ratio':>7} {'bx.mma(out=) us':>16} "
              f"{'ratio':>7}")
        for r in matmul_rows:
            mark = "" if r["ratio"] <= MATMUL_GOAL else f"  (> goal {MATMUL_GOAL:g}x)"
            print(f"{r['size']:>5} {r['bx_matmul_us']:>13.2f} {r['torch_matmul_us']:>16.2f} {r['ratio']:>6.2f}x "
                  f"{r['bx_mma_out_us']:>16.2f} {r['mma_out_ratio']:>6.2f}x{mark}", flush=True)
    others = measure_other_calls(args.calls, args.rounds)
    save(**others)
    for what, found in others.items():
        if found:
            print(f"bx.{what} against torch's, per call:")
            for r in found:
                print(f"{r['size']:>5} {r['bx_us']:>10.2f} us {r['torch_us']:>10.2f} us {r['ratio']:>6.2f}x")
    pieces = measure_pieces(desc, args.calls, args.rounds)
    save(pieces_us=pieces)
    if pieces:
        print("pieces of a call, us each:")
        for what, us in pieces.items():
            print(f"  {what:<40} {us:>8.2f}", flush=True)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
