"""What one pass of the block-compute benchmark's repeat loop executes, blasdx against cuBLASDx.

CPU only. Reads the SASS of blasdx's ``block_compute`` kernel (compiled here with NVRTC, exactly as
``benchmarks/block_compute.py`` builds it) and of the cuBLASDx harness library of the same case
(``python benchmarks/cublasdx_harness.py build``), finds the hot loop (``hot_loop``: the K loop, or
the repeat loop where K is unrolled) and counts its instructions: MMAs, shared-memory loads by
width, and everything else. With operands in shared memory, loads and other instructions
per MMA are what a compute-bound block GEMM pays besides the MMAs themselves; where a compiler
keeps fragments in registers across repeats (nothing writes shared memory between them), the
loads per MMA fall below one GEMM's worth, which this shows too.

    python benchmarks/sass_loops.py [--cases f16-f32 ...] [--sizes 32x32x32 ...] [--json PATH]
"""

from __future__ import annotations

import argparse
import collections
import json
import re
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import block_compute  # noqa: E402
import cublasdx_harness as dx  # noqa: E402
from batched import SIZES, TYPES  # noqa: E402
from blasdx.compile.cubin import find_cuobjdump  # noqa: E402

#: Opcodes (before the first '.') that multiply: tensor cores first; FMA only where no MMA is in the loop.
TENSOR_OPS = ("HMMA", "IMMA", "QMMA", "DMMA", "HGMMA", "IGMMA", "QGMMA")
FMA_OPS = ("FFMA", "DFMA")
LOAD_OPS = ("LDSM", "LDS")
MOVE_OPS = ("MOV", "IMAD.MOV", "IMAD.MOV.U32")
_INSTRUCTION = re.compile(r"\s+/\*([0-9a-f]{4,})\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)([^;]*);")
_CUBLASDX_KERNEL = "_ZN5bench14compute_kernel"


def instructions(sass: str) -> list[tuple[int, str, str]]:
    """(address, opcode, operands) of every instruction in a SASS listing."""
    return [(int(m.group(1), 16), m.group(2), m.group(3)) for m in map(_INSTRUCTION.match, sass.splitlines()) if m]


def function_sass(sass: str, name_prefix: str) -> str:
    """The SASS of the first function whose (mangled) name starts with ``name_prefix``."""
    for part in re.split(r"\n\s*Function : ", sass)[1:]:
        if part.startswith(name_prefix):
            return part
    raise LookupError(f"no function {name_prefix}* in the SASS")


def loops(code: list[tuple[int, str, str]]) -> list[tuple[int, int, list[str]]]:
    """Every backward-branch loop of a listing (:func:`instructions`): (first address, branch address, the
    opcodes of one pass in order)."""
    found = []
    for address, opcode, operands in code:
        target = re.search(r"0x([0-9a-f]+)", operands) if opcode == "BRA" else None
        if target is not None and int(target.group(1), 16) < address:
            low = int(target.group(1), 16)
            found.append((low, address, [op for a, op, _ in code if low <= a <= address]))
    return found


def hot_loop(code: list[tuple[int, str, str]]) -> collections.Counter | None:
    """Opcode counts of the loop that runs the multiplications: of the backward-branch loops that
    multiply and hold no other such loop (so that branches around edge-tile variants do not count
    twice), the one with the most MMAs; None when no loop multiplies (fully unrolled)."""
    def multiplies(ops: collections.Counter) -> int:
        tensor = sum(n for op, n in ops.items() if op.split(".")[0] in TENSOR_OPS)
        return tensor or sum(n for op, n in ops.items() if op.split(".")[0] in FMA_OPS)

    counted = [(low, high, collections.Counter(body)) for low, high, body in loops(code)]
    multiplying = [loop for loop in counted if multiplies(loop[2])]
    innermost = [loop for loop in multiplying
                 if not any(o is not loop and loop[0] <= o[0] and o[1] <= loop[1] for o in multiplying)]
    return max(innermost, key=lambda loop: multiplies(loop[2]))[2] if innermost else None


def loop_mix(ops: collections.Counter) -> dict:
    """MMAs, loads by width, moves and all instructions of one pass of a loop."""
    def total(names) -> int:
        return sum(n for op, n in ops.items() if op.split(".")[0] in names)

    tensor = total(TENSOR_OPS)
    mma = tensor or total(FMA_OPS)
    loads = {op: n for op, n in sorted(ops.items()) if op.split(".")[0] in LOAD_OPS}
    moves = sum(n for op, n in ops.items() if op in MOVE_OPS)
    count = sum(ops.values())
    return {
        "mma": mma, "mma_opcode": next((op for op in ops if op.split(".")[0] in (TENSOR_OPS if tensor else FMA_OPS)), ""),
        "loads": loads, "moves": moves, "instructions": count,
        "loads_per_mma": round(sum(loads.values()) / mma, 3) if mma else None,
        "instructions_per_mma": round(count / mma, 3) if mma else None,
    }


def blasdx_mix(name: str, size) -> dict:
    desc = block_compute.block_descriptor(name, size, 90, True)
    kernel = block_compute.compile_blasdx(desc)
    ops = hot_loop(instructions(kernel.compiled.sass()))
    return loop_mix(ops) if ops else {"error": "no repeat loop found"}


def cublasdx_mix(name: str, size, cuobjdump: str, build_dir: Path) -> dict:
    library = dx.library_path(name, size, build_dir)
    if not library.exists():
        return {"error": f"{library.name} not built (cublasdx_harness.py build)"}
    sass = subprocess.run([cuobjdump, "-sass", str(library)], capture_output=True, text=True, check=True).stdout
    ops = hot_loop(instructions(function_sass(sass, _CUBLASDX_KERNEL)))
    return loop_mix(ops) if ops else {"error": "no repeat loop found (fully unrolled?)"}


def _cell(mix: dict) -> str:
    if "error" in mix:
        return f"{mix['error']} | | | |"
    loads = ", ".join(f"{n} {op}" for op, n in mix["loads"].items()) or "none"
    return f"{mix['mma']} {mix['mma_opcode']} | {loads} | {mix['loads_per_mma']} | {mix['instructions_per_mma']} |"


def table(rows: list[dict]) -> str:
    lines = ["| case | M x N x K | blasdx MMAs per pass | shared loads | loads / MMA | instructions / MMA | "
             "cuBLASDx MMAs per pass | shared loads | loads / MMA | instructions / MMA |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['case']} | {'x'.join(map(str, r['size']))} | {_cell(r['blasdx'])} {_cell(r['cublasdx'])}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", nargs="*", default=[c for c in TYPES if c in dx.TYPES],
                        help="case names, '-' for '->' (default: those of the cuBLASDx harness)")
    parser.add_argument("--sizes", nargs="*", type=dx.parse_size, default=list(SIZES))
    parser.add_argument("--build-dir", type=Path, default=dx.DEFAULT_BUILD_DIR, help="cuBLASDx libraries")
    parser.add_argument("--json", default=None)
    args = parser.parse_args(argv)
    cuobjdump = find_cuobjdump()
    rows = []
    for name in (c.replace("-", "->") if c not in TYPES else c for c in args.cases):
        if name not in TYPES:
            parser.error(f"unknown case {name!r}")
        for size in args.sizes:
            try:
                ours = blasdx_mix(name, size)
            except Exception as exc:  # a case blasdx rejects (e.g. f64 128^3 over shared memory)
                ours = {"error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:60]}"}
            rows.append({"case": name, "size": list(size), "blasdx": ours,
                         "cublasdx": cublasdx_mix(name, size, cuobjdump, args.build_dir)})
            print(table(rows[-1:]).splitlines()[-1], flush=True)
    print()
    print(table(rows))
    if args.json:
        Path(args.json).write_text(json.dumps({"rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
