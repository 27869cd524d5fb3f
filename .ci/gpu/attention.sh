#!/usr/bin/env bash
# GPU job of the flash-attention forward: the tests that prove it (the default kernels first, then the
# device-API pieces it is built from), and compute-sanitizer's memcheck, synccheck and racecheck on small
# runs of the example (S = 17 and 1000, causal, D = 64 and 128), alongside the tests. About 90 s on a
# 16-core machine. Run from the repo root with PYTHONPATH=. set; logs go to "$LOGS".
set -uo pipefail
LOGS="${LOGS:-gpu-logs}"; mkdir -p "$LOGS"
export BLASDX_CACHE_DIR="${BLASDX_CACHE_DIR:-/tmp/blasdx-cache}" PYTHONUNBUFFERED=1
start=$SECONDS
# compile the example's default kernels in parallel into the disk cache, so that test workers and the
# sanitized runs find them
timeout 20 python3 - > "$LOGS/build.log" 2>&1 <<'PY'
import sys; sys.path.insert(0, "examples")
from concurrent.futures import ProcessPoolExecutor
import blasdx as bx, flash_attention as fa
CASES = [(d, dt, c) for d in (64, 128) for dt in ("float16", "bfloat16", "float8_e4m3") for c in (False, True)]
def build(case):
    d, dt, c = case
    k = fa.build(d, fa.DTYPES[dt], c)
    return f"D={d} {dt} causal={c}: {k.registers} registers, {k.local_memory} B local"
with ProcessPoolExecutor(12) as pool:
    for line in pool.map(build, CASES): print(line)
PY
echo "build rc=$? ($((SECONDS - start)) s)"; tail -8 "$LOGS/build.log"

# the sanitized runs: one process per tool, each with its own timeout, while the tests run. racecheck
# sees the D = 128 default ('turns': named barriers 1 and 2 between the warpgroups) clean only because
# kv_stream's multiply_last keeps both warpgroups' bar.sync counts equal (see there); a report naming
# store()'s STS / LDS there means that balance was lost
cat > "$LOGS/sanitize_run.py" <<'PY'
"""The example's default causal kernels once each on fresh data (S = 17 and 1000, D = 64 and 128), checked."""
import sys; sys.path.insert(0, "examples")
import torch, blasdx as bx, flash_attention as fa
from blasdx.reference import assert_close
for seq in (17, 1000):
    for d in (64, 128):
        kernel = fa.build(d, bx.float16, True)
        print(f"S={seq} D={d}: launch", flush=True)  # a sanitizer's report of this launch follows the line
        q, k, v = (torch.randn((1, 2, seq, d), device="cuda", dtype=torch.float16) for _ in range(3))
        o = torch.full_like(q, float("nan"))
        fa.run(kernel, q, k, v, o)
        torch.cuda.synchronize()
        ref = fa.reference(*(t.float().cpu().numpy() for t in (q, k, v)), True)
        assert_close(o.float().cpu().numpy(), ref, fa.tolerance_of(bx.float16, seq), what=f"O (S={seq}, D={d})")
print("sanitized runs checked")
PY
SANITIZER="$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)"
pids=()
for tool in memcheck synccheck racecheck; do
  limit=60; [ "$tool" = racecheck ] && limit=75
  # host API errors off: cuda.core probes driver entry points that this driver lacks (cuGetProcAddress)
  ( timeout "$limit" "$SANITIZER" --tool "$tool" --report-api-errors no --error-exitcode 3 python3 "$LOGS/sanitize_run.py" \
      > "$LOGS/sanitizer_$tool.log" 2>&1; echo "rc=$?" >> "$LOGS/sanitizer_$tool.log" ) &
  pids+=($!)
done

T=tests/test_gpu_flash_attention.py
ids=()
for s in 1 17 1000 4097; do for c in False True; do
  ids+=("$T::test_flash_attention[$s-64-float16-$c-overlap]" "$T::test_flash_attention[$s-128-float16-$c-turns]")
done; done
for c in False True; do
  ids+=("$T::test_flash_attention[1000-64-bfloat16-$c-overlap]" "$T::test_flash_attention[1000-128-bfloat16-$c-turns]")
done
# fp8 Q / K / V with per-tensor scales (e4m3 Q K^T, V converted to f16), the default pipelines
for s in 1 17 1000 4097; do for c in False True; do
  ids+=("$T::test_flash_attention_fp8[$s-64-$c]" "$T::test_flash_attention_fp8[$s-128-$c]")
done; done
ids+=("$T::test_flash_attention_scales_checked")
ids+=("$T::test_flash_attention_many_heads" "$T::test_rows_and_bounded_copies" "$T::test_register_a_chain"
      "$T::test_async_chain" "$T::test_online_softmax" "$T::test_kv_stream")
timeout 60 python3 -m pytest -m gpu -q -x -p no:cacheprovider -n 8 "${ids[@]}" > "$LOGS/tests.log" 2>&1
echo "tests rc=$? ($((SECONDS - start)) s)"; grep -E "^FAILED|passed|failed|Error" "$LOGS/tests.log" | tail -12

wait "${pids[@]}"
for tool in memcheck synccheck racecheck; do
  echo "$tool: $(grep -E "SUMMARY|rc=|sanitized runs|Error" "$LOGS/sanitizer_$tool.log" | tr '\n' ' ' | cut -c1-300)"
done
echo "done ($((SECONDS - start)) s)"
