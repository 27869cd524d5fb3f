#!/usr/bin/env bash
# budget: 590
# The whole GPU suite (-m gpu), verbose, in calls that go on from each other: the ids a call passed or skipped
# are added to $LOGS/done.txt; a later call with DONE=<that file, carried back into the tree> runs the rest
# (tests/conftest.py --skip-ids). The Numba tests run under the carried numpy wheel when .whl/ holds one.
# Run from the repository root with PYTHONPATH=.; SECS (default 560) cuts pytest, WORKERS (15) its processes,
# TESTS (tests) what it collects.
set -uo pipefail
: "${LOGS:=gpu-logs/suite}"; mkdir -p "$LOGS"
if compgen -G ".whl/*.whl" > /dev/null; then . .ci/numba-site; fi
skip=(); if [ -n "${DONE:-}" ] && [ -e "$DONE" ]; then skip=(--skip-ids "$DONE"); fi
timeout "${SECS:-560}" python3 -m pytest -m gpu -n "${WORKERS:-15}" -v -rfE -p no:cacheprovider "${skip[@]}" ${TESTS:-tests} \
  > "$LOGS/suite.log" 2>&1
rc=$?
# finished ids: "[gw3] [ 10%] PASSED tests/..." with workers, "tests/... PASSED [ 10%]" without
{ if [ ${#skip[@]} -gt 0 ]; then cat "$DONE"; fi
  grep -oE "(PASSED|SKIPPED|XFAIL) tests/[^ ]+" "$LOGS/suite.log" | cut -d' ' -f2
  grep -oE "^tests/[^ ]+ (PASSED|SKIPPED|XFAIL)" "$LOGS/suite.log" | cut -d' ' -f1; } | sort -u > "$LOGS/done.new"
mv "$LOGS/done.new" "$LOGS/done.txt"  # DONE may be this very file
grep -E "(FAILED|ERROR) tests/|^tests/[^ ]+ (FAILED|ERROR)" "$LOGS/suite.log" | head -40
tail -n 3 "$LOGS/suite.log"
echo "suite: rc=$rc ($([ $rc -eq 124 ] && echo "cut at ${SECS:-560} s: run again with DONE=$LOGS/done.txt" || echo done)), $(wc -l < "$LOGS/done.txt") ids finished"
exit $rc
