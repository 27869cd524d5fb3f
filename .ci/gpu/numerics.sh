#!/usr/bin/env bash
# GPU checks of the numerics work (60 s in all): blocked triangular solves and complex products
# (tests, in parallel), then a short timing of large solves and complex products.
# Runs from the repository root with PYTHONPATH set; logs and JSON go to "$LOGS".
set -uo pipefail
LOGS=${LOGS:-/tmp/numerics-logs}
mkdir -p "$LOGS"
start=$(date +%s)
left() { echo $(( 56 - ($(date +%s) - start) )); }
nvidia-smi --query-gpu=name --format=csv,noheader | head -1
PYTEST="python3 -m pytest -m gpu -q -p no:cacheprovider"
timeout 36 $PYTEST -n 6 tests/test_gpu_blocked_trsm.py >"$LOGS/blocked_trsm.log" 2>&1 &
p1=$!
timeout 36 $PYTEST -n 6 tests/test_gpu_complex_matmul.py >"$LOGS/complex_matmul.log" 2>&1 &
p2=$!
wait $p1; echo "blocked trsm tests: rc=$?"; tail -4 "$LOGS/blocked_trsm.log"
wait $p2; echo "complex matmul tests: rc=$?"; tail -4 "$LOGS/complex_matmul.log"
grep -h "^FAILED\|Error\b" "$LOGS"/*.log | head -20
t=$(left); if [ "$t" -gt 5 ]; then
  timeout "$t" python3 benchmarks/trsm.py --large --types f32 f64 --sizes 1024 4096 \
    --json "$LOGS/trsm_large.json" >"$LOGS/trsm_large.log" 2>&1
  echo "trsm large: rc=$?"; grep -h "batch\|FAILED" "$LOGS/trsm_large.log" | head -8
fi
