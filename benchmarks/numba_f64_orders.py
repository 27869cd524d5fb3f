"""The f64 block-compute GEMM in one Numba kernel: blasdx's fragment orders against nvmath.device, timed in turn.

Each blasdx candidate is the benchmark's descriptor (benchmarks/numba_gemm.py) planned under one setting of
``blasdx.plan.heuristics.DMMA_TRANSPOSED_THREADS`` and ``DMMA_TRANSPOSED_K4``: ``atom``, the DMMA
instruction's own order (0), ``transposed``, each DMMA on C^T = B^T A^T with 16-byte reads of both operands
(1024: any block), and ``transposed-k4``, the same registers through two m16n8k4 per K step. Numba keeps
one type per equal descriptor, so each candidate and nvmath.device's GEMM (cuBLASDx through libmathdx) live in
a worker process of their own: every worker builds and checks its kernel once, then the workers time it in
turn, ``--rounds`` times, so that clocks and temperature drift alike for all. The table gives the median and
best TFLOP/s of each, the ratio of medians to nvmath's, and what one pass of each kernel's hot loop runs
(benchmarks/sass_loops.py: MMAs, shared-memory loads by width, instructions per MMA).

    python benchmarks/numba_f64_orders.py [--cases f64:64x64x64:compute ...] [--rounds 7] [--repeats 400]
"""

from __future__ import annotations

import argparse
import collections
import multiprocessing
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numba_gemm as ng

#: blasdx's candidates: (the largest block that takes the transposed order, 0: none; K steps as two m16n8k4).
CANDIDATES = {"atom": (0, False), "transposed": (1024, False), "transposed-k4": (1024, True)}


def build(name: str, case: str, size, sm: int):
    """(kernel, threads, shared bytes, facts) of candidate ``name`` ("nvmath" or one of CANDIDATES), loaded."""
    if name == "nvmath":
        MM = ng.nvmath_gemm(case, size, sm)
        make, threads, smem, facts = (lambda: ng.nvmath_kernel(MM, "compute")), MM.block_dim, \
            ng.nvmath_shared_memory(MM), {}
    else:
        from blasdx.plan import heuristics

        # this process plans every descriptor so
        heuristics.DMMA_TRANSPOSED_THREADS, heuristics.DMMA_TRANSPOSED_K4 = CANDIDATES[name]
        G = ng.descriptor(case, size, sm, "compute")
        make, threads, smem = (lambda: ng.blasdx_kernel(G, "compute")), G.block_dim, G.shared_memory_size_ab
        facts = {"transposed": "m16n8k4" if G.plan.dmma_k4 else G.plan.dmma_transposed, "instruction": G.instruction}
    return make, threads, smem, facts


def loop_of(kernel) -> str:
    """What one pass of the kernel's hot loop runs (benchmarks/sass_loops.py): MMAs, shared loads by width,
    instructions per MMA; the reason where its SASS cannot be read."""
    try:
        import sass_loops

        from blasdx.compile import cubin as _cubin

        library = next(iter(kernel.overloads.values()))._codelibrary
        code = library.get_cubin()
        data = code if isinstance(code, (bytes, bytearray)) else bytes(code.code)
        code = sass_loops.instructions(_cubin.run_cuobjdump(bytes(data), "-sass"))
        ops = sass_loops.hot_loop(code)
        where = "loop"
        if ops is None:  # the MMAs sit in a called function: the whole kernel's counts instead
            ops, where = collections.Counter(op for _, op, _ in code), "whole kernel"
        mix = sass_loops.loop_mix(ops)
        loads = ", ".join(f"{n} {op}" for op, n in mix["loads"].items())
        generic = sum(n for op, n in ops.items() if op.startswith(("LD.", "LDL")))
        return (f"{where}: {mix['mma']} {mix['mma_opcode']}; {loads or 'no LDS'}"
                f"{f'; {generic} LD/LDL' if generic else ''}; {mix['instructions_per_mma']} instr/MMA")
    except Exception as exc:  # noqa: BLE001 - the SASS is a note beside the timing
        return f"({type(exc).__name__})"


def serve(name: str, text: str, repeats: int, conn) -> None:
    """A worker: build and check candidate ``name`` of case ``text``, then time it whenever asked."""
    from numba import cuda

    try:
        case, size_text, kind = text.split(":")
        size = tuple(int(x) for x in size_text.split("x"))
        device = cuda.get_current_device()
        major, minor = device.compute_capability
        blocks = ng.blocks_of(case, size, kind, device.MULTIPROCESSOR_COUNT)
        ops = ng.Operands(case, size, kind, blocks, np.random.default_rng(5))  # the same data in every worker
        args = (ops.da, ops.db, ops.dc, np.int32(repeats))
        check_args = (ops.da, ops.db, ops.dc, np.int32(ng.CHECK_REPEATS))
        make, threads, smem, facts = build(name, case, size, 10 * major + minor)
        kernel = ng.build_seconds(make, check_args, smem)[1]
        ops.upload()
        ops.poison()
        kernel[blocks, threads, 0, smem](*check_args)
        ops.check(ng.CHECK_REPEATS, kind, case, f"{name} {text}", facts.get("instruction"))
        m, n, k = size
        flops = 2.0 * m * n * k * repeats * blocks
        conn.send({"ready": True, "threads": list(threads), "loop": loop_of(kernel), **facts})
    except Exception as exc:  # noqa: BLE001 - the reason is reported in the table
        conn.send({"error": f"{type(exc).__name__}: {str(exc).splitlines()[0][:160]}"})
        return
    while conn.recv() == "time":
        conn.send(flops / ng.time_kernel(kernel, blocks, threads, smem, args, 2) / 1e9)


def run_case(text: str, rounds: int, repeats: int) -> list[dict]:
    """Every candidate of one ``case:MxNxK:compute`` case, each timed ``rounds`` times in turn."""
    if not text.endswith(":compute"):
        raise SystemExit(f"{text}: only the compute kind is timed here")
    spawn = multiprocessing.get_context("spawn")
    rows, workers = [], []
    for name in [*CANDIDATES, "nvmath"]:
        here, there = spawn.Pipe()
        process = spawn.Process(target=serve, args=(name, text, repeats, there))
        process.start()
        reply = here.recv()  # one build at a time: no build beside another's check
        rows.append({"case": text, "candidate": name, "samples": [], **reply})
        workers.append((here, process) if "ready" in reply else (None, process))
    for _ in range(rounds):
        for row, (conn, _) in zip(rows, workers):
            if conn is not None:
                conn.send("time")
                row["samples"].append(conn.recv())
    for conn, process in workers:
        if conn is not None:
            conn.send("stop")
        process.join()
    return rows


def table(rows: list[dict]) -> str:
    lines = ["| case | candidate | transposed | threads | median TFLOP/s | best | / nvmath (medians) | hot loop (SASS) |",
             "|---|---|---|---|---|---|---|---|"]
    reference = {r["case"]: float(np.median(r["samples"])) for r in rows if r["candidate"] == "nvmath" and r["samples"]}
    for r in rows:
        if not r["samples"]:
            lines.append(f"| {r['case']} | {r['candidate']} | | | {r.get('error', 'not run')} | | | |")
            continue
        med, best, ref = float(np.median(r["samples"])), max(r["samples"]), reference.get(r["case"])
        ratio = f"{med / ref:.3f}" if ref else "-"
        lines.append(f"| {r['case']} | {r['candidate']} | {r.get('transposed', '-')} | {r['threads'][0]} | {med:.2f} | "
                     f"{best:.2f} | {ratio} | {r.get('loop', '')} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", nargs="*", default=["f64:64x64x64:compute"])
    parser.add_argument("--rounds", type=int, default=7, help="timings of every candidate, taken in turn")
    parser.add_argument("--repeats", type=int, default=400, help="GEMMs per block")
    args = parser.parse_args(argv)
    for text in args.cases:
        print(table(run_case(text, args.rounds, args.repeats)), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
