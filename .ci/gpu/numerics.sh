#!/usr/bin/env bash
# GPU checks of the numerics work (60 s in all): blocked triangular solves and complex products
# (tests, in parallel), then the 3xtf32 accuracy study and a short timing of large solves.
# Runs from the repository root with PYTHONPATH set; logs and JSON go to "$LOGS".
set -uo pipefail
LOGS=${LOGS:-/tmp/numerics-logs}
mkdir -p "$LOGS"
start=$(date +%s)
left() { echo $(( 57 - ($(date +%s) - start) )); }
nvidia-smi --query-gpu=name --format=csv,noheader | head -1
PYTEST="python3 -m pytest -m gpu -q -p no:cacheprovider"
timeout 34 $PYTEST -n 5 tests/test_gpu_blocked_trsm.py >"$LOGS/blocked_trsm.log" 2>&1 &
p1=$!
timeout 34 $PYTEST -n 5 tests/test_gpu_complex_matmul.py >"$LOGS/complex_matmul.log" 2>&1 &
p2=$!
timeout 34 python3 benchmarks/emulated_f32.py --accuracy 16 64 256 1024 4096 16384 --configs \
  --json "$LOGS/emulated_f32_accuracy.json" >"$LOGS/emulated_f32_accuracy.log" 2>&1 &
p3=$!
wait $p1; echo "blocked trsm tests: rc=$?"; tail -3 "$LOGS/blocked_trsm.log"
wait $p2; echo "complex matmul tests: rc=$?"; tail -3 "$LOGS/complex_matmul.log"
wait $p3; echo "3xtf32 accuracy: rc=$?"; grep -h "^K" "$LOGS/emulated_f32_accuracy.log" | cut -c1-200
grep -h "^FAILED\|^E  " "$LOGS"/blocked_trsm.log "$LOGS"/complex_matmul.log | head -12
t=$(left); if [ "$t" -gt 5 ]; then
  timeout $(( t / 2 )) python3 benchmarks/complex_matmul.py --sizes 4096 --four \
    --json "$LOGS/complex_matmul.json" >"$LOGS/complex_matmul_bench.log" 2>&1
  echo "complex matmul bench: rc=$?"; grep -h "^| c" "$LOGS/complex_matmul_bench.log" | cut -c1-220
fi
t=$(left); if [ "$t" -gt 5 ]; then
  timeout "$t" python3 benchmarks/trsm.py --large --types f32 f64 --sizes 1024 4096 \
    --json "$LOGS/trsm_large.json" >"$LOGS/trsm_large.log" 2>&1
  echo "trsm large: rc=$?"; grep -h "batch\|FAILED" "$LOGS/trsm_large.log" | cut -c1-220 | head -8
fi
