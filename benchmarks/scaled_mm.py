"""8-bit products on the Hopper engine against cuBLASLt (torch._scaled_mm, torch._int_mm).

    python benchmarks/scaled_mm.py [--sizes 4096 8192] [--sweep] [--json PATH]

Cases, each on the same fresh random data for every competitor, every result checked on 64
sampled rows against the float64 product of the dequantized inputs before it is timed:

* fp8 per-tensor: bx.scaled_mm (f32 promotion every 128 K) against torch._scaled_mm
  (use_fast_accum=False); and both with fast accumulation;
* fp8 per-row / per-column scales against torch._scaled_mm's row-wise scaling;
* fp8 block scales (1 x 128 for x, 128 x 128 for y, the DeepSeek-V3 layout) against torch's
  per-tensor call (the goal's yardstick) and torch's own block-scaled call where this torch
  runs one (its error is recorded otherwise);
* int8 x int8 -> int32: bx.matmul against torch._int_mm.

x is row-major and y column-major (K-major both: what every competitor reads fastest); results
bf16 (fp8) and int32. Times are the mean of 10 back-to-back calls between CUDA events (the
median of 10 such), so the host's launch path overlaps the GPU's work as in a model's forward
pass. ``--sweep`` also times every engine configuration on the fp8 (promoted and fast) and
int8 products (for blasdx/engine/hopper.py's rule). Prints tables and writes JSON.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from concurrent.futures import ThreadPoolExecutor
from datetime import date
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import blasdx as bx  # noqa: E402
from batched import cuda_sm  # noqa: E402
from blasdx.calls import matmul as array_gemm  # noqa: E402
from blasdx import arrays
from blasdx.engine import hopper
from blasdx.base import dtypes as dt  # noqa: E402
from blasdx.reference import tolerance  # noqa: E402
from timing import events_ms  # noqa: E402

CALLS = 10  # back-to-back calls per timing


def loop_ms(fn, repeats: int = 10) -> float:
    """Milliseconds per call: the median over ``repeats`` of CALLS back-to-back calls between CUDA events."""
    return events_ms(fn, repeats, warmup=3, calls=CALLS)


def _expand(s, mode: str, rows: int, cols: int, is_x: bool):
    """A scale expanded to its operand's shape (float64)."""
    import torch

    s = s.to(torch.float64)
    if mode != "block":  # a 0-d, (rows, 1) or (1, cols) scale
        return s.expand(rows, cols)
    if is_x:
        return s.repeat_interleave(128, dim=1)[:, :cols]
    return s.repeat_interleave(128, dim=0)[:rows].repeat_interleave(128, dim=1)[:, :cols]


class Checker:
    """check(result, what, slack): sampled rows against the float64 product of the dequantized inputs."""

    def __init__(self, x, y, sx=None, sy=None, modes=("tensor", "tensor"), gen=None) -> None:
        import torch

        m, k = x.shape
        n = y.shape[1]
        self.rows = torch.randint(0, m, (min(m, 64),), generator=gen, device="cuda")
        xs = x[self.rows].to(torch.float64)
        yd = y.to(torch.float64)
        if sx is not None:
            sxe = _expand(sx, modes[0], m, k, True)
            xs = xs * (sxe[self.rows] if sxe.dim() == 2 and sxe.shape[0] == m else sxe)
            yd = yd * _expand(sy, modes[1], k, n, False)
        self.ref = xs @ yd
        self.k = k
        self.exact = sx is None

    def __call__(self, got, what: str, a: dt.DType, c: dt.DType, promotion: int | None, slack: float = 0.0):
        import torch

        out = got[self.rows].to(torch.float64)
        if self.exact:
            bad = int((out != self.ref).sum().item())
            assert bad == 0, f"{what}: {bad} elements differ from the exact product"
            return 0.0
        err = (torch.linalg.norm(out - self.ref) / torch.linalg.norm(self.ref)).item()
        tol = tolerance(a, c, self.k, dt.float32, "wgmma", promotion) + slack
        assert err <= tol, f"{what}: relative error {err:.3e} exceeds {tol:.1e}"
        return err


def _fp8(torch, m, n, k, gen):
    x = (2 * torch.randn(m, k, device="cuda", generator=gen)).to(torch.float8_e4m3fn)
    y = (2 * torch.randn(n, k, device="cuda", generator=gen)).to(torch.float8_e4m3fn).t()  # column-major
    return x, y


def _scales(torch, shape, gen):
    return torch.exp2(4 * torch.rand(shape, device="cuda", generator=gen) - 2)


def _torch_blockwise(torch, x, y, sxb, syb):
    """torch's own block-scaled fp8 call, if this torch runs one on this GPU: (call, None) or (None, why)."""
    tries = []
    fn = getattr(torch.nn.functional, "scaled_mm", None)
    scaling = getattr(torch.nn.functional, "ScalingType", None)
    if fn is not None and scaling is not None:
        tries.append(("torch.nn.functional.scaled_mm", lambda: fn(
            x, y, sxb, scaling.BlockWise1x128, syb, scaling.BlockWise128x128, output_dtype=torch.bfloat16)))
    tries.append(("torch._scaled_mm(block scales)", lambda: torch._scaled_mm(
        x, y, scale_a=sxb, scale_b=syb, out_dtype=torch.bfloat16)))
    errors = []
    for name, call in tries:
        try:
            call()
            torch.cuda.synchronize()
            return name, call, None
        except Exception as exc:  # a torch without it, or refusing these layouts
            errors.append(f"{name}: {type(exc).__name__}: {str(exc).splitlines()[0][:150]}")
    return None, None, "; ".join(errors)


def _row(case, size, ours, ours_name, theirs, flops, results, extra=None):
    entry = {"case": case, "size": size, "blasdx": ours_name}
    entry.update(ours)
    for who, value in theirs.items():
        if isinstance(value, str):
            entry[f"{who}_error"] = value
        else:
            entry[f"{who}_ms"] = value
            entry[f"{who}_tflops"] = flops / value / 1e9
            entry[f"vs_{who}"] = value / ours["ms"]
    if extra:
        entry.update(extra)
    results.append(entry)
    cells = [f"{entry.get(w + '_tflops', float('nan')):.0f}" if w + "_ms" in entry else entry.get(w + "_error", "")[:50]
             for w in theirs]
    ratios = [f"{entry['vs_' + w]:.2f}x" if "vs_" + w in entry else "n/a" for w in theirs]
    print(f"| {case} | {size}^3 | {ours['tflops']:.0f} | " + " | ".join(f"{w}: {c} ({r})" for w, c, r in
                                                                         zip(theirs, cells, ratios)) + " |",
          flush=True)


def measure(size: int, gen) -> list[dict]:
    """Every case at size^3."""
    import torch

    m = n = k = size
    flops = 2.0 * m * n * k
    results: list[dict] = []
    x, y = _fp8(torch, m, n, k, gen)
    one = torch.ones((), device="cuda")
    sx_t, sy_t = torch.tensor(0.5, device="cuda"), torch.tensor(2.0, device="cuda")
    check = Checker(x, y, sx_t, sy_t, ("tensor", "tensor"), gen)
    e4m3, bf16 = dt.float8_e4m3, dt.bfloat16

    def timed(call, what, promotion, slack=0.0):
        got = call()
        err = check(got, what, e4m3, bf16, promotion, slack)
        return loop_ms(call), err

    # per tensor, promoted and fast
    for fast in (False, True):
        ours = lambda: bx.scaled_mm(x, y, sx_t, sy_t, out_dtype=bx.bfloat16, fast_accumulation=fast)  # noqa: E731
        ms, err = timed(ours, f"bx per-tensor fast={fast}", 0 if fast else 128)
        theirs = lambda: torch._scaled_mm(x, y, scale_a=sx_t, scale_b=sy_t, out_dtype=torch.bfloat16,  # noqa: E731
                                          use_fast_accum=fast)
        t_ms, t_err = timed(theirs, f"torch per-tensor fast={fast}", 0 if fast else 128, 5e-3)
        _row(f"fp8 per-tensor{' fast' if fast else ''}", size, {"ms": ms, "tflops": flops / ms / 1e9, "error": err},
             "bx.scaled_mm", {"torch": t_ms}, flops, results, {"torch_error_rel": t_err})
    # per row / column
    sx_r, sy_c = _scales(torch, (m, 1), gen), _scales(torch, (1, n), gen)
    check = Checker(x, y, sx_r, sy_c, ("row", "column"), gen)
    ours = lambda: bx.scaled_mm(x, y, sx_r, sy_c, out_dtype=bx.bfloat16)  # noqa: E731
    ms, err = timed(ours, "bx per-row", 128)
    try:
        theirs = lambda: torch._scaled_mm(x, y, scale_a=sx_r, scale_b=sy_c, out_dtype=torch.bfloat16)  # noqa: E731
        t = timed(theirs, "torch per-row", 128, 5e-3)[0]
    except Exception as exc:
        t = f"{type(exc).__name__}: {str(exc).splitlines()[0][:120]}"
    _row("fp8 per-row", size, {"ms": ms, "tflops": flops / ms / 1e9, "error": err}, "bx.scaled_mm",
         {"torch row-wise": t}, flops, results)
    # blocks: 1 x 128 of x (column-major: rows contiguous), 128 x 128 of y
    kb, nb = math.ceil(k / 128), math.ceil(n / 128)
    sx_b = _scales(torch, (kb, m), gen).t()  # (M, K / 128), rows contiguous: the layout torch's blockwise call takes
    sy_b = _scales(torch, (nb, kb), gen).t()  # (K / 128, N / 128), column-major likewise
    check = Checker(x, y, sx_b, sy_b, ("block", "block"), gen)
    ours = lambda: bx.scaled_mm(x, y, sx_b, sy_b, out_dtype=bx.bfloat16)  # noqa: E731
    ms, err = timed(ours, "bx block", 128)
    check_t = Checker(x, y, sx_t, sy_t, ("tensor", "tensor"), gen)
    per_tensor = lambda: torch._scaled_mm(x, y, scale_a=sx_t, scale_b=sy_t, out_dtype=torch.bfloat16)  # noqa: E731
    check_t(per_tensor(), "torch per-tensor", e4m3, bf16, 128, 5e-3)
    theirs = {"torch per-tensor": loop_ms(per_tensor)}
    name, call, why = _torch_blockwise(torch, x, y, sx_b, sy_b)
    if call is not None:
        try:
            theirs[name] = timed(call, name, 128, 5e-3)[0]
        except AssertionError as exc:  # a different reading of the scales is a result too
            theirs[name] = f"AssertionError: {exc}"
    else:
        theirs["torch block-scaled"] = why
    _row("fp8 1x128 / 128x128 blocks", size, {"ms": ms, "tflops": flops / ms / 1e9, "error": err}, "bx.scaled_mm",
         theirs, flops, results)
    # int8 -> int32
    xi = torch.randint(-128, 128, (m, k), device="cuda", generator=gen, dtype=torch.int32).to(torch.int8)
    yi = torch.randint(-128, 128, (n, k), device="cuda", generator=gen, dtype=torch.int32).to(torch.int8).t()
    check = Checker(xi, yi, gen=gen)
    ours = lambda: bx.matmul(xi, yi)  # noqa: E731
    check(ours(), "bx int8", dt.int8, dt.int32, None)
    ms = loop_ms(ours)
    theirs_i = lambda: torch._int_mm(xi, yi)  # noqa: E731
    check(theirs_i(), "torch int8", dt.int8, dt.int32, None)
    yr = yi.contiguous()  # row-major y: the layout of benchmarks/matmul.py's int8 case
    theirs_r = lambda: torch._int_mm(xi, yr)  # noqa: E731
    check(theirs_r(), "torch int8 row-major y", dt.int8, dt.int32, None)
    plan = next(p for p in reversed(list(array_gemm._CALLS.values())) if p.dtype == dt.int32)
    _row("int8", size, {"ms": ms, "tflops": flops / ms / 1e9, "plan": plan.describe()}, "bx.matmul",
         {"torch._int_mm": loop_ms(theirs_i), "torch._int_mm (row-major y)": loop_ms(theirs_r)}, flops, results)
    return results


SWEEP = [("wide clusters", {}), ("wide", {}), ("square", {}), ("square", {"cluster": 2}), ("pingpong", {}),
         ("pingpong", {"cluster": 2}), ("wide", {"stages": 3})]
#: Promotion every 64 K elements (its accuracy meets mma.sync's 1e-4; docs/index.md): what it costs.
SWEEP_64 = [("wide clusters", {"promotion": 64}), ("wide", {"promotion": 64})]
#: Promotion overlapped with the next stage's products (64 x 128 consumer tiles: square and medium).
SWEEP_OVERLAP = [("square", {"promotion_overlap": True}), ("square", {"promotion_overlap": True, "cluster": 2}),
                 ("medium", {"promotion_overlap": True})]


def sweep(sizes: list[int], gen) -> list[dict]:
    """Every engine configuration on fp8 -> f16 (promoted every 128, and fast) and int8 -> int32 products."""
    import dataclasses

    import torch

    rows = []
    device = array_gemm._device_info(torch.cuda.current_device())
    jobs = []
    for size in sizes:
        x8, y8 = _fp8(torch, size, size, size, gen)
        xi = torch.randint(-128, 128, (size, size), device="cuda", generator=gen, dtype=torch.int32).to(torch.int8)
        yi = torch.randint(-128, 128, (size, size), device="cuda", generator=gen, dtype=torch.int32).to(torch.int8).t()
        cases = (("fp8 promoted", x8, y8, dt.float16, 128), ("fp8 fast", x8, y8, dt.float16, 0),
                 ("int8", xi, yi, dt.int32, 0))
        for label, x, y, c, promotion in cases:
            vx, vy = arrays.as_array(x, "x"), arrays.as_array(y, "y")
            mx, my = array_gemm._matrix(vx, "x"), array_gemm._matrix(vy, "y")
            out = torch.empty((size, size), device="cuda", dtype=torch.float16 if c == dt.float16 else torch.int32)
            vout = arrays.as_array(out, "out")
            if c == dt.int32:
                check = Checker(x, y, gen=gen)
            else:
                one = torch.ones((), device="cuda")
                check = Checker(x, y, one, one, ("tensor", "tensor"), gen)
            for base, changes in SWEEP + (SWEEP_64 + SWEEP_OVERLAP if promotion else []):
                config = dataclasses.replace(hopper.CONFIGS[base], bk=128, **{"promotion": promotion, **changes})
                entry = {"case": label, "size": size, "config": str(config)}
                try:
                    engine, reason = array_gemm._engine_plan(vx, vy, mx, my, c, size, size, size, 1, device, vout,
                                                             config, 1)
                    if engine is None:
                        raise RuntimeError(reason)
                    jobs.append((entry, engine, out, vx, vy, vout, check, c))
                except Exception as exc:
                    entry["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:160]}"
                rows.append(entry)
    with ThreadPoolExecutor(8) as pool:  # NVRTC releases the GIL: compile every kernel at once
        list(pool.map(lambda job: _compiled(job[1]), jobs))
    handle = arrays.resolve_stream(None, ())
    core = arrays.as_core_stream(None, handle)
    for entry, engine, out, vx, vy, vout, check, c in jobs:
        run = lambda: engine.run(torch.cuda.current_device(), core, handle, vx, vy, None, vout, 1, 0)  # noqa: E731
        try:
            out.fill_(0)
            run()
            a = dt.int8 if c == dt.int32 else dt.float8_e4m3
            check(out, f"sweep {entry['case']} {entry['config']}", a, c, engine.config.promotion)
            ms = loop_ms(run)
            entry.update(ms=ms, tflops=2.0 * entry["size"] ** 3 / ms / 1e9, registers=engine.compiled.registers)
        except Exception as exc:
            entry["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:160]}"
        shown = f"{entry['tflops']:7.1f} TFLOP/s" if "tflops" in entry else entry["error"]
        print(f"  sweep {entry['case']} {entry['size']}^3 {entry['config']}: {shown}", flush=True)
    return rows


def _compiled(engine):
    try:
        return engine.compiled
    except Exception:  # reported when it runs
        return None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", nargs="*", type=int, default=[4096, 8192])
    parser.add_argument("--sweep", action="store_true", help="also time every engine configuration")
    parser.add_argument("--json", default="benchmarks/results/scaled_mm.json")
    args = parser.parse_args()
    if cuda_sm() is None:
        return 0
    import torch

    if cuda_sm() != 90:
        print("skipped: the Hopper engine needs an sm_90 GPU")
        return 0
    gen = torch.Generator(device="cuda").manual_seed(0)
    swept = sweep(args.sizes, gen) if args.sweep else []
    print("\n| case | size | blasdx TFLOP/s | competitors TFLOP/s (blasdx speed-up) |")
    print("|---|---|---|---|")
    results = []
    for size in args.sizes:
        results += measure(size, gen)
    out = Path(args.json)
    out.parent.mkdir(parents=True, exist_ok=True)
    meta = {"date": date.today().isoformat(), "gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
            "blasdx": bx.__version__, "timing": f"mean of {CALLS} back-to-back calls, median of 10"}
    out.write_text(json.dumps({"meta": meta, "rows": results, "sweep": swept}, indent=1))
    print(f"JSON: {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
