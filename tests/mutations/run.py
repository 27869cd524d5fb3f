"""Mutation check of the GPU tests: deliberate bugs that the tests must catch.

Each mutant is a few exact text edits to the kernels or the library (each edit's pattern must
occur exactly once, so a mutant that no longer applies fails loudly instead of testing nothing).
For each, the tree is copied to a temporary folder, the edits applied there, and a small
selection of GPU tests run on the copy with ``-x``; the mutant is caught when one of them fails.
An unmodified copy runs the union of the selections first-hand as the baseline, which must pass.
Mutants run in parallel (one GPU, several processes). Writes ``mutations.json`` and a Markdown
table (mutant, the tests that caught it) to ``--logs``.

    python3 tests/mutations/run.py --logs DIR [--budget SECONDS] [--jobs N] [--only NAME ...]

Needs a Hopper GPU (sm_90), PyTorch and pytest on the machine; run from the repository root.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Mutant:
    """A named bug: (path, pattern, replacement) edits and the tests expected to catch it."""

    name: str
    what: str
    edits: tuple[tuple[str, str, str], ...]
    tests: tuple[str, ...]


#: "The wrong stream": a stream of torch's pool on the current device (non-blocking, alive for the process),
#: never ordered with the call's. The stream tests run on streams of cuda.core or CuPy, never of torch's pool,
#: so this is never the test's own stream (the legacy default stream was not used: launches there were
#: ordered on the GPU).
WRONG = '__import__("torch").cuda.Stream().cuda_stream'

MUTANTS = [
    Mutant(
        "hopper-tile-edge-element",
        "Hopper engine epilogue: the last element of each 64 x 128 output tile's last row gets the wrong sign",
        (("kernels/blasdx/hopper/epilogue.cuh",
          "        v0 *= alpha;\n        v1 *= alpha;\n",
          "        v0 *= alpha;\n        v1 *= alpha;\n        if ((row & 63) == 63 && (col & 127) == 126) v1 = -v1;\n"),),
        ("tests/test_gpu_hopper.py::test_alpha_beta_and_strided_c_d",
         "tests/test_gpu_hopper.py::test_matmul_result_and_plan"),
    ),
    Mutant(
        "hopper-skipped-k-tail",
        "Hopper scheduler: K steps rounded down, so a K that is not a multiple of BK loses its last partial step",
        (("kernels/blasdx/hopper/scheduler.cuh",
          "        steps = (k + BK - 1) / BK;\n",
          "        steps = k / BK;\n"),),
        ("tests/test_gpu_hopper.py::test_alpha_beta_and_strided_c_d",
         "tests/test_gpu_hopper.py::test_repacked_operands"),
    ),
    Mutant(
        "hopper-last-row-unwritten",
        "Hopper engine, direct stores of D: the last row of the result is never written",
        (("kernels/blasdx/hopper/epilogue.cuh",
          "        if (row >= m || col >= n) return;\n        value(w, row, col, v0, v1);\n",
          "        if (row >= m - 1 || col >= n) return;\n        value(w, row, col, v0, v1);\n"),),
        ("tests/test_gpu_hopper.py::test_repacked_operands",),
    ),
    Mutant(
        "block-skipped-k-chunk",
        "batched block GEMM taking K in chunks: the last chunk (the K tail) is copied but never multiplied",
        (("kernels/batched_gemm.cu",
          "    if constexpr (I + 1 < k_chunks<C>) multiply_k_chunks<C, I + 1>(acc, stage);\n",
          "    if constexpr (I + 2 < k_chunks<C>) multiply_k_chunks<C, I + 1>(acc, stage);\n"),),
        ("tests/test_gpu_gemm.py::test_k_in_chunks[float16xfloat16-float32-100x100x100-rrr]",
         "tests/test_gpu_gemm.py::test_k_in_chunks[float16xfloat16-float32-33x40x50-ccc]"),
    ),
    Mutant(
        "scaled-mm-row-scale",
        "scaled_mm epilogue: row 7 of x takes row 8's scale factor",
        (("kernels/blasdx/hopper/scaling.cuh",
          "f *= __ldg(sx + min(row, m - 1) * sx_stride);",
          "f *= __ldg(sx + min(row + (row == 7), m - 1) * sx_stride);"),),
        ("tests/test_gpu_hopper_8bit.py::test_scaled_mm_every_scaling[row-column-float16]",
         "tests/test_gpu_hopper_8bit.py::test_scaled_mm_every_scaling[row-tensor-float32]"),
    ),
    Mutant(
        "block-store-past-view",
        "batched block GEMM: the store of C writes one element past the last one of each problem's view",
        (("kernels/blasdx/copy.cuh",
          "        *reinterpret_cast<Vec*>(dst + i64(r) * LDG + c) = *reinterpret_cast<const Vec*>(src + r * LDS + c);\n",
          ("        *reinterpret_cast<Vec*>(dst + i64(r) * LDG + c) = *reinterpret_cast<const Vec*>(src + r * LDS + c);\n"
           "        if (r == OUTER - 1 && c + VEC_BYTES / int(sizeof(T)) >= INNER) dst[i64(r) * LDG + INNER] = src[r * LDS];\n")),
         ("kernels/batched_gemm.cu",
          "        scale_store(dst, alpha, beta, read_c, value);\n    };\n",
          ("        scale_store(dst, alpha, beta, read_c, value);\n"
           "        if ((Cfg::c_row_major ? row : col) == Cfg::c_outer - 1 && (Cfg::c_row_major ? col : row) == Cfg::c_inner - 1)\n"
           "            dst[1] = dst[0];\n    };\n"))),
        ("tests/test_gpu_gemm.py::test_explicit_leading_dimensions_and_alignment",
         "tests/test_gpu_gemm.py::test_batch_broadcast"),
    ),
    Mutant(
        "execute-wrong-stream",
        "Descriptor.execute launches on another stream (a new one from torch's pool) instead of the resolved one "
        "(every path: checked, bound, and bx.matmul's one-block problems)",
        (("blasdx/run/execute.py",
          "        self.packed.launch(batch if stages == 1 else -(-batch // stages), 1, stream, *args)\n",
          f"        self.packed.launch(batch if stages == 1 else -(-batch // stages), 1, {WRONG}, *args)\n"),),
        ("tests/test_gpu_gemm.py::test_torch_stream_orders_work",
         "tests/test_gpu_gemm.py::test_default_stream_uses_torch_current_stream",
         "tests/test_gpu_gemm.py::test_cupy_arrays_and_cupy_stream",
         "tests/test_gpu_gemm.py::test_blasdx_arrays_on_a_busy_stream"),
    ),
    Mutant(
        "matmul-wrong-stream",
        "bx.matmul / bx.mma launch every path (Hopper engine, multi-block, one block; first and bound calls) on "
        "another stream",
        (("blasdx/calls/matmul.py",
          "            plan.kernel.run(plan.device_id, core, handle, x_view, y_view, vacc, vout, 1.0, float(plan.beta))\n",
          ("            plan.kernel.run(plan.device_id, *(lambda h: (_arrays.as_core_stream(None, h), h))("
           f"{WRONG}), x_view, y_view, vacc, vout, 1.0, float(plan.beta))\n")),
         ("blasdx/calls/matmul.py",
          "            _launch_tiled(plan, x_view, y_view, vacc, vout, 1, plan.beta, handle)\n",
          f"            _launch_tiled(plan, x_view, y_view, vacc, vout, 1, plan.beta, {WRONG})\n"),
         ("blasdx/calls/matmul.py",
          "        _execute.execute_on(plan.desc, x_view, y_view, vout, 1, plan.beta, handle)\n",
          f"        _execute.execute_on(plan.desc, x_view, y_view, vout, 1, plan.beta, {WRONG})\n"),
         ("blasdx/calls/matmul.py",
          "block[0].launch_pointers(block[1], handle, px, py, pout, block[2])",
          f"block[0].launch_pointers(block[1], {WRONG}, px, py, pout, block[2])"),
         ("blasdx/calls/matmul.py",
          "self.engine.launch(device, handle, px, py, 0, pout, self.scalars)",
          f"self.engine.launch(device, {WRONG}, px, py, 0, pout, self.scalars)"),
         ("blasdx/calls/matmul.py",
          "self.engine.launch(device, handle, px, py, pacc, pout, self.scalars)",
          f"self.engine.launch(device, {WRONG}, px, py, pacc, pout, self.scalars)"),
         ("blasdx/calls/matmul.py",
          "self.engine.run(self.device_id, None, handle, vx, vy, vacc, vout, 1.0, self.beta)",
          f"self.engine.run(self.device_id, None, {WRONG}, vx, vy, vacc, vout, 1.0, self.beta)")),
        ("tests/test_gpu_hopper.py::test_streams_and_repeat_calls",),
    ),
    Mutant(
        "scaled-mm-wrong-stream",
        "bx.scaled_mm launches on another stream (first and bound calls)",
        (("blasdx/calls/scaled_mm.py",
          "            call.plan.run(call.device_id, core, handle, vx, vy, vsx, vsy, vbias, vout)\n",
          ("            call.plan.run(call.device_id, *(lambda h: (_arrays.as_core_stream(None, h), h))("
           f"{WRONG}), vx, vy, vsx, vsy, vbias, vout)\n")),
         ("blasdx/calls/scaled_mm.py",
          "plan.run(device, None, handle, view(ArrayView, (px, *rx))",
          f"plan.run(device, None, {WRONG}, view(ArrayView, (px, *rx))"),
         ("blasdx/calls/scaled_mm.py",
          "plan.launch(device, handle, px, py, 0, pout,",
          f"plan.launch(device, {WRONG}, px, py, 0, pout,")),
        ("tests/test_gpu_hopper_8bit.py::test_scaled_mm_on_a_busy_stream",),
    ),
    Mutant(
        "solve-wrong-stream",
        "bx.solve_triangular launches on another stream (one block, blocked solver; first and bound calls)",
        (("blasdx/calls/solve_triangular.py",
          "            plan.blocked.run(core, handle, va, vb, vout, in_place)\n",
          ("            plan.blocked.run(*(lambda h: (_arrays.as_core_stream(None, h), h))("
           f"{WRONG}), va, vb, vout, in_place)\n")),
         ("blasdx/calls/solve_triangular.py",
          "            plan.kernel.launch(core, plan.device_id, (va.ptr, vb.ptr, vout.ptr)",
          f"            plan.kernel.launch(_arrays.as_core_stream(None, {WRONG}), plan.device_id, (va.ptr, vb.ptr, vout.ptr)"),
         ("blasdx/calls/solve_triangular.py",
          "plan.kernel.launch(_arrays.core_stream(handle), plan.device_id, (pa, pb, pout)",
          f"plan.kernel.launch(_arrays.core_stream({WRONG}), plan.device_id, (pa, pb, pout)")),
        ("tests/test_gpu_trsm.py::test_solve_triangular_on_a_busy_stream",),
    ),
    Mutant(
        "trsm-wrong-stream",
        "Descriptor.execute of a TRSM launches on another stream instead of the resolved one",
        (("blasdx/run/trsm.py",
          "        kernel.launch(core, device, (va.ptr, vb.ptr, vb.ptr)",
          f"        kernel.launch(as_core_stream(None, {WRONG}), device, (va.ptr, vb.ptr, vb.ptr)"),),
        ("tests/test_gpu_trsm.py::test_torch_stream_orders_work",),
    ),
]


@dataclass
class Outcome:
    name: str
    caught_by: list[str] = field(default_factory=list)
    passed: int = 0
    returncode: int | None = None
    seconds: float = 0.0
    note: str = ""


def apply(tree: Path, mutant: Mutant) -> None:
    """The mutant's edits in ``tree``; ValueError when a pattern does not occur exactly once."""
    for path, old, new in mutant.edits:
        file = tree / path
        text = file.read_text()
        count = text.count(old)
        if count != 1:
            raise ValueError(f"{mutant.name}: {path}: the pattern occurs {count} times (expected once)")
        file.write_text(text.replace(old, new))


def copy_tree(dst: Path) -> None:
    shutil.copytree(ROOT, dst, ignore=shutil.ignore_patterns(
        ".git", "__pycache__", ".venv", "*.egg-info", ".pytest_cache", ".hypothesis", "results", "docs", "*.png"))


def run_one(mutant: Mutant, tests: tuple[str, ...], timeout: float, logs: Path) -> Outcome:
    """Copy, mutate, run ``tests`` with -x on the copy; who failed."""
    started = time.monotonic()
    outcome = Outcome(mutant.name)
    with tempfile.TemporaryDirectory(prefix=f"blasdx-mutant-{mutant.name}-") as folder:
        tree = Path(folder) / "tree"
        copy_tree(tree)
        try:
            apply(tree, mutant)
        except ValueError as exc:
            outcome.note = str(exc)
            return outcome
        env = dict(os.environ, PYTHONPATH=str(tree), PYTHONHASHSEED="0")
        env.pop("BLASDX_MARGINS_JSON", None)
        cmd = [sys.executable, "-m", "pytest", "-m", "gpu", "-x", "-q", "-p", "no:cacheprovider", "-o", "addopts=",
               "-rfE", *tests]
        try:
            done = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True, timeout=timeout,
                                  check=False)
            output, outcome.returncode = done.stdout + done.stderr, done.returncode
        except subprocess.TimeoutExpired as exc:
            output = (exc.stdout or b"").decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
            outcome.note = f"timed out after {timeout:.0f} s"
    (logs / f"mutant-{mutant.name}.txt").write_text(output)
    for line in output.splitlines():
        found = re.match(r"^(FAILED|ERROR) (\S+)(?: - (.*))?", line)
        if found:
            outcome.caught_by.append(f"{found.group(2)}: {(found.group(3) or found.group(1))[:160]}")
    passed = re.search(r"(\d+) passed", output)
    outcome.passed = int(passed.group(1)) if passed else 0
    if outcome.returncode not in (0, 1) and not outcome.note:
        outcome.note = f"pytest exit {outcome.returncode}"
    outcome.seconds = time.monotonic() - started
    return outcome


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--logs", type=Path, default=Path("mutation-logs"))
    parser.add_argument("--budget", type=float, default=300.0, help="seconds for the whole check")
    parser.add_argument("--jobs", type=int, default=7)
    parser.add_argument("--only", nargs="*", default=None, help="mutant names to run (default: all)")
    parser.add_argument("--no-baseline", action="store_true",
                        help="skip the unmodified copy (the caller runs --print-tests on the tree itself)")
    parser.add_argument("--print-tests", action="store_true", help="print the union of the mutants' tests and exit")
    args = parser.parse_args(argv)
    args.logs.mkdir(parents=True, exist_ok=True)
    mutants = [m for m in MUTANTS if args.only is None or m.name in args.only]
    baseline = Mutant("baseline", "the tree as it is", (), ())
    union = tuple(dict.fromkeys(t for m in mutants for t in m.tests))
    if args.print_tests:
        print(" ".join(union))
        return 0
    jobs = ([] if args.no_baseline else [(baseline, union)]) + [(m, m.tests) for m in mutants]
    timeout = max(args.budget - 5, 10)
    with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as pool:
        outcomes = list(pool.map(lambda job: run_one(job[0], job[1], timeout, args.logs), jobs))
    if args.no_baseline:
        outcomes.insert(0, Outcome("baseline", returncode=0, note="run by the caller on the tree itself"))
    base, results = outcomes[0], outcomes[1:]
    table = ["| mutant | what | caught by |", "|---|---|---|"]
    for mutant, outcome in zip(mutants, results):
        caught = "<br>".join(outcome.caught_by) if outcome.caught_by else f"NOT CAUGHT {outcome.note}".strip()
        table.append(f"| {mutant.name} | {mutant.what} | {caught} |")
    base_ok = base.returncode == 0 and not base.caught_by
    summary = (f"baseline: {'passed' if base_ok else 'FAILED'} ({base.passed} passed, {base.seconds:.0f} s) "
               f"{'; '.join(base.caught_by)} {base.note}".strip())
    print(summary)
    print("\n".join(table))
    (args.logs / "mutations.md").write_text(summary + "\n\n" + "\n".join(table) + "\n")
    (args.logs / "mutations.json").write_text(json.dumps(
        {"baseline": base.__dict__, "mutants": [dict(o.__dict__, what=m.what, tests=m.tests)
                                                for m, o in zip(mutants, results)]}, indent=1))
    all_caught = all(o.caught_by for o in results)
    return 0 if base_ok and all_caught else 1


if __name__ == "__main__":
    sys.exit(main())
