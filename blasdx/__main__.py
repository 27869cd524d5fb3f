"""``python -m blasdx``: look at descriptors, their source, SASS and resource usage; manage the cache.

The expression is Python with blasdx's public names in scope and nothing else::

    python -m blasdx describe "Size(64,64,64) + Precision(float16, float16, float32) + Function.MM + SM(80) + Block()"
    python -m blasdx compile "<expression>" --arch sm_80,sm_89,sm_90a
    python -m blasdx matmul bfloat16 4096x4096x4096 --layout RC   (the Hopper engine's plan)
    python -m blasdx cache info

Errors print their whole message (e.g. the list of supported combinations) and exit with status 2.
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
import time
from collections.abc import Sequence
from typing import Any

__all__ = ["main", "parse_descriptor"]

#: Traits ``describe`` prints, in this order.
TRAITS = (
    "size", "precision", "type", "function", "arrangement", "leading_dimension", "alignment", "sm", "arch",
    "block_dim", "suggested_block_dim", "max_threads_per_block", "suggested_leading_dimension",
    "suggested_alignment", "instruction", "shared_memory_size", "kernel_shared_memory_size", "a_size", "b_size",
    "c_size", "a_dim", "b_dim", "c_dim", "suggested_smem_layout_a", "suggested_smem_layout_b",
    "suggested_smem_layout_c", "is_complete", "is_supported",
)
#: Traits ``describe`` adds for a TRSM descriptor.
TRSM_TRAITS = ("side", "fill_mode", "diag", "batches_per_block")

_ALLOWED_NODES = (
    ast.Expression, ast.BinOp, ast.Add, ast.Call, ast.Attribute, ast.Name, ast.Load, ast.Constant, ast.keyword,
    ast.Tuple, ast.List, ast.UnaryOp, ast.USub,
)


class UsageError(Exception):
    """A command-line mistake: printed with its message, exit status 2."""


def _namespace() -> dict[str, Any]:
    """blasdx's public names, the only names an expression may use."""
    import blasdx

    return {name: getattr(blasdx, name) for name in blasdx.__all__ if not name.startswith("_")}


def parse_descriptor(expression: str) -> Any:
    """Evaluate a descriptor expression safely: only blasdx names, calls, attributes, ``+`` and literals."""
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except SyntaxError as exc:
        raise UsageError(f"expression: invalid syntax at column {exc.offset}: {expression!r}") from None
    namespace = _namespace()
    for node in ast.walk(tree):
        if not isinstance(node, _ALLOWED_NODES):
            raise UsageError(f"expression: {type(node).__name__} is not allowed; use blasdx operators joined with +")
        if isinstance(node, ast.Name) and node.id not in namespace:
            raise UsageError(f"expression: unknown name {node.id!r}; expected blasdx names such as Size, Precision, SM")
        if isinstance(node, ast.Attribute) and node.attr.startswith("_"):
            raise UsageError(f"expression: private attribute {node.attr!r} is not allowed")
    value = eval(compile(tree, "<expression>", "eval"), {"__builtins__": {}}, namespace)  # noqa: S307 - checked above
    from .describe.descriptor import Descriptor

    if not isinstance(value, Descriptor):
        value = Descriptor([value])
    return value


def _with_arch(desc: Any, arch: str) -> Any:
    """``desc`` with its SM operator replaced by the one ``arch`` (``sm_90a`` ...) names."""
    from .describe.descriptor import Descriptor
    from .describe.operators import SM

    match = re.match(r"^sm_(\d{2,3})(a?)$", arch)
    if match is None:
        raise UsageError(f"--arch: {arch!r}; expected targets such as sm_80 or sm_90a")
    ops = [op for op in desc.operators if not isinstance(op, SM)]
    return Descriptor([*ops, SM(int(match[1]), arch_specific=match[2] == "a")])


def _cmd_describe(args: argparse.Namespace) -> None:
    """Print the descriptor and every trait."""
    from .describe.trsm import TrsmDescriptor
    from .base.errors import BlasdxError

    desc = parse_descriptor(args.expression)
    print(repr(desc))
    traits = TRAITS + (TRSM_TRAITS if isinstance(desc, TrsmDescriptor) else ())
    width = max(len(t) for t in traits)
    for trait in traits:
        try:
            value: Any = getattr(desc, trait)
        except BlasdxError as exc:
            value = f"(n/a: {str(exc).splitlines()[0]})"
        print(f"  {trait:<{width}}  {value}")


def _cmd_source(args: argparse.Namespace) -> None:
    """Print the generated CUDA C++."""
    from .codegen.sources import generate

    desc = parse_descriptor(args.expression).validate()
    sys.stdout.write(generate(desc).source)


def _cmd_sass(args: argparse.Namespace) -> None:
    """Compile (through the cache) and print the SASS."""
    from .compile.cache import compile_descriptor

    sys.stdout.write(compile_descriptor(parse_descriptor(args.expression)).sass())


def _cmd_compile(args: argparse.Namespace) -> None:
    """Compile for each arch and print a resource table."""
    from .compile.cache import compile_descriptor, stats

    desc = parse_descriptor(args.expression)
    archs = [a.strip() for a in args.arch.split(",") if a.strip()] if args.arch else [desc.arch]
    rows = [("arch", "instruction", "threads", "registers", "static smem", "dynamic smem", "local", "cubin", "from")]
    for arch in archs:
        target = _with_arch(desc, arch)
        before = stats.nvrtc_calls
        start = time.perf_counter()
        kernel = compile_descriptor(target)
        ms = (time.perf_counter() - start) * 1e3
        origin = f"nvrtc {ms:.0f} ms" if stats.nvrtc_calls > before else f"cache {ms:.1f} ms"
        rows.append((
            arch, target.instruction, str(target.max_threads_per_block), str(kernel.registers),
            f"{kernel.shared_memory} B", f"{target.kernel_shared_memory_size} B", f"{kernel.local_memory} B",
            f"{len(kernel.cubin)} B", origin,
        ))
    print(repr(desc))
    _print_table(rows)


def _print_table(rows: Sequence[Sequence[str]]) -> None:
    """Left-aligned columns, a rule under the header."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for index, row in enumerate(rows):
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip())
        if index == 0:
            print("  ".join("-" * w for w in widths))


def _cmd_cache(args: argparse.Namespace) -> None:
    """``cache info`` or ``cache clear``."""
    from .compile.cache import cache_dir, cache_info, clear_cache

    if args.action == "info":
        print(cache_info())
    else:
        removed = clear_cache()
        print(f"removed {removed} entries from {cache_dir()}")


def _cmd_matmul(args: argparse.Namespace) -> None:
    """What bx.matmul runs on an sm_90 GPU for contiguous operands of a type, shape and layouts."""
    from .base import dtypes as dt
    from .calls.matmul import RESULT_TYPES
    from .engine import hopper
    from .engine import wide as hopper_wide

    match = re.fullmatch(r"(\d+)x(\d+)x(\d+)", args.shape)
    if match is None:
        raise UsageError(f"shape: {args.shape!r}; expected MxNxK, e.g. 4096x4096x4096")
    m, n, k = (int(v) for v in match.groups())
    if args.layout not in ("RR", "RC", "CR", "CC"):
        raise UsageError(f"--layout: {args.layout!r}; expected RR, RC, CR or CC (A then B, R row-major)")
    a = dt.as_dtype(args.type)
    c = dt.as_dtype(args.result) if args.result else RESULT_TYPES.get(a, a)
    engine: Any = hopper_wide if hopper_wide.serves(a, c) else hopper  # f64 / f32 take the wide path
    print(engine.describe_call(a, c, m, n, k, args.batch, args.layout[0] == "R", args.layout[1] == "R", args.sms))
    if args.explain:
        print(MATMUL_FIELDS)


#: What the fields of ``python -m blasdx matmul``'s line mean (its --help and --explain print it).
MATMUL_FIELDS = """\
The line names, in order:
  hopper wgmma+TMA     the kernel: warpgroup MMA (16-bit, tf32, fp8, int8) or DMMA / FFMA (float64 / float32),
                       operands brought to shared memory by the Tensor Memory Accelerator
  128x128x64           the block tile, M x N x K of C each block computes per pipeline stage
                       (float64 / float32: "128x128 tiles, 64x32 per warp", the block and warp tiles)
  6 stages             shared-memory buffers in the load ring: TMA fills stages ahead of the math
  2 consumers          math warpgroups per block (one producer warpgroup issues the loads);
                       ping-pong: the two take turns on alternate tiles, one computing while the other stores
  group 8              tiles walk the grid in groups of 8 block-rows, so neighbours share A and B in L2
  clusters of 2        (when shown) blocks of a cluster share one TMA load through multicast
  f32 promotion ...    (fp8) partial sums move from the tensor core's accumulator into float32 every 128 K
  1 K split            blocks that share one C tile over parts of K (more than 1: a reduction kernel adds them)
  D by TMA             the result leaves shared memory by TMA stores; "direct stores": threads write it
  x / y K-major        how each operand is read: K-major (K contiguous) or MN-major;
                       "repacked": the call first copies the operand to the layout the instruction needs"""


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``python -m blasdx``."""
    parser = argparse.ArgumentParser(prog="python -m blasdx", description="blasdx: block-level GEMM descriptors")
    sub = parser.add_subparsers(dest="command", required=True)
    expr_help = 'descriptor, e.g. "Size(64,64,64) + Precision(float16) + Function.MM + SM(80) + Block()"'
    for name, handler, text in (
        ("describe", _cmd_describe, "print the descriptor's traits"),
        ("source", _cmd_source, "print the generated CUDA C++"),
        ("sass", _cmd_sass, "print the SASS of the compiled kernel (needs nvidia-cuda-cuobjdump)"),
        ("compile", _cmd_compile, "compile and print registers / shared / local memory per arch"),
    ):
        command = sub.add_parser(name, help=text)
        command.add_argument("expression", help=expr_help)
        command.set_defaults(handler=handler)
    sub.choices["compile"].add_argument("--arch", help="comma-separated targets, e.g. sm_80,sm_90a (default: the SM)")
    matmul = sub.add_parser(
        "matmul", help="what bx.matmul runs on the Hopper engine for a type, shape and layouts",
        description="Print the plan bx.matmul runs on an sm_90 GPU for contiguous operands (no GPU needed).",
        epilog=MATMUL_FIELDS, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    matmul.add_argument("type", help="input type, e.g. bfloat16")
    matmul.add_argument("shape", help="MxNxK, e.g. 4096x4096x4096")
    matmul.add_argument("--layout", default="RR", help="A then B: R row-major, C column-major (default RR)")
    matmul.add_argument("--result", help="result type (default: matmul's for the input type)")
    matmul.add_argument("--batch", type=int, default=1,
                        help="problems in the batch, x (batch, M, K) and y (batch, K, N) (default 1)")
    matmul.add_argument("--explain", action="store_true", help="print what each field of the line means")
    matmul.add_argument("--sms", type=int, default=132, help="multiprocessors of the GPU (default 132, H100/H200)")
    matmul.set_defaults(handler=_cmd_matmul)
    cache = sub.add_parser("cache", help="show or clear the on-disk kernel cache")
    cache.add_argument("action", choices=("info", "clear"))
    cache.set_defaults(handler=_cmd_cache)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit status (0, or 2 after an error message)."""
    from .base.errors import BlasdxError

    args = build_parser().parse_args(argv)
    try:
        args.handler(args)
    except (UsageError, BlasdxError, ValueError, TypeError, AttributeError) as exc:
        print(f"blasdx {args.command}: error: {_message(exc)}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # pragma: no cover - e.g. `| head`
        return 0
    return 0


def _message(exc: BaseException) -> str:
    """The whole message of an error (its later lines list what is allowed), plus where a failed source was saved."""
    text = str(exc).strip() or type(exc).__name__
    saved = getattr(exc, "saved_to", None)
    return f"{text}\n(source and log saved to {saved})" if saved else text


if __name__ == "__main__":
    sys.exit(main())
