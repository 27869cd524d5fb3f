"""blasdx's flash-attention forward (examples/flash_attention.py) against PyTorch.

    python benchmarks/attention.py [--seq S ...] [--head-dim D ...] [--causal both|yes|no] [--rows N]
                                   [--dtype float16|bfloat16|float8_e4m3] [--out benchmarks/results/attention.json]

Competitors, measured in the same process on the same data: torch SDPA with its flash backend,
its cuDNN backend (where the installed torch has it), and the unfused form (matmul, scale, mask,
softmax, matmul; skipped where its S x S scores would not fit). GPU time per call from CUDA-graph
replays (examples/gpu_timing.py). Batch x heads gives about --rows query rows (16K-64K in the
suite); every case is checked against SDPA before it is timed. Prints a table and writes JSON rows
{s, d, causal, dtype, blasdx_ms, sdpa_ms, ratio, tflops, ...}; ratio = sdpa_ms / blasdx_ms (above
1 = blasdx faster). --dtype float8_e4m3: blasdx on fp8 Q, K, V with per-tensor scales (O in f16), every
competitor on the f16 values they stand for (torch SDPA has no fp8 path): the rows say "sdpa_input": "float16".
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "examples"))
sys.path.insert(0, str(ROOT))

import flash_attention as fa
from gpu_timing import time_ms

SUITE_SEQ = [512, 1024, 2048, 4096, 8192, 16384]


def sdpa_backend(name: str):
    """A context manager that restricts SDPA to one backend, or None when this torch lacks it."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    backend = getattr(SDPBackend, name, None)
    return None if backend is None else (lambda: sdpa_kernel([backend]))


def measure(seq: int, d: int, causal: bool, dtype, rows: int, variants=()) -> dict:
    import torch
    import torch.nn.functional as F

    heads = max(1, min(16, rows // seq))  # 16 heads while that keeps to `rows` query rows, then fewer
    batch = max(1, rows // (seq * heads))
    kernel = fa.build(d, dtype, causal)
    fa.check(kernel, batch, heads, seq, d, dtype, causal, sample=0)  # against SDPA (tests: float64)
    (qx, kx, vx), scales, (q, k, v) = fa.inputs((batch, heads, seq, d), dtype)  # q, k, v: the competitors'
    o = torch.empty_like(q)
    flops = 4 * batch * heads * seq * seq * d * (0.5 if causal else 1.0)
    repeat = max(3, min(20, int(2e12 / flops)))  # calls per graph: a few ms of work per replay at most
    ours, _ = time_ms(lambda: fa.run(kernel, qx, kx, vx, o, scales), repeat)
    row = {"s": seq, "d": d, "causal": causal, "dtype": str(dtype), "batch": batch, "heads": heads,
           "blasdx_ms": ours, "registers": kernel.registers, "block_n": kernel.gemms["QK"].n,
           "sdpa_input": str(q.dtype).removeprefix("torch.")}
    for label, options in variants:  # the same kernel built otherwise, for comparison
        alt = fa.build(d, dtype, causal, **options)
        fa.check(alt, batch, heads, seq, d, dtype, causal, sample=0)
        row[f"{label}_ms"], _ = time_ms(lambda alt=alt: fa.run(alt, qx, kx, vx, o, scales), repeat)
    for name, key in (("FLASH_ATTENTION", "sdpa_ms"), ("CUDNN_ATTENTION", "cudnn_ms")):
        ctx = sdpa_backend(name)
        if ctx is None:
            continue
        try:
            with ctx():
                row[key], _ = time_ms(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal), repeat)
        except RuntimeError as err:  # backend unavailable for this shape or build
            row[key + "_error"] = str(err).splitlines()[0][:200]
    if batch * heads * seq * seq * 4 <= 8 << 30:  # f32 scores of the unfused form
        scale = 1.0 / math.sqrt(d)
        mask = torch.ones(seq, seq, device="cuda", dtype=torch.bool).tril() if causal else None

        def unfused():
            s = torch.matmul(q, k.transpose(-1, -2)) * scale
            if mask is not None:
                s = s.masked_fill(~mask, float("-inf"))
            return torch.matmul(torch.softmax(s, -1), v)

        row["unfused_ms"], _ = time_ms(unfused, repeat)
    row["tflops"] = flops / ours / 1e9
    row["ratio"] = row["sdpa_ms"] / ours if "sdpa_ms" in row else None
    return row


def write(path: Path, rows: list[dict]) -> None:
    """The JSON of the rows so far (written whole, then moved into place)."""
    import torch

    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"device": torch.cuda.get_device_name(), "torch": torch.__version__, "rows": rows},
                              indent=1) + "\n")
    tmp.replace(path)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seq", type=int, nargs="*", default=SUITE_SEQ)
    parser.add_argument("--head-dim", type=int, nargs="*", default=[64, 128])
    parser.add_argument("--causal", choices=["both", "yes", "no"], default="both")
    parser.add_argument("--dtype", choices=sorted(fa.DTYPES), default="float16")
    parser.add_argument("--rows", type=int, default=32768, help="query rows per case (batch x heads x S)")
    parser.add_argument("--pipeline", nargs="*", default=[], choices=sorted(fa.PIPELINES),
                        help="also time the kernel with these pipelines")
    parser.add_argument("--block-n", type=int, nargs="*", default=[], help="also time these key tiles (64, 128)")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "attention.json")
    args = parser.parse_args()
    import torch

    if not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0):
        print("needs a compute capability 9.0 GPU")
        return 1
    torch.manual_seed(0)
    causals = {"both": [False, True], "yes": [True], "no": [False]}[args.causal]
    dtype = fa.DTYPES[args.dtype]
    rows = []
    fp8 = args.dtype == "float8_e4m3"
    against = " (blasdx on fp8 with per-tensor scales, SDPA and unfused on f16 inputs)" if fp8 else ""
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, {args.dtype}{against}; "
          "ratio = SDPA flash / blasdx")
    print(f"{'S':>6} {'D':>4} {'causal':>6} {'blasdx ms':>10} {'TFLOP/s':>8} {'flash ms':>9} {'ratio':>6} "
          f"{'cudnn ms':>9} {'unfused ms':>10} {'x unfused':>9}")
    for seq in args.seq:
        for d in args.head_dim:
            for causal in causals:
                variants = [(name, {"pipeline": name}) for name in args.pipeline]
                variants += [(f"block_n{n}", {"block_n": n}) for n in args.block_n]
                row = measure(seq, d, causal, dtype, args.rows, variants)
                rows.append(row)
                write(args.out, rows)  # after every case, so that a cut-short run keeps what it measured
                fmt = lambda key, row=row: f"{row[key]:.3f}" if key in row else "-"
                unf = f"{row['unfused_ms'] / row['blasdx_ms']:.2f}" if "unfused_ms" in row else "-"
                ratio = f"{row['ratio']:.2f}" if row["ratio"] else "-"
                print(f"{seq:>6} {d:>4} {causal!s:>6} {row['blasdx_ms']:>10.3f} {row['tflops']:>8.0f} "
                      f"{fmt('sdpa_ms'):>9} {ratio:>6} {fmt('cudnn_ms'):>9} {fmt('unfused_ms'):>10} {unf:>9}"
                      + "".join(f"  {label} {row[label + '_ms']:.3f}" for label, _ in variants), flush=True)
    geomean = lambda values: math.exp(sum(math.log(x) for x in values) / len(values))
    ratios = [r["ratio"] for r in rows if r["ratio"]]
    if ratios:
        print(f"geomean ratio against SDPA flash: {geomean(ratios):.3f} (min {min(ratios):.2f}) over {len(ratios)} "
              "cases")
    for key, name in [(f"{label}_ms", label) for label in args.pipeline] + [("cudnn_ms", "SDPA cudnn")]:
        pairs = [(r["sdpa_ms"], r[key]) for r in rows if key in r and "sdpa_ms" in r]
        if pairs:
            print(f"  {name}: geomean ratio against SDPA flash {geomean([a / b for a, b in pairs]):.3f}")
    unfused = [r["unfused_ms"] / r["blasdx_ms"] for r in rows if "unfused_ms" in r]
    if unfused:
        print(f"against the unfused form: min {min(unfused):.2f}x, geomean {geomean(unfused):.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
