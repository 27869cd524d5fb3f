#!/usr/bin/env bash
# blasdx GEMMs inside kernels of other JITs: LTO-IR entry points linked with cuda.core, and the
# Numba bridge (blasdx.numba). Runs from the repo root with $LOGS set; carried wheels give
# numba-cuda a numpy it imports under, and nvmath-python its libmathdx.
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl && export PYTHONPATH=$PWD:/tmp/site LD_LIBRARY_PATH=/tmp/site/nvidia/cu13/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
set -uo pipefail
logs="${LOGS:-gpu-logs}"; mkdir -p "$logs"
export BLASDX_CACHE_DIR="${BLASDX_CACHE_DIR:-/tmp/blasdx-cache-numba}" PYTHONUNBUFFERED=1
budget="${NUMBA_JOB_SECONDS:-60}"
start=$SECONDS
left() { echo $(( budget - (SECONDS - start) - 3 )); }

python3 - > "$logs/env.txt" 2>&1 <<'PY'
import importlib, sys
print(sys.version)
for name in ("numpy", "numba", "numba.cuda", "cuda.core", "nvmath"):
    try:
        module = importlib.import_module(name)
        print(name, getattr(module, "__version__", "?"), getattr(module, "__file__", ""))
    except Exception as exc:
        print(name, "FAILED", type(exc).__name__, exc)
try:
    from cuda.bindings import nvjitlink
    print("nvjitlink", nvjitlink.version())
except Exception as exc:
    print("nvjitlink FAILED", exc)
PY
echo "=== environment"; cat "$logs/env.txt" | cut -c1-160

if ls tests/test_gpu_numba*.py >/dev/null 2>&1; then
  timeout "$(( $(left) / 2 ))" python3 -m pytest -m gpu -q -x -p no:cacheprovider -n 8 tests/test_gpu_numba*.py \
    > "$logs/test_gpu_numba.log" 2>&1
  echo "=== test_gpu_numba exit $? ($((SECONDS - start)) s)"; tail -n 15 "$logs/test_gpu_numba.log" | cut -c1-200
fi

timeout "$(left)" python3 -m pytest -m gpu -q -p no:cacheprovider -n 8 tests/test_gpu_ltoir.py \
  > "$logs/test_gpu_ltoir.log" 2>&1
echo "=== test_gpu_ltoir exit $? ($((SECONDS - start)) s)"; tail -n 15 "$logs/test_gpu_ltoir.log" | cut -c1-200
