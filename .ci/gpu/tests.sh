#!/usr/bin/env bash
# GPU job of the test-strength work (final check, ~100 s). At once, on one GPU and 16 cores:
#  1. the baseline: the GPU tests the mutants are run against (the stream tests among them), plus D's
#     padding (the engine's and grouped_mm's), on this tree as it is (they must pass);
#  2. the mutation check (tests/mutations/run.py --no-baseline): each deliberate bug in a copy of the
#     tree, its tests run with -x; the table mutant -> tests that caught it goes to $LOGS/mutations.md.
# Run from the repository root with PYTHONPATH=. and $LOGS an existing folder.
set -u
LOGS=${LOGS:-/tmp/blasdx-logs}
mkdir -p "$LOGS"
BUDGET=${BUDGET:-110}
start=$(date +%s)
nvidia-smi --query-gpu=name --format=csv,noheader > "$LOGS/gpu.txt" 2>&1

timeout $(( BUDGET - 4 )) python3 tests/mutations/run.py --logs "$LOGS" --budget $(( BUDGET - 8 )) --jobs 11 \
  --no-baseline > "$LOGS/mutations.txt" 2>&1 &
mutations=$!

read -r -a UNION <<< "$(python3 tests/mutations/run.py --print-tests)"
timeout $(( BUDGET - 4 )) python3 -m pytest -m gpu -v -p no:cacheprovider -o addopts="" -n 4 --dist load -rfE \
  tests/test_gpu_hopper.py::test_d_padding_is_never_written tests/test_gpu_hopper.py::test_k_zero_and_empty_results \
  tests/test_gpu_grouped_mm.py::test_padded_out_is_never_written_past_n \
  "tests/test_gpu_hopper.py::test_split_k_shapes[37x1000x9000]" "${UNION[@]}" > "$LOGS/baseline.txt" 2>&1
echo "baseline rc=$? ($(( $(date +%s) - start )) s): $(tail -1 "$LOGS/baseline.txt")"
grep -E "^(FAILED|ERROR|XPASS)" "$LOGS/baseline.txt" | head -10

wait $mutations
echo "mutations rc=$?"
cat "$LOGS/mutations.md" 2>/dev/null || tail -20 "$LOGS/mutations.txt"
echo "done in $(( $(date +%s) - start )) s"
