"""The resumable GPU-suite job (.ci/gpu/suite.sh with tests/conftest.py's ``--skip-ids``), run on the CPU.

On a machine without a GPU the GPU tests of a file are collected and skipped, which the job counts as
finished: its ``done.txt`` lists them, and a second call given that file selects none of them.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import listed_ids
from .gpu_support import gpu_sm

ROOT = Path(__file__).resolve().parent.parent
FILE = "tests/test_gpu_graphs.py"


def _collected(*options: str) -> list[str]:
    found = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-n0", "-p", "no:cacheprovider",
                            "-m", "gpu", *options, FILE], cwd=ROOT, capture_output=True, text=True, check=False)
    return [line for line in found.stdout.splitlines() if line.startswith("tests/")]


def test_skip_ids_deselects_exactly_the_listed_tests(tmp_path):
    every = _collected()
    assert len(every) >= 3
    listed = tmp_path / "done.txt"
    listed.write_text("\n".join(every[:2]) + "\n\n" + "tests/not_a_file.py::nothing\n")
    assert listed_ids(str(listed)) == {*every[:2], "tests/not_a_file.py::nothing"}
    assert _collected("--skip-ids", str(listed)) == every[2:]
    assert _collected("--skip-ids", str(tmp_path / "missing.txt")) == every  # no file: nothing listed


@pytest.mark.skipif(gpu_sm() is not None, reason="on a GPU the file's tests run rather than skip")
@pytest.mark.parametrize("workers", ["0", "2"])
def test_the_job_lists_what_it_finished_and_the_next_call_runs_the_rest(tmp_path, workers):
    env = {**os.environ, "LOGS": str(tmp_path), "TESTS": FILE, "WORKERS": workers, "SECS": "120",
           "PYTHONPATH": str(ROOT), "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    env.pop("BLASDX_CACHE_DIR", None)
    first = subprocess.run(["bash", ".ci/gpu/suite.sh"], cwd=ROOT, env=env, capture_output=True, text=True,
                           check=False)
    done = tmp_path / "done.txt"
    assert first.returncode == 0, first.stdout + first.stderr
    assert sorted(listed_ids(str(done))) == sorted(_collected()), first.stdout
    second = subprocess.run(["bash", ".ci/gpu/suite.sh"], cwd=ROOT, env={**env, "DONE": str(done)},
                            capture_output=True, text=True, check=False)
    assert second.returncode == 5, second.stdout  # pytest: every test deselected, none run
    assert sorted(listed_ids(str(done))) == sorted(_collected()), "the second call keeps what the first finished"
