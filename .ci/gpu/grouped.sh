#!/usr/bin/env bash
# bx.grouped_mm on the GPU: correctness first (tests/test_gpu_grouped_mm.py), then the short
# benchmark list (benchmarks/grouped_mm.py --quick). Run from the repository root with
# PYTHONPATH=. and $LOGS an existing folder.
set -u
LOGS=${LOGS:-/tmp}
python3 -c "import torch, torch.nn.functional as F; print('torch', torch.__version__, 'F.grouped_mm', hasattr(F, 'grouped_mm'), '_grouped_mm', hasattr(torch, '_grouped_mm'), '_scaled_grouped_mm', hasattr(torch, '_scaled_grouped_mm'), 'F.scaled_grouped_mm', hasattr(F, 'scaled_grouped_mm'))" 2>&1 | tee "$LOGS/torch_api.txt"
timeout 42 python3 -m pytest -m gpu -v -p no:cacheprovider -n 8 -o faulthandler_timeout=30 \
    tests/test_gpu_grouped_mm.py --junitxml="$LOGS/junit.xml" > "$LOGS/tests.txt" 2>&1
echo "tests rc=$?"
grep -E "PASSED|FAILED|ERROR" "$LOGS/tests.txt" | sed -E 's/^\[gw[0-9]+\] \[ *[0-9]+%\] //' | sort | uniq -c | sort -rn | head -40
tail -n 15 "$LOGS/tests.txt"
timeout 14 python3 benchmarks/grouped_mm.py --quick --no-fp8 --json "$LOGS/grouped_mm.json" > "$LOGS/bench.txt" 2>&1
echo "bench rc=$?"; tail -n 12 "$LOGS/bench.txt"
