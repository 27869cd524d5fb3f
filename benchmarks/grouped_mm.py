"""Grouped GEMM for mixture-of-experts layers: bx.grouped_mm against torch's grouped calls.

    python benchmarks/grouped_mm.py [--quick | --medium] [--tokens 512 4096 ...] [--fp8-tokens ...] [--no-fp8]
                                    [--sweep | --sweep-only | --sweep-fp8] [--json PATH]

Cases: the expert GEMMs of DeepSeek-V3 (256 experts, 8 per token; K=7168 N=4096 and K=2048
N=7168), Qwen3-30B-A3B (128 experts, 8 per token; K=2048 N=1536 and K=768 N=2048) and
Mixtral 8x7B (8 experts, 2 per token; K=4096 N=14336 and K=14336 N=4096), for a number of
tokens, routed uniformly or skewed (Zipf weights over the experts, shuffled); the rows of the
grouped product are tokens x experts per token, in the contiguous layout (x [rows, K], w
stored [G, N, K], offs the int32 end row of each group).

* bf16: bx.grouped_mm against torch's grouped_mm (torch.nn.functional.grouped_mm, or
  torch._grouped_mm) and a loop of torch.matmul, one per non-empty expert;
* fp8 e4m3 with 1 x 128 / 128 x 128 block scales: bx.grouped_mm, contiguous and masked
  (x [G, max_m, K] with per-group counts, same tokens), against torch's scaled grouped call
  with row-wise scales where this torch has one (torch._scaled_grouped_mm); the blasdx figure
  alone where it has none.

Every result is checked on sampled rows against the float64 product before it is timed.
Times are GPU time: CALLS calls captured in a CUDA graph, replayed, the median over repeats
of one replay between CUDA events, divided by CALLS. TFLOP/s count 2 x rows x K x N. Prints a
table with ratios (torch time / blasdx time; above 1 = blasdx faster) and writes JSON rows
{model, dtype, layout, tokens, routing, blasdx_tflops, torch_tflops, ratio, ...}.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from datetime import date
from pathlib import Path

import numpy as np

import blasdx as bx

CALLS = 10
MODELS = {  # name: (experts, experts per token, [(K, N), ...])
    "DeepSeek-V3": (256, 8, [(7168, 4096), (2048, 7168)]),
    "Qwen3-30B-A3B": (128, 8, [(2048, 1536), (768, 2048)]),
    "Mixtral-8x7B": (8, 2, [(4096, 14336), (14336, 4096)]),
}
QUICK = [("DeepSeek-V3", 0, 4096, "uniform"), ("Qwen3-30B-A3B", 0, 4096, "zipf"), ("Mixtral-8x7B", 1, 4096, "uniform")]
#: A mid-sized list: every model's two shapes at 4096 tokens uniform, 16384 skewed, 4096 skewed.
MEDIUM = [(m, s, t, r) for t, r in ((4096, "uniform"), (16384, "zipf"), (4096, "zipf"))
          for m in ("DeepSeek-V3", "Qwen3-30B-A3B", "Mixtral-8x7B") for s in (0, 1)]


def group_sizes(experts: int, rows: int, routing: str, seed: int = 0) -> np.ndarray:
    """Rows per expert summing to ``rows``: uniform (as even as can be) or Zipf-skewed (exponent 1.2, shuffled)."""
    rng = np.random.default_rng(seed)
    if routing == "uniform":
        weights = np.ones(experts)
    else:
        weights = 1.0 / np.arange(1, experts + 1) ** 1.2
        rng.shuffle(weights)
    counts = np.floor(weights / weights.sum() * rows).astype(np.int64)
    counts[np.argmax(weights)] += rows - counts.sum()
    return counts


def graph_ms(fn, budget_s: float = 0.3) -> float:
    """GPU milliseconds per call: CALLS calls in a CUDA graph, the median replay time / CALLS over 3-10 replays
    (as many as fit ``budget_s``)."""
    import torch

    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        fn()  # plans, compiles and warms up outside the capture
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=stream):
            for _ in range(CALLS):
                fn()
    times = []
    for i in range(11):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        if i > 0:  # the first replay warms up
            times.append(start.elapsed_time(end) / CALLS)
        if len(times) >= 3 and sum(times) * CALLS > budget_s * 1e3:
            break
    return float(np.median(times))


def torch_grouped():
    """torch's bf16 grouped call (F.grouped_mm, else torch._grouped_mm), or None."""
    import torch

    fn = getattr(torch.nn.functional, "grouped_mm", None)
    if fn is not None:
        return lambda a, b, offs: fn(a, b, offs=offs)
    fn = getattr(torch, "_grouped_mm", None)
    return None if fn is None else (lambda a, b, offs: fn(a, b, offs=offs))


def check(got, x, w, counts, what: str, sx=None, sw=None, samples: int = 16) -> float:
    """Relative error of sampled rows of ``got`` against float64; raises beyond 2e-2."""
    import torch

    bounds = np.concatenate([[0], np.cumsum(counts)])
    rng = np.random.default_rng(1)
    rows = rng.integers(0, int(bounds[-1]), size=min(samples, int(bounds[-1])))
    groups = np.searchsorted(bounds, rows, side="right") - 1
    k = x.shape[1]
    num = den = 0.0
    for row, g in zip(rows.tolist(), groups.tolist()):
        xr = x[row].double()
        wg = w[g].double()
        if sx is not None:
            xr = xr * sx[row].double().repeat_interleave(128)[:k]
        if sw is not None:
            wg = wg * sw[g].double().repeat_interleave(128, 0)[:k].repeat_interleave(128, 1)[:, :wg.shape[1]]
        ref = xr @ wg
        num += float((got[row].double() - ref).norm()) ** 2
        den += float(ref.norm()) ** 2
    err = math.sqrt(num / max(den, 1e-300))
    if not err <= 2e-2:
        raise AssertionError(f"{what}: relative error {err:.3e}")
    del torch
    return err


def bf16_case(model: str, shape: int, tokens: int, routing: str) -> tuple:
    """(experts, k, n, rows, counts, offs, x, w, out) of one bf16 contiguous case: fresh random x and w."""
    import torch

    experts, top, shapes = MODELS[model]
    k, n = shapes[shape]
    rows = tokens * top
    counts = group_sizes(experts, rows, routing)
    offs = torch.tensor(np.cumsum(counts), dtype=torch.int32, device="cuda")
    x = torch.randn((rows, k), device="cuda", dtype=torch.bfloat16)
    w = torch.randn((experts, n, k), device="cuda", dtype=torch.bfloat16).transpose(1, 2)  # stored [G, N, K]
    out = torch.empty((rows, n), device="cuda", dtype=torch.bfloat16)
    return experts, k, n, rows, counts, offs, x, w, out


def bench_bf16(model: str, shape: int, tokens: int, routing: str) -> dict:
    import torch

    experts, k, n, rows, counts, offs, x, w, out = bf16_case(model, shape, tokens, routing)
    flops = 2.0 * rows * k * n
    row = {"model": model, "k": k, "n": n, "dtype": "bf16", "layout": "contiguous", "tokens": tokens,
           "routing": routing, "groups": experts, "rows": rows}
    check(bx.grouped_mm(x, w, offs, out=out), x, w, counts, "blasdx")
    ms = graph_ms(lambda: bx.grouped_mm(x, w, offs, out=out))
    row["blasdx_tflops"] = flops / ms / 1e9
    grouped = torch_grouped()
    if grouped is not None:
        try:
            check(grouped(x, w, offs), x, w, counts, "torch grouped_mm")
            row["torch_tflops"] = flops / graph_ms(lambda: grouped(x, w, offs)) / 1e9
        except Exception as exc:  # noqa: BLE001 - recorded, not fatal
            row["torch_error"] = f"{type(exc).__name__}: {exc}"[:200]
    bounds = np.concatenate([[0], np.cumsum(counts)]).tolist()
    pieces = [(bounds[g], bounds[g + 1], g) for g in range(experts) if bounds[g + 1] > bounds[g]]

    def loop():
        for lo, hi, g in pieces:
            torch.matmul(x[lo:hi], w[g], out=out[lo:hi])

    row["loop_tflops"] = flops / graph_ms(loop) / 1e9
    _ratios(row)
    return row


def fp8_case(model: str, shape: int, tokens: int, routing: str) -> tuple:
    """(experts, k, n, rows, counts, offs, x, w, sx, sw, out) of one fp8 case: e4m3 x [rows, K] and w stored
    [G, N, K], 1 x 128 / 128 x 128 block scales, a bf16 result."""
    import torch

    experts, top, shapes = MODELS[model]
    k, n = shapes[shape]
    rows = tokens * top
    counts = group_sizes(experts, rows, routing)
    offs = torch.tensor(np.cumsum(counts), dtype=torch.int32, device="cuda")
    kb, nb = math.ceil(k / 128), math.ceil(n / 128)
    x = torch.randn((rows, k), device="cuda").to(torch.float8_e4m3fn)
    w = torch.randn((experts, n, k), device="cuda", dtype=torch.bfloat16).to(torch.float8_e4m3fn).transpose(1, 2)
    sx = torch.rand((rows, kb), device="cuda") + 0.5
    sw = torch.rand((experts, kb, nb), device="cuda") + 0.5
    out = torch.empty((rows, n), device="cuda", dtype=torch.bfloat16)
    return experts, k, n, rows, counts, offs, x, w, sx, sw, out


def bench_fp8(model: str, shape: int, tokens: int, routing: str) -> list[dict]:
    import torch

    experts, k, n, rows, counts, offs, x, w, sx, sw, out = fp8_case(model, shape, tokens, routing)
    kb = math.ceil(k / 128)
    flops = 2.0 * rows * k * n
    base = {"model": model, "k": k, "n": n, "dtype": "fp8 e4m3 blocks", "tokens": tokens, "routing": routing,
            "groups": experts, "rows": rows}
    contiguous = dict(base, layout="contiguous")
    check(bx.grouped_mm(x, w, offs, scale_x=sx, scale_w=sw, out=out), x, w, counts, "blasdx fp8", sx, sw)
    contiguous["blasdx_tflops"] = flops / graph_ms(lambda: bx.grouped_mm(x, w, offs, scale_x=sx, scale_w=sw,
                                                                          out=out)) / 1e9
    scaled = getattr(torch, "_scaled_grouped_mm", None)
    if scaled is not None:
        rx = torch.rand((rows,), device="cuda") + 0.5
        rw = torch.rand((experts, n), device="cuda") + 0.5
        try:
            scaled(x, w, rx, rw, offs=offs, out_dtype=torch.bfloat16)
            contiguous["torch_tflops"] = flops / graph_ms(
                lambda: scaled(x, w, rx, rw, offs=offs, out_dtype=torch.bfloat16)) / 1e9
            contiguous["torch_scaling"] = "row-wise"
        except Exception as exc:  # noqa: BLE001
            contiguous["torch_error"] = f"{type(exc).__name__}: {exc}"[:200]
    _ratios(contiguous)
    # masked: the same tokens in [G, max_m, K], rows per group on the device
    max_m = int(counts.max())
    masked = dict(base, layout="masked", max_m=max_m)
    padded = experts * max_m * (4 * k + 4 * kb + 2 * n)  # the f32 staging of x, its scales, the result
    if padded > MASKED_MAX_BYTES:  # skewed routing pads every group to the largest one
        masked["skipped"] = f"the padded layout needs {padded / 1e9:.0f} GB"
        return [contiguous, masked]
    xm = torch.zeros((experts, max_m, k), device="cuda").to(torch.float8_e4m3fn)
    sxm = torch.ones((experts, max_m, kb), device="cuda")
    bounds = np.concatenate([[0], np.cumsum(counts)]).tolist()
    for g in range(experts):
        xm[g, :counts[g]] = x[bounds[g]:bounds[g + 1]]
        sxm[g, :counts[g]] = sx[bounds[g]:bounds[g + 1]]
    cnt = torch.tensor(counts, dtype=torch.int32, device="cuda")
    outm = torch.empty((experts, max_m, n), device="cuda", dtype=torch.bfloat16)
    masked["blasdx_tflops"] = flops / graph_ms(lambda: bx.grouped_mm(xm, w, counts=cnt, scale_x=sxm, scale_w=sw,
                                                                      out=outm)) / 1e9
    masked["of_contiguous"] = masked["blasdx_tflops"] / contiguous["blasdx_tflops"]
    return [contiguous, masked]


#: The masked layout is skipped where its padded operands would take more than this (Zipf routing over 256
#: experts pads every group to the most loaded one's rows).
MASKED_MAX_BYTES = 16e9

SWEEP = ("pingpong", "wide", "wide clusters")  # each with direct stores and with whole tiles by TMA


def sweep_bf16(model: str, shape: int, tokens: int, routing: str) -> dict:
    """GPU time of every tile configuration on one bf16 contiguous case (for engine/grouped.py's rule)."""
    import torch

    from blasdx.arrays import as_array
    from blasdx.calls import grouped_mm as grouped
    from blasdx.engine import grouped as engine
    from blasdx.engine import hopper

    experts, k, n, rows, counts, offs, x, w, out = bf16_case(model, shape, tokens, routing)
    vx, vw, voffs = as_array(x, "x"), as_array(w, "w"), as_array(offs, "offs")
    form = grouped.form_of(vx, vw, voffs, None)
    base = grouped._plan(vx, vw, form, vx.dtype, grouped.Scale("none"), grouped.Scale("none"), x.device.index).plan
    flops = 2.0 * rows * k * n
    row = {"model": model, "k": k, "n": n, "tokens": tokens, "routing": routing, "chosen": str(base.config)}
    for name, staged in [(name, staged) for name in SWEEP for staged in (False, True)]:
        config = hopper.replace(hopper.CONFIGS[name], bk=64)
        if staged and name in ("pingpong", "wide", "square", "wide clusters"):
            config = hopper.replace(config, stages=config.stages - 1)  # the staging buffers and the table fit
        plan = engine.GroupedPlan(vx.dtype, vw.dtype, vx.dtype, "contiguous", experts, rows, n, k, base.route_a,
                                  base.route_b, (k, 0), (k, n * k), x.data_ptr(), w.data_ptr(),
                                  base.multiprocessors, config=config, d_layout=(n, 1, 0, out.data_ptr()),
                                  store_by_tma=staged)
        name = f"{name} tma" if staged else name

        def call(plan=plan):
            plan.run(x.device.index, torch.cuda.current_stream().cuda_stream, x.data_ptr(), w.data_ptr(),
                     offs.data_ptr(), out.data_ptr(), (n, 1, 0))

        call()
        check(out, x, w, counts, f"sweep {name}")
        row[name] = flops / graph_ms(call) / 1e9
    print(" ".join(f"{key}={value:.0f}" if isinstance(value, float) else f"{key}={value}" for key, value in row.items()))
    return row


#: fp8 tile configurations: the rule's wide tiles, and 64 x 128 consumer tiles with promotions overlapped
SWEEP_FP8 = (("wide", {}), ("square", {}), ("square", {"promotion_overlap": True}),
             ("medium", {"promotion_overlap": True}))


def sweep_fp8(model: str, shape: int, tokens: int, routing: str) -> dict:
    """GPU time of the fp8 block-scaled tile configurations on one contiguous case, each with direct stores and
    with whole tiles by TMA (TFLOP/s; checked first)."""
    import torch

    from blasdx.arrays import as_array
    from blasdx.calls import grouped_mm as grouped
    from blasdx.engine import grouped as engine
    from blasdx.engine import hopper

    experts, k, n, rows, counts, offs, x, w, sx, sw, out = fp8_case(model, shape, tokens, routing)
    vx, vw, voffs = as_array(x, "x"), as_array(w, "w"), as_array(offs, "offs")
    base = grouped._plan(vx, vw, grouped.form_of(vx, vw, voffs, None), bx.bfloat16, grouped.Scale("none"),
                         grouped.Scale("none"), x.device.index).plan
    flops = 2.0 * rows * k * n
    row = {"model": model, "k": k, "n": n, "tokens": tokens, "routing": routing, "dtype": "fp8 e4m3 blocks"}
    scales = ((sx.data_ptr(), sx.stride(0), sx.stride(1), 0), (sw.data_ptr(), sw.stride(1), sw.stride(2), sw.stride(0)))
    for (name, changes), staged in [(entry, staged) for entry in SWEEP_FP8 for staged in (False, True)]:
        config = hopper.replace(hopper.CONFIGS[name], bk=128, promotion=128, **changes)
        if staged:
            config = hopper.replace(config, stages=config.stages - 1)  # the staging buffers and the table fit
        label = f"{name}{' overlapped' if changes else ''}{' tma' if staged else ''}"
        try:
            plan = engine.GroupedPlan(vx.dtype, vw.dtype, bx.bfloat16, "contiguous", experts, rows, n, k, base.route_a,
                                      base.route_b, (k, 0), (k, n * k), x.data_ptr(), w.data_ptr(),
                                      base.multiprocessors, "block", "block", config=config,
                                      d_layout=(n, 1, 0, out.data_ptr()), store_by_tma=staged)

            def call(plan=plan):
                plan.run(x.device.index, torch.cuda.current_stream().cuda_stream, x.data_ptr(), w.data_ptr(),
                         offs.data_ptr(), out.data_ptr(), (n, 1, 0), *scales)

            call()
            check(out, x, w, counts, f"sweep {label}", sx, sw)
            row[label] = flops / graph_ms(call) / 1e9
        except Exception as exc:  # noqa: BLE001  (a configuration that does not fit is a result too)
            row[label] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:120]}"
    print(" ".join(f"{key}={value:.0f}" if isinstance(value, float) else f"{key}={value}" for key, value in row.items()))
    return row


def _ratios(row: dict) -> None:
    if "torch_tflops" in row:
        row["ratio"] = row["blasdx_tflops"] / row["torch_tflops"]
    if "loop_tflops" in row:
        row["loop_ratio"] = row["blasdx_tflops"] / row["loop_tflops"]


def _print(rows: list[dict]) -> None:
    print(f"{'model':14} {'K x N':>12} {'dtype':16} {'layout':10} {'tokens':>6} {'routing':8} {'blasdx':>7} "
          f"{'torch':>7} {'ratio':>6} {'loop':>7} {'ratio':>6}")
    for r in rows:
        def f(key, fmt="7.0f", r=r):
            return format(r[key], fmt) if key in r else " " * int(fmt.split(".")[0])

        print(f"{r['model']:14} {r['k']:>5} x {r['n']:<5} {r['dtype']:16} {r['layout']:10} {r['tokens']:>6} "
              f"{r['routing']:8} {f('blasdx_tflops')} {f('torch_tflops')} {f('ratio', '6.2f')} {f('loop_tflops')} "
              f"{f('loop_ratio', '6.2f')}" + (f"  torch: {r['torch_error']}" if "torch_error" in r else "")
              + (f"  skipped: {r['skipped']}" if "skipped" in r else ""))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="a short case list (one shape per model, 4096 tokens)")
    parser.add_argument("--medium", action="store_true", help="both shapes per model, 4096 and 16384 tokens")
    parser.add_argument("--tokens", type=int, nargs="*", default=[512, 4096, 16384, 65536])
    parser.add_argument("--fp8-tokens", type=int, nargs="*", default=None,
                        help="token counts of the fp8 cases (default: those of the bf16 cases)")
    parser.add_argument("--no-bf16", action="store_true")
    parser.add_argument("--no-fp8", action="store_true")
    parser.add_argument("--sweep", action="store_true", help="also time every tile configuration (bf16)")
    parser.add_argument("--sweep-only", action="store_true", help="only the tile configurations (bf16)")
    parser.add_argument("--sweep-fp8", action="store_true",
                        help="only the fp8 block-scaled tile configurations (DeepSeek-V3 cases)")
    parser.add_argument("--json", default=str(Path(__file__).parent / "results" / "grouped_mm.json"))
    args = parser.parse_args()
    import torch

    print(f"torch {torch.__version__}: F.grouped_mm {hasattr(torch.nn.functional, 'grouped_mm')}, "
          f"torch._grouped_mm {hasattr(torch, '_grouped_mm')}, torch._scaled_grouped_mm "
          f"{hasattr(torch, '_scaled_grouped_mm')}, F.scaled_grouped_mm "
          f"{hasattr(torch.nn.functional, 'scaled_grouped_mm')}; {torch.cuda.get_device_name()}")
    if args.quick:
        cases = QUICK
    elif args.medium:
        cases = MEDIUM
    else:
        cases = [(m, s, t, r) for m in MODELS for s in range(2) for t in args.tokens for r in ("uniform", "zipf")]
    rows: list[dict] = []
    sweeps: list[dict] = []
    path = Path(args.json)
    path.parent.mkdir(parents=True, exist_ok=True)

    def save() -> None:  # after every case: a run cut short keeps what it measured
        path.write_text(json.dumps({"date": str(date.today()), "device": torch.cuda.get_device_name(),
                                    "torch": torch.__version__, "rows": rows, "sweep": sweeps}, indent=1))

    if args.sweep_fp8:
        for case in [c for c in cases if c[0] == "DeepSeek-V3"]:
            sweeps.append(sweep_fp8(*case))
            save()
            torch.cuda.empty_cache()
        return
    if args.sweep or args.sweep_only:
        for case in cases:
            sweeps.append(sweep_bf16(*case))
            save()
            torch.cuda.empty_cache()
    if not args.no_fp8 and not args.sweep_only:
        fp8_cases = [(m, s, t, r) for m, s, t, r in cases if m == "DeepSeek-V3"]
        if args.fp8_tokens is not None:
            fp8_cases = [("DeepSeek-V3", s, t, "uniform") for t in args.fp8_tokens for s in (0, 1)]
        for case in fp8_cases:
            rows.extend(bench_fp8(*case))
            _print(rows[-2:])
            save()
            torch.cuda.empty_cache()
    if not args.no_bf16 and not args.sweep_only:
        for model, shape, tokens, routing in cases:
            rows.append(bench_bf16(model, shape, tokens, routing))
            _print(rows[-1:])
            save()
            torch.cuda.empty_cache()
    print()
    _print(rows)
    bf16 = [r["ratio"] for r in rows if r["dtype"] == "bf16" and "ratio" in r]
    if bf16:
        print(f"bf16 against torch grouped_mm: geomean {math.exp(np.mean(np.log(bf16))):.3f}, min {min(bf16):.3f}")
    loops = [r["loop_ratio"] for r in rows if "loop_ratio" in r]
    if loops:
        print(f"bf16 against a loop of torch.matmul: geomean {math.exp(np.mean(np.log(loops))):.3f}")
    save()
    print(f"wrote {path}")


if __name__ == "__main__":
    sys.exit(main())
