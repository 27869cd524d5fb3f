"""Accuracy of the block-level GEMM's float32 schemes over K: MantissaBits(23) (3xtf32 on mma.sync)
against FFMA, tf32 and torch float32 (cuBLAS, tf32 off), all against the float64 product.

    python benchmarks/block_accuracy.py [--depths 32 256 1024 2048 4096] [--batch 256] [--json PATH]

Each depth K runs ``batch`` problems of 6 x 6 x K (one block each, as Descriptor.execute does;
6 x 6 keeps A and B of K = 4096 within one block's shared memory) on fresh normal operands,
and, with --wide-range, on operands scaled element by element by 2^-20 .. 2^20. Prints the
normwise relative errors beside tolerance(scheme="3xtf32") and writes a dated JSON record.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import blasdx as bx  # noqa: E402
from batched import write_record  # noqa: E402
from blasdx.base import dtypes as dt  # noqa: E402
from blasdx.reference import tolerance  # noqa: E402

SCHEMES = {"3xtf32": (bx.float32, 23), "ffma": (bx.float32, None), "tf32": (bx.tfloat32, None)}


def _descriptor(k: int, sm: int, scheme: str) -> bx.Descriptor:
    a, bits = SCHEMES[scheme]
    desc = (bx.Size(6, 6, k) + bx.Precision(a, a, bx.float32) + bx.Function.MM
            + bx.Arrangement(bx.row_major, bx.col_major, bx.row_major) + bx.MaxAlignment + bx.SM(sm) + bx.Block())
    return desc + bx.MantissaBits(bits) if bits else desc


def errors(k: int, batch: int, sm: int, wide_range: bool, gen) -> dict:
    """Relative errors of each scheme and of torch float32 for one depth."""
    import torch

    x = torch.randn(batch, 6, k, device="cuda", generator=gen)
    y = torch.randn(batch, 6, k, device="cuda", generator=gen)  # stored N x K: column-major K x N
    if wide_range:
        x = x * torch.exp2(torch.randint(-20, 21, x.shape, device="cuda", generator=gen).float())
        y = y * torch.exp2(torch.randint(-20, 21, y.shape, device="cuda", generator=gen).float())
    b = y.transpose(1, 2)
    ref = torch.matmul(x.double(), b.double())

    def err(got) -> float:
        return (torch.linalg.norm(got.double() - ref) / torch.linalg.norm(ref)).item()

    row = {"k": k, "bound_3xtf32": tolerance(dt.float32, dt.float32, k, scheme="3xtf32")}
    for scheme in SCHEMES:
        desc = _descriptor(k, sm, scheme)
        c = torch.full((batch, 6, 6), float("nan"), device="cuda")
        desc.execute(x, b, c)
        row[scheme] = err(c)
        row[f"{scheme}_instruction"] = desc.instruction
    torch.backends.cuda.matmul.allow_tf32 = False
    row["torch_f32"] = err(torch.matmul(x, b))
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--depths", nargs="*", type=int, default=[32, 256, 1024, 2048, 4096])
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--wide-range", action="store_true")
    parser.add_argument("--json", default="benchmarks/results/block_accuracy.json")
    args = parser.parse_args(argv)
    import torch

    major, minor = torch.cuda.get_device_capability()
    sm = 10 * major + minor
    gen = torch.Generator(device="cuda").manual_seed(0)
    rows = [errors(k, args.batch, sm, args.wide_range, gen) for k in args.depths]
    print(f"{torch.cuda.get_device_name()}, 6 x 6 x K, {args.batch} problems, "
          f"{'wide-range' if args.wide_range else 'normal'} operands")
    print("| K | 3xtf32 (MantissaBits(23)) | bound | FFMA | tf32 | torch float32 |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['k']} | {r['3xtf32']:.2e} | {r['bound_3xtf32']:.2e} | {r['ffma']:.2e} | {r['tf32']:.2e} | "
              f"{r['torch_f32']:.2e} |")
    write_record(args.json, batch=args.batch, wide_range=args.wide_range, rows=rows)
    bad = [r["k"] for r in rows if not r["3xtf32"] <= r["bound_3xtf32"]]
    if bad:
        print(f"3xtf32 above its bound at K = {bad}")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
