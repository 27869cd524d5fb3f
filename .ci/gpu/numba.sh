#!/usr/bin/env bash
# blasdx GEMMs inside kernels of other JITs: the Numba bridge (blasdx.numba) and LTO-IR entry points
# linked with cuda.core. Runs from the repo root with $LOGS set; the carried wheels give numba-cuda a
# numpy it imports under and nvmath-python its libmathdx. Budget: $NUMBA_JOB_SECONDS (default 60).
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl && export PYTHONPATH=$PWD:/tmp/site LD_LIBRARY_PATH=/tmp/site/nvidia/cu13/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
set -uo pipefail
logs="${LOGS:-gpu-logs}"; mkdir -p "$logs"
export BLASDX_CACHE_DIR="${BLASDX_CACHE_DIR:-/tmp/blasdx-cache-numba}" PYTHONUNBUFFERED=1
budget="${NUMBA_JOB_SECONDS:-60}"
start=$SECONDS
left() { echo $(( budget - (SECONDS - start) - 2 )); }

python3 - > "$logs/env.txt" 2>&1 <<'PY'
import importlib, sys
print(sys.version.split()[0])
for name in ("numpy", "numba", "numba.cuda", "cuda.core", "nvmath"):
    try:
        module = importlib.import_module(name)
        print(name, getattr(module, "__version__", "?"))
    except Exception as exc:
        print(name, "FAILED", type(exc).__name__, str(exc)[:200])
try:
    from cuda.bindings import nvjitlink
    print("nvjitlink", nvjitlink.version())
except Exception as exc:
    print("nvjitlink FAILED", str(exc)[:200])
PY
echo "=== environment ($((SECONDS - start)) s)"; cut -c1-160 "$logs/env.txt"

# 1. Numba kernels with blasdx GEMMs (the random descriptor table and the examples)
timeout "$(( $(left) * 45 / 100 ))" python3 -m pytest -m gpu -v -p no:cacheprovider -n 8 tests/test_gpu_numba.py \
  > "$logs/test_gpu_numba.log" 2>&1
echo "=== test_gpu_numba exit $? ($((SECONDS - start)) s)"
grep -cE "PASSED" "$logs/test_gpu_numba.log" | sed 's/^/passed: /'
grep -E "FAILED|ERROR|Error|error:" "$logs/test_gpu_numba.log" | head -12 | cut -c1-220

# 2. the same Numba kernel with blasdx and with nvmath.device (short case list, stops at its budget)
bench=$(( $(left) * 55 / 100 ))
timeout "$(( bench + 15 ))" python3 benchmarks/numba_gemm.py --quick --budget "$bench" --json "$logs/numba_gemm.json" \
  > "$logs/numba_gemm.log" 2>&1
echo "=== benchmarks/numba_gemm.py exit $? ($((SECONDS - start)) s)"; cut -c1-200 "$logs/numba_gemm.log" | tail -n 16

# 3. LTO-IR linked by cuda.core's Linker into kernels compiled apart
timeout "$(left)" python3 -m pytest -m gpu -v -p no:cacheprovider -n 8 tests/test_gpu_ltoir.py \
  > "$logs/test_gpu_ltoir.log" 2>&1
echo "=== test_gpu_ltoir exit $? ($((SECONDS - start)) s)"
grep -cE "PASSED" "$logs/test_gpu_ltoir.log" | sed 's/^/passed: /'
grep -E "FAILED|ERROR|Error|error:" "$logs/test_gpu_ltoir.log" | head -12 | cut -c1-220
