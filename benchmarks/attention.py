"""blasdx's flash-attention forward (examples/flash_attention.py) against PyTorch.

    python benchmarks/attention.py [--seq S ...] [--head-dim D ...] [--causal both|yes|no] [--rows N]
                                   [--dtype float16|bfloat16] [--out benchmarks/results/attention.json]

Competitors, measured in the same process on the same data: torch SDPA with its flash backend,
its cuDNN backend (where the installed torch has it), and the unfused form (matmul, scale, mask,
softmax, matmul; skipped where its S x S scores would not fit). GPU time per call from CUDA-graph
replays (examples/gpu_timing.py). Batch x heads gives about --rows query rows (16K-64K in the
suite); every case is checked against SDPA before it is timed. Prints a table and writes JSON rows
{s, d, causal, dtype, blasdx_ms, sdpa_ms, ratio, tflops, ...}; ratio = sdpa_ms / blasdx_ms (above
1 = blasdx faster).
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


def measure(seq: int, d: int, causal: bool, dtype, rows: int, simple: bool = False, other_block_n=()) -> dict:
    import torch
    import torch.nn.functional as F

    heads = 16
    batch = max(1, rows // (seq * heads))
    kernel = fa.build(d, dtype, causal)
    fa.check(kernel, batch, heads, seq, d, dtype, causal, sample=0)  # against SDPA (tests: float64)
    tdtype = getattr(torch, str(dtype))
    q, k, v = (torch.randn((batch, heads, seq, d), device="cuda", dtype=tdtype) for _ in range(3))
    o = torch.empty_like(q)
    flops = 4 * batch * heads * seq * seq * d * (0.5 if causal else 1.0)
    repeat = max(3, min(20, int(2e12 / flops)))  # calls per graph: a few ms of work per replay at most
    ours, _ = time_ms(lambda: fa.run(kernel, q, k, v, o), repeat)
    row = {"s": seq, "d": d, "causal": causal, "dtype": str(dtype), "batch": batch, "heads": heads,
           "blasdx_ms": ours, "registers": kernel.registers}
    if simple:  # the kernel whose GEMMs complete one after the other, for comparison
        plain = fa.build(d, dtype, causal, pipelined=False)
        row["unpipelined_ms"], _ = time_ms(lambda: fa.run(plain, q, k, v, o), repeat)
    for block_n in other_block_n:  # the same kernel with other tiles of keys
        alt = fa.build(d, dtype, causal, block_n=block_n)
        fa.check(alt, batch, heads, seq, d, dtype, causal, sample=0)
        row[f"block_n{block_n}_ms"], _ = time_ms(lambda alt=alt: fa.run(alt, q, k, v, o), repeat)
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seq", type=int, nargs="*", default=SUITE_SEQ)
    parser.add_argument("--head-dim", type=int, nargs="*", default=[64, 128])
    parser.add_argument("--causal", choices=["both", "yes", "no"], default="both")
    parser.add_argument("--dtype", choices=sorted(fa.DTYPES), default="float16")
    parser.add_argument("--rows", type=int, default=32768, help="query rows per case (batch x heads x S)")
    parser.add_argument("--unpipelined", action="store_true", help="also time the kernel without async wgmma")
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
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}, {args.dtype}; ratio = SDPA flash / blasdx")
    print(f"{'S':>6} {'D':>4} {'causal':>6} {'blasdx ms':>10} {'TFLOP/s':>8} {'flash ms':>9} {'ratio':>6} "
          f"{'cudnn ms':>9} {'unfused ms':>10} {'x unfused':>9}")
    for seq in args.seq:
        for d in args.head_dim:
            for causal in causals:
                row = measure(seq, d, causal, dtype, args.rows, args.unpipelined, args.block_n)
                rows.append(row)
                fmt = lambda key, row=row: f"{row[key]:.3f}" if key in row else "-"
                unf = f"{row['unfused_ms'] / row['blasdx_ms']:.2f}" if "unfused_ms" in row else "-"
                ratio = f"{row['ratio']:.2f}" if row["ratio"] else "-"
                print(f"{seq:>6} {d:>4} {causal!s:>6} {row['blasdx_ms']:>10.3f} {row['tflops']:>8.0f} "
                      f"{fmt('sdpa_ms'):>9} {ratio:>6} {fmt('cudnn_ms'):>9} {fmt('unfused_ms'):>10} {unf:>9}"
                      + "".join(f"  {key[:-3]} {row[key]:.3f}" for key in row
                                if key.endswith("_ms") and key.startswith(("unpipelined", "block_n"))), flush=True)
    ratios = [r["ratio"] for r in rows if r["ratio"]]
    if ratios:
        geo = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
        print(f"geomean ratio against SDPA flash: {geo:.3f} (min {min(ratios):.2f}) over {len(ratios)} cases")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"device": torch.cuda.get_device_name(), "torch": torch.__version__,
                                    "rows": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
