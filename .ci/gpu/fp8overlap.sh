#!/usr/bin/env bash
# fp8 promotion overlapped with the next stage's products (EngineConfig.promotion_overlap, 64 x 128 consumer
# tiles): the 8-bit and grouped GPU tests whole (the overlapped ones among them; the block scales' reads changed for
# every promoting kernel), compute-sanitizer memcheck on one overlapped launch, then the configurations timed:
# scaled_mm's sweep at 4096^3 / 8192^3 and the grouped fp8 block-scaled sweep on DeepSeek-V3's shapes (34's goal of
# 1250 TFLOP/s). Not in the rule until measured.
# Runs from the repository root with PYTHONPATH set; logs and JSON go to "$LOGS".
# budget: 370
set -uo pipefail
LOGS=${LOGS:-/tmp/fp8overlap-logs}
mkdir -p "$LOGS"
export BLASDX_CACHE_DIR="${BLASDX_CACHE_DIR:-/tmp/blasdx-cache-fp8overlap}"
timeout 130 python3 -m pytest -m gpu -q -rfE -p no:cacheprovider -n 8 tests/test_gpu_hopper_8bit.py \
  tests/test_gpu_grouped_mm.py >"$LOGS/tests.log" 2>&1
echo "tests: rc=$?"; tail -2 "$LOGS/tests.log"
grep -h "^FAILED\|^E  " "$LOGS/tests.log" | cut -c1-200 | head -12
timeout 45 compute-sanitizer --tool memcheck --error-exitcode 9 python3 -m pytest -m gpu -q -n 0 -p no:cacheprovider \
  tests/test_gpu_hopper_8bit.py -k "overlapped_promotion and square and 384" >"$LOGS/memcheck.log" 2>&1
echo "memcheck: rc=$?"; grep -h "ERROR SUMMARY\|passed\|failed" "$LOGS/memcheck.log" | head -3
timeout 90 python3 -u benchmarks/scaled_mm.py --sizes 4096 8192 --sweep --json "$LOGS/scaled_mm.json" \
  >"$LOGS/scaled_mm.log" 2>&1
echo "scaled_mm sweep: rc=$?"; grep -E "sweep fp8 promoted" "$LOGS/scaled_mm.log" | cut -c1-170
timeout 90 python3 -u benchmarks/grouped_mm.py --medium --sweep-fp8 --json "$LOGS/grouped_fp8_sweep.json" \
  >"$LOGS/grouped.log" 2>&1
echo "grouped fp8 sweep: rc=$?"; grep -E "^model=" "$LOGS/grouped.log" | cut -c1-300
