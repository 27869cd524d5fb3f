"""bx.matmul / bx.mma: host cost of a repeated call, and the multi-block path against torch.matmul.

    python benchmarks/matmul.py [--sizes 256 1024 4096] [--types f16 bf16 ...] [--json PATH]

1. Overhead: many small problems (1000 x 32^3, f16 -> f32), so the host decides the time.
   Compares a held descriptor's execute(), bx.mma(..., out=acc) (in place: the same work
   plus the array-level look-up), bx.matmul (plus allocating the result) and torch.matmul.
2. Speed: square products through the multi-block kernel against torch.matmul (cuBLAS) on
   the same data, each result checked on 64 sampled rows against the float64 reference.
Prints tables, writes JSON and, with matplotlib, a PNG beside it.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from datetime import date
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import blasdx as bx  # noqa: E402
from batched import cuda_sm, pyplot, time_ms  # noqa: E402  (shared by the benchmarks)
from blasdx import array_gemm  # noqa: E402
from blasdx import dtypes as dt  # noqa: E402
from blasdx.reference import assert_close, reference_gemm, tolerance  # noqa: E402

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


def _square_operands(a: dt.DType, size: int, gen):
    """Random size x size torch operands of type ``a`` and what bx.matmul takes (tf32-marked for tf32)."""
    import torch

    if a.integral:
        x = torch.randint(-8, 8, (size, size), device="cuda", dtype=torch.int8, generator=gen)
        y = torch.randint(-8, 8, (size, size), device="cuda", dtype=torch.int8, generator=gen)
    else:
        x = torch.randn(size, size, device="cuda", generator=gen).to(_torch_dtype(a))
        y = torch.randn(size, size, device="cuda", generator=gen).to(_torch_dtype(a))
    return (x, y, bx.tf32(x), bx.tf32(y)) if a == dt.tfloat32 else (x, y, x, y)


def speed(name: str, size: int, gen) -> dict:
    import torch

    a = TYPES[name]
    result = array_gemm.RESULT_TYPES[a]
    x, y, bx_x, bx_y = _square_operands(a, size, gen)
    got = bx.matmul(bx_x, bx_y)
    torch.cuda.synchronize()
    rows = torch.randint(0, size, (64,), generator=gen, device="cuda")
    ref = reference_gemm(_host(x[rows], a), _host(y, a))
    row = dt.find_combination(a, a, result, False)
    assert_close(_host(got[rows], result), ref, tolerance(a, result, size, row.accumulator),
                 what=f"bx.matmul {name} {size}")
    flops = 2.0 * size**3
    ms = time_ms(lambda: bx.matmul(bx_x, bx_y), 10)
    out = {"case": name, "size": size, "blasdx_ms": ms, "blasdx_tflops": flops / ms / 1e9}
    plan = next(iter(p for k, p in array_gemm._CALLS.items() if p.m == size and p.dtype == result), None)
    if plan is not None:
        out["path"] = plan.kind
    try:
        call = _competitor(name, x, y)
        check = call()
    except (RuntimeError, TypeError) as exc:
        out["torch_error"] = str(exc).splitlines()[0]
        return out
    got_t = _host(check[rows].to(torch.float64) if check.dtype != torch.int32 else check[rows], result)
    assert_close(got_t, ref, tolerance(a, result, size, row.accumulator) + 5e-3, what=f"torch {name} {size}")
    ms_t = time_ms(call, 10)
    out.update(torch_ms=ms_t, torch_tflops=flops / ms_t / 1e9, ratio=ms_t / ms)
    return out


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
    """Multi-block tile shapes against each other on one square problem per type (for blasdx/tiled.py)."""
    import torch

    from blasdx import arrays, tiled

    rows_out = []
    sm = cuda_sm()
    for name, variants in SWEEP.items():
        a = TYPES[name]
        result = array_gemm.RESULT_TYPES[a]
        x, y, bx_x, bx_y = _square_operands(a, size, gen)
        bx.matmul(bx_x, bx_y)
        base = next(p for p in reversed(list(array_gemm._CALLS.values()))
                    if p.kind == "tiled" and p.m == size and p.kernel.desc.a_value_type == a)
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
                run = lambda: array_gemm._launch_tiled(plan, vx, vy, None, vout, handle)  # noqa: E731
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", nargs="*", type=int, default=SIZES)
    parser.add_argument("--types", nargs="*", default=list(TYPES), choices=list(TYPES))
    parser.add_argument("--json", default="benchmarks/results/matmul.json")
    parser.add_argument("--sweep", action="store_true", help="also try multi-block tile shapes (for tiled.py)")
    parser.add_argument("--sweep-size", type=int, default=4096)
    args = parser.parse_args()
    sm = cuda_sm()
    if sm is None:
        return 0
    import torch

    gen = torch.Generator(device="cuda").manual_seed(0)
    over = overhead()
    swept = sweep(args.sweep_size, gen) if args.sweep else []
    results = []
    print("\n| case | size | path | blasdx TFLOP/s | torch TFLOP/s | blasdx / torch |")
    print("|---|---|---|---|---|---|")
    for name in args.types:
        if name == "e4m3" and sm < 89:
            continue
        for size in args.sizes:
            r = speed(name, size, gen)
            results.append(r)
            tor = (f"{r['torch_tflops']:.1f}", f"{r['ratio']:.2f}x") if "torch_tflops" in r else (
                r.get("torch_error", "n/a"), "n/a")
            print(f"| {name} | {size} | {r.get('path', '?')} | {r['blasdx_tflops']:.1f} | {tor[0]} | {tor[1]} |",
                  flush=True)
    out = Path(args.json)
    out.parent.mkdir(parents=True, exist_ok=True)
    meta = {"date": date.today().isoformat(), "gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
            "blasdx": bx.__version__}
    out.write_text(json.dumps({"meta": meta, "overhead": over, "rows": results, "sweep": swept}, indent=1))
    print(f"JSON: {out}")
    _plot(results, out.with_suffix(".png"))
    return 0


def _plot(rows: list[dict], path: Path) -> None:
    plt = pyplot()
    if plt is None:
        return
    labels = [f"{r['case']} {r['size']}" for r in rows]
    x = np.arange(len(rows))
    fig, ax = plt.subplots(figsize=(max(8, len(rows) * 0.4), 5))
    ax.bar(x - 0.2, [r["blasdx_tflops"] for r in rows], 0.4, label="bx.matmul (multi-block)")
    ax.bar(x + 0.2, [r.get("torch_tflops", 0) for r in rows], 0.4, label="torch.matmul (cuBLAS)")
    ax.set_xticks(x, labels, rotation=90, fontsize=7)
    ax.set_ylabel("TFLOP/s")
    ax.set_yscale("log")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    print(f"plot: {path}")


if __name__ == "__main__":
    sys.exit(main())
