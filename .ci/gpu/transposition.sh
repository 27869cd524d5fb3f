#!/usr/bin/env bash
# MN-major tf32 / 8-bit B transposed in shared memory (kernels/blasdx/hopper/transpose.cuh, one swizzled offset a
# piece side since next_row): its GPU tests, compute-sanitizer memcheck on one transposed launch, then each [K, N]
# weight of the transposition sweep transposed against repacked (benchmarks/llm_shapes.py --sweep-transposition),
# the figures hopper.TRANSPOSE_MAX_TILE_ROWS is set from. Runs from the repository root with PYTHONPATH set; logs
# and JSON go to "$LOGS".
# budget: 260
set -uo pipefail
LOGS=${LOGS:-/tmp/transposition-logs}
mkdir -p "$LOGS"
export BLASDX_CACHE_DIR="${BLASDX_CACHE_DIR:-/tmp/blasdx-cache-transposition}"
timeout 80 python3 -m pytest -m gpu -q -rfE -p no:cacheprovider -n 8 tests/test_gpu_engine_transpose.py \
  >"$LOGS/tests.log" 2>&1
echo "tests: rc=$?"; tail -2 "$LOGS/tests.log"
grep -h "^FAILED\|^E  " "$LOGS/tests.log" | cut -c1-200 | head -12
timeout 40 compute-sanitizer --tool memcheck --error-exitcode 9 python3 -m pytest -m gpu -q -n 0 -p no:cacheprovider \
  tests/test_gpu_engine_transpose.py -k "matmul_of_a_row_major_weight" >"$LOGS/memcheck.log" 2>&1
echo "memcheck: rc=$?"; grep -h "ERROR SUMMARY\|passed\|failed" "$LOGS/memcheck.log" | head -3
timeout 130 python3 -u benchmarks/llm_shapes.py --no-suite --sweep-transposition --budget 115 --workers 16 \
  --json "$LOGS/llm_shapes_transposition.json" >"$LOGS/sweep.log" 2>&1
echo "sweep: rc=$?"; grep -E "best|out of time" "$LOGS/sweep.log" | cut -c1-170
grep -E "^  sweep" "$LOGS/sweep.log" | cut -c1-170 | head -60
