"""bx.matmul / bx.mma: host cost of a repeated call, and the device-level paths against torch and Triton.

    python benchmarks/matmul.py [--sizes 256 1024 4096] [--shapes 16x8192x8192 ...] [--types f16 bf16 ...]
                                [--engine-sweep 8192x8192x8192 ...] [--json PATH]

1. Overhead: many small problems (1000 x 32^3, f16 -> f32), so the host decides the time.
   Compares a held descriptor's execute(), bx.mma(..., out=acc) (in place: the same work
   plus the array-level look-up), bx.matmul (plus allocating the result) and torch.matmul.
2. Speed: square and skinny products through bx.matmul (on Hopper the wgmma + TMA engine,
   elsewhere the multi-block kernel) against torch.matmul (cuBLAS) and a Triton persistent
   TMA matmul (benchmarks/triton_matmul.py) on the same data, each result checked on 64
   sampled rows against the float64 product. Time per call includes the host's launch
   cost (one call between CUDA events on an idle GPU).
3. --engine-sweep: every Hopper engine configuration and K split on the given shapes (for f32 /
   f64 the wide path's variants, blasdx/engine/wide.py).
Prints tables, writes JSON and, with matplotlib, a PNG beside it.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from datetime import date
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import blasdx as bx  # noqa: E402
from batched import cuda_sm, pyplot, time_ms  # noqa: E402  (shared by the benchmarks)
from blasdx.calls import matmul as array_gemm  # noqa: E402
from blasdx.base import dtypes as dt  # noqa: E402
from blasdx.reference import assert_close, reference_gemm, tolerance  # noqa: E402
from matmul_competitors import TRITON_CASES, merge_cublasdx, run_cublasdx_pipeline, triton_call  # noqa: E402

TYPES = {"f16": dt.float16, "bf16": dt.bfloat16, "tf32": dt.tfloat32, "f32": dt.float32, "f64": dt.float64,
         "int8": dt.int8, "e4m3": dt.float8_e4m3}
SIZES = [256, 512, 1024, 2048, 4096, 8192]


def host_us(fn, calls: int = 2000) -> float:
    """Mean host microseconds per call of a loop of ``calls`` (best of 3), synchronised at the end."""
    import torch

    fn()
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
        best = min(best, (time.perf_counter() - start) / calls * 1e6)
    return best


def overhead() -> dict:
    import torch

    batch, s = 1000, 32
    x = torch.randn(batch, s, s, device="cuda", dtype=torch.float16)
    y = torch.randn(batch, s, s, device="cuda", dtype=torch.float16)
    acc = torch.zeros(batch, s, s, device="cuda", dtype=torch.float32)
    desc = (bx.Size(s, s, s) + bx.Precision(bx.float16, bx.float16, bx.float32) + bx.Function.MM
            + bx.Arrangement(bx.row_major, bx.row_major, bx.row_major) + bx.MaxAlignment + bx.SM(cuda_sm()) + bx.Block())
    bx.mma(x, y, acc, out=acc)
    rows = {
        "execute (held descriptor)": host_us(lambda: desc.execute(x, y, acc, beta=1)),
        "bx.mma(out=acc)": host_us(lambda: bx.mma(x, y, acc, out=acc)),
        "bx.mma (new result)": host_us(lambda: bx.mma(x, y, acc)),
        "bx.matmul (new result)": host_us(lambda: bx.matmul(x, y)),
        "torch.matmul (new result)": host_us(lambda: torch.matmul(x, y)),
    }
    base = rows["execute (held descriptor)"]
    print(f"\nhost cost per call, {batch} x {s}^3 f16 -> f32 (us):")
    for name, us in rows.items():
        print(f"  {name:28s} {us:7.2f} us  ({us / base:.2f}x execute)")
    return {"problem": f"{batch}x{s}^3 f16", "us": rows}


def _torch_dtype(t: dt.DType):
    import torch

    return {"float16": torch.float16, "bfloat16": torch.bfloat16, "tfloat32": torch.float32, "float32": torch.float32,
            "float64": torch.float64, "int8": torch.int8, "float8_e4m3": torch.float8_e4m3fn}[t.name]


def _host(t, value: dt.DType) -> np.ndarray:
    import torch

    t = t.detach().cpu()
    if value.name in ("bfloat16", "float8_e4m3"):
        return t.to(torch.float64).numpy()
    return t.numpy()


def _competitor(name: str, x, y):
    """torch's call for the case (cuBLAS), or None where torch has no plain one."""
    import torch

    torch.backends.cuda.matmul.allow_tf32 = name == "tf32"
    if name == "int8":
        return lambda: torch._int_mm(x, y)
    if name == "e4m3":
        one = torch.ones((), device="cuda")
        yt = y.t().contiguous().t()  # _scaled_mm wants a column-major B
        return lambda: torch._scaled_mm(x, yt, scale_a=one, scale_b=one, out_dtype=torch.float16)
    return lambda: torch.matmul(x, y)


def _operands(a: dt.DType, m: int, n: int, k: int, gen):
    """Random row-major torch operands (m x k, k x n) of type ``a`` and what bx.matmul takes (tf32-marked)."""
    import torch

    if a.integral:
        x = torch.randint(-8, 8, (m, k), device="cuda", dtype=torch.int8, generator=gen)
        y = torch.randint(-8, 8, (k, n), device="cuda", dtype=torch.int8, generator=gen)
    else:
        x = torch.randn(m, k, device="cuda", generator=gen).to(_torch_dtype(a))
        y = torch.randn(k, n, device="cuda", generator=gen).to(_torch_dtype(a))
    return (x, y, bx.tf32(x), bx.tf32(y)) if a == dt.tfloat32 else (x, y, x, y)


def _square_operands(a: dt.DType, size: int, gen):
    return _operands(a, size, size, size, gen)


def _checker(name: str, x, y, gen):
    """check(result, what): the result's sampled rows against the float64 product (torch float64 on the GPU)."""
    import torch

    a = TYPES[name]
    result = array_gemm.RESULT_TYPES[a]
    m, k = x.shape
    rows = torch.randint(0, m, (min(m, 64),), generator=gen, device="cuda")
    ref = (x[rows].to(torch.float64) @ y.to(torch.float64)).cpu().numpy()
    acc = dt.find_combination(a, a, result, False).accumulator

    def check(got, what: str, slack: float = 0.0) -> None:
        host = got[rows].to(torch.float64).cpu().numpy() if got.dtype != torch.int32 else got[rows].cpu().numpy()
        assert_close(host, ref, tolerance(a, result, k, acc) + slack, what=what)

    return check


def _competitors(name: str, x, y) -> dict:
    """The competitor calls of a case: torch (cuBLAS) always, the Triton persistent TMA matmul where it runs."""
    calls = {"torch": _competitor(name, x, y)}
    if name in TRITON_CASES:
        try:
            call, why = triton_call(name, x, y, autotune=False)  # its fixed 128 x 256 x 64 configuration
        except Exception as exc:  # a shape Triton's TMA refuses is a result too
            call, why = None, f"{type(exc).__name__}: {exc}"
        calls["triton"] = call if call is not None else RuntimeError(why)
    return calls


def speed(name: str, shape: tuple[int, int, int], gen) -> dict:
    """bx.matmul against each competitor on one product, every result checked."""
    a = TYPES[name]
    m, n, k = shape
    x, y, bx_x, bx_y = _operands(a, m, n, k, gen)
    check = _checker(name, x, y, gen)
    check(bx.matmul(bx_x, bx_y), f"bx.matmul {name} {shape}")
    flops = 2.0 * m * n * k
    ms = time_ms(lambda: bx.matmul(bx_x, bx_y), 10)
    out = {"case": name, "shape": list(shape), "blasdx_ms": ms, "blasdx_tflops": flops / ms / 1e9}
    plan = next((p for p in reversed(list(array_gemm._CALLS.values())) if p.shape == (m, n)), None)
    if plan is not None:
        out["path"] = plan.kind
        out["plan"] = plan.describe()
    for who, call in _competitors(name, x, y).items():
        if isinstance(call, Exception):
            out[f"{who}_error"] = f"{type(call).__name__}: {str(call).splitlines()[0][:120]}"
            continue
        try:
            check(call(), f"{who} {name} {shape}", 5e-3)
        except (RuntimeError, TypeError, AssertionError, ValueError) as exc:
            out[f"{who}_error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:120]}"
            continue
        ms_c = time_ms(call, 10)
        out.update({f"{who}_ms": ms_c, f"{who}_tflops": flops / ms_c / 1e9, f"vs_{who}": ms_c / ms})
    return out


# Engine configurations tried by --engine-sweep: a base configuration and what changes in it; and splits.
ENGINE_SWEEP = [("wide", {}), ("wide", {"cluster": 2}), ("square", {}), ("narrow", {}), ("pingpong", {}),
                ("pingpong", {"stages": 5}), ("pingpong", {"cluster": 2}), ("pingpong", {"bm": 64, "bn": 256, "stages": 4}),
                ("pingpong", {"group_m": 16})]
ENGINE_SPLITS = (1, 2, 4)


def engine_sweep(name: str, shapes: list[tuple[int, int, int]], gen, split_counts=ENGINE_SPLITS) -> list[dict]:
    """Every engine configuration and split count on each shape (for blasdx/engine/hopper.py's rule)."""
    import dataclasses

    import torch

    from blasdx import arrays

    from blasdx.engine import hopper

    from blasdx.engine import wide as hopper_wide

    a = TYPES[name]
    result = array_gemm.RESULT_TYPES[a]
    device = array_gemm._device_info(torch.cuda.current_device())
    if hopper_wide.serves(a, result):  # f64 / f32: the wide path's variants
        configs = list(hopper_wide.sweep_configs(a).values())
        default_of = hopper_wide.choose_config
    else:
        configs = [dataclasses.replace(hopper.CONFIGS[base], bk=128 // a.size, **changes)
                   for base, changes in ENGINE_SWEEP]
        default_of = hopper.choose_config
    rows_out = []
    for m, n, k in shapes:
        x, y, _, _ = _operands(a, m, n, k, gen)
        check = _checker(name, x, y, gen)
        vx, vy = arrays.as_array(x, "x")._replace(dtype=a), arrays.as_array(y, "y")._replace(dtype=a)
        mx, my = array_gemm._matrix(vx, "x"), array_gemm._matrix(vy, "y")
        out = torch.empty((m, n), device="cuda", dtype=_torch_dtype(result))
        vout = arrays.as_array(out, "out")
        handle = arrays.resolve_stream(None, (out,))
        core = arrays.as_core_stream(None, handle)
        default = default_of(a, m, n, k, 1, device.multiprocessors)
        for config in configs:
            bk = 128 // a.size
            for splits in split_counts:
                if splits > 1 and math.ceil(k / bk) < 2 * splits:
                    continue
                entry = {"case": name, "shape": [m, n, k], "config": str(config), "splits": splits,
                         "default": (config, splits) == default}
                try:
                    engine, reason = array_gemm._engine_plan(vx, vy, mx, my, result, m, n, k, 1, device, vout,
                                                             config, splits)
                    if engine is None:
                        raise RuntimeError(reason)
                    run = lambda: engine.run(device_id=torch.cuda.current_device(), stream_core=core,  # noqa: E731
                                             stream=handle, a=vx, b=vy, c=None, d=vout, alpha=1.0, beta=0.0)
                    out.fill_(float("nan"))
                    run()
                    check(out, f"sweep {name} {config} x{splits}")
                    ms = time_ms(run, 10)
                    entry.update(ms=ms, tflops=2.0 * m * n * k / ms / 1e9,
                                 registers=engine.compiled.registers)
                except Exception as exc:  # a configuration that does not fit is a result too
                    entry["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:160]}"
                rows_out.append(entry)
                shown = f"{entry['tflops']:7.1f} TFLOP/s" if "tflops" in entry else entry["error"]
                mark = " (rule)" if entry["default"] else ""
                print(f"  engine {name} {m}x{n}x{k} {config} x{splits}: {shown}{mark}", flush=True)
    return rows_out


SWEEP = {  # (BM, BN, BK, threads, stages) tried per input type at --sweep-size
    "f16": [(128, 128, 32, 256, 2), (128, 128, 32, 256, 3), (128, 128, 32, 256, 4), (128, 128, 64, 256, 3),
            (128, 128, 32, 128, 3), (64, 128, 32, 128, 3), (128, 256, 32, 256, 3)],
    "bf16": [(128, 128, 32, 256, 3), (128, 128, 64, 256, 3), (128, 128, 32, 128, 3)],
    "tf32": [(128, 128, 16, 256, 3), (128, 128, 32, 256, 3), (64, 64, 16, 256, 3), (128, 64, 16, 256, 3)],
    "f32": [(64, 64, 16, 256, 3), (64, 64, 32, 256, 3), (128, 64, 16, 256, 3), (128, 128, 16, 256, 3)],
    "f64": [(64, 64, 16, 128, 3), (64, 64, 16, 256, 3), (128, 64, 16, 256, 3), (64, 64, 32, 128, 3)],
    "int8": [(128, 128, 32, 256, 3), (128, 128, 64, 256, 3), (128, 128, 32, 256, 4)],
}


def sweep(size: int, gen) -> list[dict]:
    """Multi-block tile shapes against each other on one square problem per type (for blasdx/calls/tiled.py)."""
    import torch

    from blasdx import arrays

    from blasdx.calls import tiled

    rows_out = []
    sm = cuda_sm()
    for name, variants in SWEEP.items():
        a = TYPES[name]
        result = array_gemm.RESULT_TYPES[a]
        x, y, bx_x, bx_y = _square_operands(a, size, gen)
        bx.matmul(bx_x, bx_y)
        base = next((p for p in reversed(list(array_gemm._CALLS.values()))
                     if p.kind == "tiled" and p.m == size and p.kernel.desc.a_value_type == a), None)
        if base is None:  # this GPU runs the type on the Hopper engine: --engine-sweep tunes that
            print(f"  sweep {name}: runs on the Hopper engine here, not the multi-block kernel")
            continue
        handle = arrays.resolve_stream(None, (x,))
        vx, vy = arrays.as_array(x, "x"), arrays.as_array(y, "y")
        vx = vx._replace(dtype=a)
        vy = vy._replace(dtype=a)
        pick = torch.randint(0, size, (32,), generator=gen, device="cuda")
        ref = reference_gemm(_host(x[pick], a), _host(y, a))
        row = dt.find_combination(a, a, result, False)
        for bm, bn, bk, threads, stages in variants:
            tile = tiled.TileShape(bm, bn, bk, threads, stages)
            entry = {"case": name, "size": size, "tile": [bm, bn, bk], "threads": threads, "stages": stages}
            try:
                desc = tiled.tile_descriptor(a, a, result, True, True, tile, sm)
                kernel = tiled.TiledKernel(desc, base.kernel.vec_a, base.kernel.vec_b, stages)
                compiled = kernel.compile()
                entry.update(registers=compiled.registers, spill=compiled.local_memory)
                plan = array_gemm.CallPlan()
                for slot in array_gemm.CallPlan.__slots__:
                    setattr(plan, slot, getattr(base, slot))
                plan.kernel = kernel
                out = torch.empty((size, size), device="cuda", dtype=_torch_dtype(result) if result != dt.int32
                                  else torch.int32)
                vout = arrays.as_array(out, "out")
                run = lambda: array_gemm._launch_tiled(plan, vx, vy, None, vout, 1, plan.beta, handle)  # noqa: E731
                run()
                torch.cuda.synchronize()
                assert_close(_host(out[pick], result), ref, tolerance(a, result, size, row.accumulator),
                             what=f"sweep {name} {tile}")
                ms = time_ms(run, 10)
                entry.update(ms=ms, tflops=2.0 * size**3 / ms / 1e9)
            except Exception as exc:  # a shape that does not compile or fit is a result too
                entry["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:160]}"
            rows_out.append(entry)
            shown = f"{entry['tflops']:.1f} TFLOP/s, {entry['registers']} regs" if "tflops" in entry else entry["error"]
            print(f"  sweep {name:5s} {bm}x{bn}x{bk} {threads}t {stages}s: {shown}", flush=True)
    return rows_out


#: The decode-like and deep shapes of the device-level goals, M x N x K.
SKINNY = [(16, 8192, 8192), (64, 4096, 14336), (128, 8192, 28672), (8192, 8192, 512)]


def _shape(text: str) -> tuple[int, int, int]:
    m, n, k = (int(v) for v in text.lower().split("x"))
    return m, n, k


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", nargs="*", type=int, default=SIZES, help="square sizes")
    parser.add_argument("--shapes", nargs="*", type=_shape, default=SKINNY, help="MxNxK products besides the squares")
    parser.add_argument("--types", nargs="*", default=list(TYPES), choices=list(TYPES))
    parser.add_argument("--json", default="benchmarks/results/matmul.json")
    parser.add_argument("--no-overhead", action="store_true", help="skip the host-cost table")
    parser.add_argument("--sweep", action="store_true", help="also try multi-block tile shapes (for tiled.py)")
    parser.add_argument("--sweep-size", type=int, default=4096)
    parser.add_argument("--engine-sweep", nargs="*", type=_shape, default=None, metavar="MxNxK",
                        help="try every Hopper engine configuration on these shapes (for hopper.py)")
    parser.add_argument("--engine-sweep-type", default="bf16", choices=["f16", "bf16", "tf32", "f32", "f64"])
    parser.add_argument("--engine-splits", nargs="*", type=int, default=list(ENGINE_SPLITS))
    parser.add_argument("--cublasdx-pipeline", nargs="*", type=int, default=None, metavar="SIZE",
                        help="also run cuBLASDx's pipelined GEMM (nvmath-python, carried wheels) at these squares")
    args = parser.parse_args()
    sm = cuda_sm()
    if sm is None:
        return 0
    import torch

    gen = torch.Generator(device="cuda").manual_seed(0)
    over = {} if args.no_overhead else overhead()
    swept = sweep(args.sweep_size, gen) if args.sweep else []
    engine_swept = (engine_sweep(args.engine_sweep_type, args.engine_sweep, gen, args.engine_splits)
                    if args.engine_sweep else [])
    results = []
    shapes = [(s, s, s) for s in args.sizes] + list(args.shapes)
    print("\n| case | M x N x K | path | blasdx TFLOP/s | torch TFLOP/s | triton TFLOP/s | vs torch | vs triton |")
    print("|---|---|---|---|---|---|---|---|")
    for name in args.types:
        if name == "e4m3" and sm < 89:
            continue
        for shape in shapes:
            r = speed(name, shape, gen)
            results.append(r)
            cells = []
            for who in ("torch", "triton"):
                cells.append(f"{r[who + '_tflops']:.1f}" if who + "_tflops" in r else r.get(who + "_error", "n/a")[:40])
            ratios = [f"{r['vs_' + who]:.2f}x" if "vs_" + who in r else "n/a" for who in ("torch", "triton")]
            print(f"| {name} | {'x'.join(map(str, shape))} | {r.get('path', '?')} | {r['blasdx_tflops']:.1f} | "
                  f"{cells[0]} | {cells[1]} | {ratios[0]} | {ratios[1]} |", flush=True)
    if args.cublasdx_pipeline:
        for r in results:
            if len(set(r["shape"])) == 1:
                r["size"] = r["shape"][0]
        dx_rows = run_cublasdx_pipeline(args.cublasdx_pipeline, [t for t in args.types if t in ("f16", "bf16")])
        merge_cublasdx(results, dx_rows)
        print("\n| case | size | blasdx TFLOP/s | cuBLASDx pipeline TFLOP/s | blasdx / cuBLASDx |")
        print("|---|---|---|---|---|")
        for r in results:
            if "cublasdx_tflops" in r or "cublasdx_error" in r:
                dx = f"{r['cublasdx_tflops']:.1f}" if "cublasdx_tflops" in r else r["cublasdx_error"][:60]
                ratio = f"{r['ratio_vs_cublasdx']:.2f}x" if "ratio_vs_cublasdx" in r else "n/a"
                print(f"| {r['case']} | {r['size']} | {r['blasdx_tflops']:.1f} | {dx} | {ratio} |")
    out = Path(args.json)
    out.parent.mkdir(parents=True, exist_ok=True)
    meta = {"date": date.today().isoformat(), "gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
            "blasdx": bx.__version__}
    out.write_text(json.dumps({"meta": meta, "overhead": over, "rows": results, "sweep": swept,
                               "engine_sweep": engine_swept}, indent=1))
    print(f"JSON: {out}")
    _plot(results, out.with_suffix(".png"))
    return 0


def _plot(rows: list[dict], path: Path) -> None:
    plt = pyplot()
    if plt is None or not rows:
        return
    labels = [f"{r['case']} {'x'.join(map(str, r['shape']))}" for r in rows]
    x = np.arange(len(rows))
    fig, ax = plt.subplots(figsize=(max(8, len(rows) * 0.45), 5))
    ax.bar(x - 0.27, [r["blasdx_tflops"] for r in rows], 0.27, label="bx.matmul")
    ax.bar(x, [r.get("torch_tflops", 0) for r in rows], 0.27, label="torch.matmul (cuBLAS)")
    ax.bar(x + 0.27, [r.get("triton_tflops", 0) for r in rows], 0.27, label="Triton persistent TMA")
    ax.set_xticks(x, labels, rotation=90, fontsize=7)
    ax.set_ylabel("TFLOP/s")
    ax.set_yscale("log")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    print(f"plot: {path}")


if __name__ == "__main__":
    sys.exit(main())
