#!/usr/bin/env bash
# GPU checks of the numerics work (60 s in all): blocked triangular solves (diagonal blocks by
# their inverses) and the 3xtf32 rule (tests, in parallel), then timings: large solves, complex
# products, 3xtf32. Runs from the repository root with PYTHONPATH set; logs and JSON go to "$LOGS".
set -uo pipefail
LOGS=${LOGS:-/tmp/numerics-logs}
mkdir -p "$LOGS"
start=$(date +%s)
left() { echo $(( 57 - ($(date +%s) - start) )); }
nvidia-smi --query-gpu=name --format=csv,noheader | head -1
PYTEST="python3 -m pytest -m gpu -q -p no:cacheprovider"
timeout 30 $PYTEST -n 8 tests/test_gpu_blocked_trsm.py >"$LOGS/blocked_trsm.log" 2>&1 &
p1=$!
timeout 30 $PYTEST -n 4 tests/test_gpu_emulation.py tests/test_gpu_complex_matmul.py -k "gauss or blocked or keeps or promotion" \
  >"$LOGS/emulation.log" 2>&1 &
p2=$!
wait $p1; echo "blocked trsm tests: rc=$?"; tail -2 "$LOGS/blocked_trsm.log"
wait $p2; echo "emulation + complex tests: rc=$?"; tail -2 "$LOGS/emulation.log"
grep -h "^FAILED\|^E  " "$LOGS"/blocked_trsm.log "$LOGS"/emulation.log | cut -c1-200 | head -12
t=$(left); if [ "$t" -gt 5 ]; then
  timeout $(( t * 6 / 10 )) python3 benchmarks/trsm.py --large --types f32 f64 --sizes 1024 2048 4096 8192 \
    --json "$LOGS/trsm_large.json" >"$LOGS/trsm_large.log" 2>&1
  echo "trsm large: rc=$?"; grep -h "batch\|FAILED" "$LOGS/trsm_large.log" | cut -c1-250 | head -10
fi
t=$(left); if [ "$t" -gt 5 ]; then
  timeout $(( t * 6 / 10 )) python3 benchmarks/complex_matmul.py --sizes 8192 \
    --json "$LOGS/complex_matmul.json" >"$LOGS/complex_matmul_bench.log" 2>&1
  echo "complex matmul bench: rc=$?"; grep -h "^| c" "$LOGS/complex_matmul_bench.log" | cut -c1-200
fi
t=$(left); if [ "$t" -gt 4 ]; then
  timeout "$t" python3 benchmarks/emulated_f32.py --sizes 4096 8192 --json "$LOGS/emulated_f32.json" \
    >"$LOGS/emulated_f32.log" 2>&1
  echo "3xtf32 speed: rc=$?"; grep -h "normal" "$LOGS/emulated_f32.log" | cut -c1-250
fi
