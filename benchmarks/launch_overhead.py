"""Host-side cost of a warm ``GEMM.execute(...)`` against a bare ``cuda.core.launch`` of the same kernel.

    python benchmarks/launch_overhead.py [--calls 200] [--rounds 21] [--out benchmarks/results/launch_overhead.json]

One small descriptor (32x32x32, f16 x f16 -> f32, one problem) so that the GPU keeps up
with the host. For each kind of array available (blasdx ``to_device``, CuPy, PyTorch):

* execute   ``desc.execute(a, b, c)`` with the default arguments (stream from the library);
* bind      the host-side checks alone (``ExecutionPlan.bind``: read three arrays, check them,
            convert alpha/beta) — what execute adds before the launch;
* bare      ``cuda.core.launch(stream, config, kernel, *args)`` with exactly the stream,
            LaunchConfig, Kernel and arguments that execute would use.

Each round times ``--calls`` back-to-back calls with ``time.perf_counter`` and synchronises
afterwards (rounds are short enough that the launch queue never fills, so the figure is
host time, not GPU time); the table shows the median per call over ``--rounds`` rounds
and the ratio execute / bare (goal: <= 2). Writes the figures as JSON. Without a GPU it
says so and exits 0.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402

import blasdx as bx  # noqa: E402
from blasdx import execute as ex  # noqa: E402

GOAL_RATIO = 2.0


def gpu_compute_capability() -> tuple[int, int] | None:
    """(major, minor) of device 0, or None without a usable GPU."""
    try:
        from cuda.core import Device, system

        if system.get_num_devices() < 1:
            return None
        device = Device(0)
        device.set_current()
        return tuple(device.compute_capability)
    except Exception:
        return None


def operand_sets(desc: bx.Descriptor) -> dict[str, tuple[Any, Any, Any, Callable[[], None]]]:
    """(a, b, c, synchronize) per array library available, laid out as ``desc`` expects."""
    rng = np.random.default_rng(0)
    m, n, k = desc.size
    a_host = rng.standard_normal((m, k)).astype(np.float16)  # row-major A
    b_host = np.asfortranarray(rng.standard_normal((k, n)).astype(np.float16))  # column-major B
    c_host = np.zeros((m, n), np.float32, order="F")  # column-major C
    from cuda.core import Device

    device = Device()
    sets: dict[str, tuple[Any, Any, Any, Callable[[], None]]] = {
        "blasdx": (bx.to_device(a_host), bx.to_device(b_host), bx.to_device(c_host), device.sync),
    }
    try:
        import cupy

        sets["cupy"] = (
            cupy.asarray(a_host), cupy.asfortranarray(cupy.asarray(b_host)), cupy.asfortranarray(cupy.asarray(c_host)),
            cupy.cuda.get_current_stream().synchronize,
        )
    except Exception:
        pass
    try:
        import torch

        sets["torch"] = (
            torch.from_numpy(a_host).cuda(), torch.from_numpy(np.ascontiguousarray(b_host.T)).cuda().T,
            torch.from_numpy(np.ascontiguousarray(c_host.T)).cuda().T, torch.cuda.synchronize,
        )
    except Exception:
        pass
    return sets


def per_call(fn: Callable[[], None], calls: int, rounds: int, sync: Callable[[], None]) -> float:
    """Median over rounds of the host time per call, in seconds."""
    for _ in range(max(10, calls // 4)):
        fn()
    sync()
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        times.append((time.perf_counter() - start) / calls)
        sync()
    return statistics.median(times)


def measure(desc: bx.Descriptor, calls: int, rounds: int) -> list[dict[str, Any]]:
    """The three timings per array library."""
    from cuda.core import launch

    rows = []
    for kind, (a, b, c, sync) in operand_sets(desc).items():
        desc.execute(a, b, c)  # compile, load, plan
        sync()
        ready = ex.prepare(desc, a, b, c)
        plan = ex.plan_for(desc)
        handle = ready.launch.stream
        stream, config, kernel, args = ready.stream, ready.config, ready.kernel, ready.args

        def run_execute() -> None:
            desc.execute(a, b, c)

        def run_bind() -> None:
            plan.bind(a, b, c, 1, 0, handle)

        def run_bare() -> None:
            launch(stream, config, kernel, *args)

        t_exec = per_call(run_execute, calls, rounds, sync)
        t_bind = per_call(run_bind, calls, rounds, sync)
        t_bare = per_call(run_bare, calls, rounds, sync)
        rows.append(
            {
                "arrays": kind,
                "execute_us": t_exec * 1e6,
                "bind_us": t_bind * 1e6,
                "bare_launch_us": t_bare * 1e6,
                "ratio": t_exec / t_bare,
            }
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=200, help="calls per timed round (default 200)")
    parser.add_argument("--rounds", type=int, default=21, help="timed rounds; the median is reported (default 21)")
    default_out = Path(__file__).resolve().parent / "results" / "launch_overhead.json"
    parser.add_argument("--out", type=Path, default=default_out, help="where the JSON goes")
    args = parser.parse_args(argv)

    cc = gpu_compute_capability()
    if cc is None:
        print("launch_overhead: skipped, no NVIDIA GPU / driver available")
        return 0
    import cuda.core
    from cuda.core import Device

    sm = cc[0] * 10 + cc[1]
    desc = (
        bx.Size(32, 32, 32) + bx.Precision(bx.float16, bx.float16, bx.float32) + bx.Type.real + bx.Function.MM
        + bx.SM(sm) + bx.Block()
    )
    rows = measure(desc, args.calls, args.rounds)

    name = Device(0).name
    print(f"launch overhead on {name} (sm_{sm}), {desc!r}")
    print(f"median host time per call over {args.rounds} rounds of {args.calls} calls")
    print(f"{'arrays':<8} {'execute us':>11} {'bind us':>9} {'bare launch us':>15} {'ratio':>7}")
    for r in rows:
        mark = "" if r["ratio"] <= GOAL_RATIO else f"  (> goal {GOAL_RATIO:g}x)"
        print(
            f"{r['arrays']:<8} {r['execute_us']:>11.2f} {r['bind_us']:>9.2f} {r['bare_launch_us']:>15.2f} "
            f"{r['ratio']:>6.2f}x{mark}"
        )
    result = {
        "benchmark": "launch_overhead",
        "device": name,
        "sm": sm,
        "descriptor": repr(desc),
        "calls_per_round": args.calls,
        "rounds": args.rounds,
        "goal_ratio": GOAL_RATIO,
        "python": platform.python_version(),
        "cuda_core": getattr(cuda.core, "__version__", "?"),
        "blasdx": bx.__version__,
        "rows": rows,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
