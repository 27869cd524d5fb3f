#!/usr/bin/env bash
# GPU job of the flash-attention forward: the tests that prove it, the default kernels first.
# Run from the repo root with PYTHONPATH=. set; logs go to "$LOGS".
set -uo pipefail
LOGS="${LOGS:-gpu-logs}"; mkdir -p "$LOGS"
export BLASDX_CACHE_DIR="${BLASDX_CACHE_DIR:-/tmp/blasdx-cache}" PYTHONUNBUFFERED=1
# compile the example's default kernels in parallel into the disk cache, so that test workers find them
timeout 15 python3 - > "$LOGS/build.log" 2>&1 <<'PY'
import sys; sys.path.insert(0, "examples")
from concurrent.futures import ProcessPoolExecutor
import blasdx as bx, flash_attention as fa
CASES = [(d, dt, c) for d in (64, 128) for dt in ("float16", "bfloat16") for c in (False, True)]
def build(case):
    d, dt, c = case
    k = fa.build(d, fa.DTYPES[dt], c)
    return f"D={d} {dt} causal={c}: {k.registers} registers, {k.local_memory} B local"
with ProcessPoolExecutor(8) as pool:
    for line in pool.map(build, CASES): print(line)
PY
echo "build rc=$?"; tail -8 "$LOGS/build.log"
T=tests/test_gpu_flash_attention.py
ids=()
for s in 1 17 1000 4097; do for c in False True; do
  ids+=("$T::test_flash_attention[$s-64-float16-$c-overlap]" "$T::test_flash_attention[$s-128-float16-$c-turns]")
done; done
for c in False True; do
  ids+=("$T::test_flash_attention[1000-64-bfloat16-$c-overlap]" "$T::test_flash_attention[1000-128-bfloat16-$c-turns]")
done
ids+=("$T::test_flash_attention_many_heads" "$T::test_rows_and_bounded_copies" "$T::test_register_a_chain"
      "$T::test_async_chain")
timeout 42 python3 -m pytest -m gpu -q -x -p no:cacheprovider -n 8 "${ids[@]}" > "$LOGS/tests.log" 2>&1
echo "tests rc=$?"; grep -E "^FAILED|passed|failed|Error" "$LOGS/tests.log" | tail -12
