#!/usr/bin/env bash
# bx.grouped_mm on the GPU: correctness first (tests/test_gpu_grouped_mm.py), then a sweep of
# tile configurations and stores, fp8 block-scaled cases (contiguous and masked) and the bf16
# cases against torch's grouped_mm and a loop of torch.matmul (benchmarks/grouped_mm.py). Run
# from the repository root with PYTHONPATH=. and $LOGS an existing folder.
set -u
LOGS=${LOGS:-/tmp}
timeout 28 python3 -m pytest -m gpu -v -p no:cacheprovider -n 8 -o faulthandler_timeout=25 \
    tests/test_gpu_grouped_mm.py --junitxml="$LOGS/junit.xml" > "$LOGS/tests.txt" 2>&1
echo "tests rc=$?"
echo "passed: $(grep -c ' PASSED ' "$LOGS/tests.txt")"
grep -E "^(FAILED|ERROR) " "$LOGS/tests.txt" | head -20
grep -E "^E  " "$LOGS/tests.txt" | sort | uniq -c | sort -rn | head -12
tail -n 2 "$LOGS/tests.txt"
B=benchmarks/grouped_mm.py
timeout 30 python3 $B --sweep-only --quick --json "$LOGS/sweep.json" > "$LOGS/sweep.txt" 2>&1
echo "sweep rc=$?"; grep -E "^model=" "$LOGS/sweep.txt"
timeout 24 python3 $B --no-bf16 --fp8-tokens 16384 --json "$LOGS/fp8.json" > "$LOGS/fp8.txt" 2>&1
echo "fp8 rc=$?"; grep -E "^DeepSeek" "$LOGS/fp8.txt" | sort -u; grep -E "Error|error" "$LOGS/fp8.txt" | tail -3
timeout 32 python3 $B --medium --no-fp8 --json "$LOGS/bf16.json" > "$LOGS/bf16.txt" 2>&1
echo "bf16 rc=$?"; grep -E "^(DeepSeek|Qwen|Mixtral)" "$LOGS/bf16.txt" | sort -u; grep -E "geomean|Error" "$LOGS/bf16.txt" | tail -4
