"""Triangular solves: blasdx (bx.solve_triangular) against torch.linalg.solve_triangular.

    python benchmarks/trsm.py [--gbytes 1] [--types f32 f64] [--sizes 16 32 64 128] [--side left right]
                              [--json PATH]
    python benchmarks/trsm.py --large [--sizes 1024 2048 4096 8192] [--batch 1] [--types ...] [--side ...]
                              [--small-tiles]

Large systems (``--large``): A is s x s (blocked solver: block TRSM leaves and GEMM updates),
B s x s, ``--batch`` problems; each result's normwise backward error is computed on the GPU
in float64 for both libraries, and blasdx's must be within 2 n u or no worse than twice
torch's before it is timed. Rows: {type, side, size, batch, ratio} (JSON
benchmarks/results/trsm_large.json). The rest of this text is about batched small systems.

A is s x s lower triangular (well-conditioned: diagonally dominant), B is s x s (as many
right-hand sides), about ``--gbytes`` of A and B per case so that L2 does not help. Both
competitors run in this process on the same A and B, out of place into preallocated X
(``out=``); every result is checked on a sample of problems against an extended-precision
solution (backward error within 2 n u, forward error within 2 n u cond(A)) before it is
timed. Prints a table (GB/s counts A and B read and X written, GFLOP/s counts s^3 per
problem; the ratio is torch's time over blasdx's) and writes JSON.
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import date
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import blasdx as bx  # noqa: E402
from batched import cuda_sm, time_ms  # noqa: E402
from report import cell  # noqa: E402
from blasdx.base import dtypes as dt  # noqa: E402
from blasdx.reference import relative_error  # noqa: E402
from blasdx.reference.trsm import (  # noqa: E402
    backward_error,
    condition_number,
    forward_bound,
    residual_bound,
    solve_reference,
)

TYPES = {"f32": dt.float32, "f64": dt.float64}
SIZES = (16, 32, 64, 128)
SAMPLE = 32  # problems checked per case
LARGE_SIZES = (1024, 2048, 4096, 8192)
DEFAULT_JSON = "benchmarks/results/trsm.json"


def operands(real: dt.DType, size: int, batch: int, gen):
    """(A, B) on the GPU: A lower triangular and diagonally dominant (random values above), B normal."""
    import torch

    dtype = torch.float32 if real == dt.float32 else torch.float64
    a = torch.randn((batch, size, size), device="cuda", dtype=dtype, generator=gen) / size
    diagonal = 1 + torch.randn((batch, size), device="cuda", dtype=dtype, generator=gen).abs()
    a.diagonal(dim1=-2, dim2=-1).copy_(diagonal * torch.sign(torch.randn_like(diagonal)))
    b = torch.randn((batch, size, size), device="cuda", dtype=dtype, generator=gen)
    return a, b


def check(row: dict, who: str, x, a_host: np.ndarray, b_host: np.ndarray, pick, left: bool, real: dt.DType) -> bool:
    """Backward and forward error of a sample against the bounds; a failure is noted in the row and printed."""
    exact = np.tril(a_host)
    got = x[pick].double().cpu().numpy()
    size = exact.shape[-1]
    eta = backward_error(exact, got, b_host, left=left)
    err = relative_error(got, solve_reference(exact, b_host, left=left, lower=True))
    cond = condition_number(exact)
    ok = eta <= residual_bound(real, size) and err <= forward_bound(real, size, cond)
    row[f"{who}_check"] = "ok" if ok else f"wrong result: backward error {eta:.2e}, forward error {err:.2e}"
    row[f"{who}_errors"] = {"backward": eta, "forward": err, "cond": cond}
    if not ok:
        print(f"CHECK FAILED: {who} {row['case']} {row['size']}: {row[f'{who}_check']}", flush=True)
    return ok


def run_case(name: str, size: int, left: bool, args: argparse.Namespace, gen) -> dict:
    import torch

    real = TYPES[name]
    per_problem = 3 * size * size * real.size  # A and B read, X written
    batch = max(1, int(args.gbytes * 1e9 // (2 * size * size * real.size)))
    a, b = operands(real, size, batch, gen)
    x_blasdx, x_torch = torch.empty_like(b), torch.empty_like(b)
    pick = torch.randint(0, batch, (SAMPLE,), generator=gen, device="cuda")
    a_host, b_host = a[pick].double().cpu().numpy(), b[pick].double().cpu().numpy()
    row = {"case": name, "side": "left" if left else "right", "size": size, "batch": batch,
           "bytes": batch * per_problem, "flops": float(batch) * size**3}

    def blasdx_call():
        return bx.solve_triangular(a, b, lower=True, left=left, out=x_blasdx)

    def torch_call():
        return torch.linalg.solve_triangular(a, b, upper=False, left=left, out=x_torch)

    try:
        blasdx_call()
        torch.cuda.synchronize()
        from blasdx.calls.solve_triangular import solve_plan

        plan = solve_plan(a, b, lower=True, left=left, out=x_blasdx)
        desc = plan.kernel.desc
        row.update(descriptor=repr(desc), threads=desc.max_threads_per_block, batches_per_block=desc.batches_per_block,
                   chunks=plan.chunks[0], instruction=desc.instruction)
        if check(row, "blasdx", x_blasdx, a_host, b_host, pick, left, real):
            row["blasdx_ms"] = time_ms(blasdx_call)
    except bx.BlasdxError as exc:
        row["blasdx_check"] = f"error: {type(exc).__name__}: {str(exc).splitlines()[0]}"
        print(f"blasdx FAILED: {row['blasdx_check']}", flush=True)
    torch_call()
    torch.cuda.synchronize()
    if check(row, "torch", x_torch, a_host, b_host, pick, left, real):
        row["torch_ms"] = time_ms(torch_call)
    for who in ("blasdx", "torch"):
        if f"{who}_ms" in row:
            ms = row[f"{who}_ms"]
            row[f"{who}_gbs"] = row["bytes"] / ms / 1e6
            row[f"{who}_gflops"] = row["flops"] / ms / 1e6
    if "blasdx_ms" in row and "torch_ms" in row:
        row["ratio_vs_torch"] = row["torch_ms"] / row["blasdx_ms"]  # > 1: blasdx faster
    return row


def _backward_error(a, x, b, left: bool) -> float:
    """max over the batch of ||B - op(A, X)||_F / (||A||_F ||X||_F + ||B||_F), in float64 on the GPU."""
    import torch

    a64, x64, b64 = (t.to(torch.complex128 if t.is_complex() else torch.float64) for t in (a, x, b))
    a64 = torch.tril(a64)
    r = b64 - (a64 @ x64 if left else x64 @ a64)
    norm = lambda t: torch.linalg.matrix_norm(t)  # noqa: E731
    return float(torch.max(norm(r) / (norm(a64) * norm(x64) + norm(b64))))


def run_large(name: str, size: int, left: bool, batch: int, gen, mantissa_bits: int | None = None) -> dict:
    """One large solve (blocked in blasdx; ``mantissa_bits`` passed to it): both checked by their backward error,
    then timed per call."""
    import torch

    real = TYPES[name]
    a, b = operands(real, size, batch, gen)
    if batch == 1:
        a, b = a[0], b[0]
    x_blasdx, x_torch = torch.empty_like(b), torch.empty_like(b)
    row = {"type": name, "side": "left" if left else "right", "size": size, "batch": batch, "case": name,
           "flops": float(batch) * size**3, "mantissa_bits": mantissa_bits}

    def blasdx_call():
        return bx.solve_triangular(a, b, lower=True, left=left, out=x_blasdx, mantissa_bits=mantissa_bits)

    def torch_call():
        return torch.linalg.solve_triangular(a, b, upper=False, left=left, out=x_torch)

    torch_call()
    torch.cuda.synchronize()
    row["torch_backward_error"] = _backward_error(a, x_torch, b, left)
    row["torch_ms"] = time_ms(torch_call, repeats=5)
    try:
        blasdx_call()
        torch.cuda.synchronize()
        from blasdx.calls.solve_triangular import solve_plan

        row["plan"] = solve_plan(a, b, lower=True, left=left, out=x_blasdx, mantissa_bits=mantissa_bits).describe()
        eta = row["blasdx_backward_error"] = _backward_error(a, x_blasdx, b, left)
        if eta <= max(residual_bound(real, size), 2 * row["torch_backward_error"]):
            row["blasdx_check"] = "ok"
            row["blasdx_ms"] = time_ms(blasdx_call, repeats=5)
            row["ratio"] = row["torch_ms"] / row["blasdx_ms"]
        else:
            row["blasdx_check"] = f"wrong result: backward error {eta:.2e}"
            print(f"CHECK FAILED: {name} {size}: {row['blasdx_check']}", flush=True)
    except bx.BlasdxError as exc:
        row["blasdx_check"] = f"error: {type(exc).__name__}: {str(exc).splitlines()[0]}"
        print(f"blasdx FAILED: {row['blasdx_check']}", flush=True)
    return row


def _plan_again() -> None:
    """Empty the per-process plan memos of bx.matmul / bx.mma and bx.solve_triangular, so that the next call plans
    again under the engine's rules as they are now."""
    from blasdx.calls import matmul, solve_triangular

    for memo in (matmul._CALLS, matmul._BOUND, solve_triangular._CALLS, solve_triangular._BOUND):
        memo.clear()


def without_small_tiles(name: str, size: int, left: bool, batch: int, gen) -> dict:
    """:func:`run_large` with the wide path's 128 x 128 tiles only (blasdx.engine.wide.SMALL_TILES off), then the rule
    restored: what the small tiles change, measured in the same process."""
    from blasdx.engine import wide

    wide.SMALL_TILES = False
    _plan_again()
    try:
        return run_large(name, size, left, batch, gen)
    finally:
        wide.SMALL_TILES = True
        _plan_again()


def main_large(args: argparse.Namespace, sm: int) -> int:
    import torch

    gen = torch.Generator(device="cuda").manual_seed(0)
    rows = []
    for name in args.types:
        for side in args.side:
            for size in args.sizes:
                before = without_small_tiles(name, size, side == "left", args.batch, gen) if args.small_tiles else None
                row = run_large(name, size, side == "left", args.batch, gen, args.mantissa_bits.get(name))
                if before is not None and "blasdx_ms" in before:
                    row["blasdx_ms_128_tiles_only"] = before["blasdx_ms"]
                    print(f"  128 x 128 tiles only: {before['blasdx_ms']:.3f} ms", flush=True)
                torch.cuda.empty_cache()
                rows.append(row)
                ratio = f"{row['ratio']:.2f}x" if "ratio" in row else "n/a"
                print(f"{name} {side} {size} batch {args.batch}: blasdx {cell(row, 'blasdx_ms', '.3f', 'n/a')} ms, "
                      f"torch {cell(row, 'torch_ms', '.3f', 'n/a')} ms, {ratio}; backward error blasdx "
                      f"{cell(row, 'blasdx_backward_error', '.1e', 'n/a')} torch {row['torch_backward_error']:.1e}; "
                      f"{row.get('plan', '')}", flush=True)
    print(f"\ndevice {torch.cuda.get_device_name()} (sm_{sm}), torch {torch.__version__}")
    out = Path(args.json if args.json != DEFAULT_JSON else "benchmarks/results/trsm_large.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    meta = {"date": date.today().isoformat(), "gpu": torch.cuda.get_device_name(), "sm": sm, "torch": torch.__version__,
            "operation": "X = A^-1 B (left) or B A^-1 (right), A lower triangular s x s, B s x s, out of place",
            "ratio": "torch time / blasdx time per call (> 1: blasdx faster)"}
    out.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    print(f"JSON: {out}")
    return 1 if any(r.get("blasdx_check") != "ok" for r in rows) else 0


def table(rows: list[dict]) -> str:
    head = ("| type | side | size | batch | threads x batches, chunks | instruction | blasdx ms | GB/s | GFLOP/s "
            "| torch ms | GB/s | GFLOP/s | torch / blasdx |")
    lines = [head, "|" + "---|" * 13]
    for r in rows:
        blasdx_default = "wrong" if r.get("blasdx_check", "ok") != "ok" else "n/a"
        torch_default = "wrong" if r.get("torch_check", "ok") != "ok" else "n/a"
        shape = f"{r['threads']} x {r['batches_per_block']}, {r['chunks']}" if "threads" in r else "n/a"
        cells = [r["case"], r["side"], str(r["size"]), str(r["batch"]), shape, r.get("instruction", "n/a"),
                 cell(r, "blasdx_ms", ".3f", blasdx_default), cell(r, "blasdx_gbs", ".0f", "-"),
                 cell(r, "blasdx_gflops", ".0f", "-"), cell(r, "torch_ms", ".3f", torch_default),
                 cell(r, "torch_gbs", ".0f", "-"), cell(r, "torch_gflops", ".0f", "-"),
                 cell(r, "ratio_vs_torch", ".2f", "n/a")]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gbytes", type=float, default=1.0, help="bytes of A and B per case (default 1 GB)")
    parser.add_argument("--types", nargs="*", default=list(TYPES), choices=list(TYPES))
    parser.add_argument("--sizes", nargs="*", type=int, default=list(SIZES))
    parser.add_argument("--side", nargs="*", default=["left"], choices=["left", "right"])
    parser.add_argument("--json", default=DEFAULT_JSON)
    parser.add_argument("--large", action="store_true", help="large systems (blocked solver), sizes 1024-8192")
    parser.add_argument("--batch", type=int, default=1, help="problems per large case")
    parser.add_argument("--mantissa-bits", nargs="*", default=[], metavar="TYPE=BITS",
                        help="large solves of TYPE with mantissa_bits=BITS (e.g. f32=23: updates as 3xtf32)")
    parser.add_argument("--small-tiles", action="store_true",
                        help="large cases also with the wide path's 128 x 128 tiles only, in the same process")
    args = parser.parse_args(argv)
    try:
        args.mantissa_bits = {t: int(v) for t, v in (item.split("=") for item in args.mantissa_bits)}
    except ValueError:
        parser.error("--mantissa-bits takes TYPE=BITS pairs, e.g. f32=23")
    if args.large and args.sizes == list(SIZES):
        args.sizes = list(LARGE_SIZES)
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    sm = cuda_sm()
    if sm is None:
        return 0
    if args.large:
        return main_large(args, sm)
    import torch

    gen = torch.Generator(device="cuda").manual_seed(0)
    rows = []
    for name in args.types:
        for side in args.side:
            for size in args.sizes:
                row = run_case(name, size, side == "left", args, gen)
                torch.cuda.empty_cache()
                rows.append(row)
                ratio = f"{row['ratio_vs_torch']:.2f}x" if "ratio_vs_torch" in row else "n/a"
                print(f"{name} {side} {size}: blasdx {cell(row, 'blasdx_ms', '.3f', 'n/a')} ms, torch "
                      f"{cell(row, 'torch_ms', '.3f', 'n/a')} ms, {ratio}", flush=True)
    print(f"\ndevice {torch.cuda.get_device_name()} (sm_{sm}), torch {torch.__version__}")
    print(table(rows))
    out = Path(args.json)
    out.parent.mkdir(parents=True, exist_ok=True)
    meta = {"date": date.today().isoformat(), "gpu": torch.cuda.get_device_name(), "sm": sm, "torch": torch.__version__,
            "blasdx": bx.__version__, "gbytes": args.gbytes, "operation": "X = A^-1 B, A lower triangular s x s, "
            "B s x s, out of place", "ratio": "torch time / blasdx time (> 1: blasdx faster)",
            "cusolverdx": "not measured: nvmath-python 1.0 exposes it (nvmath.device.TriangularSolver) through "
            "numba-cuda kernels, which this script does not build"}
    out.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1))
    print(f"JSON: {out}")
    wrong = [f"{r['case']} {r['side']} {r['size']} {who}" for r in rows for who in ("blasdx", "torch")
             if r.get(f"{who}_check", "ok") != "ok"]
    if wrong:
        print(f"wrong results (not timed): {', '.join(wrong)}")
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
