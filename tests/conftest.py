"""Fixtures and settings shared by the CPU tests: one kernel cache per run, the parallel workers, the encoder.

Without a GPU, every run of the suite compiles into a fresh kernel cache folder of its own (not
the user's ``~/.cache/blasdx``), shared by all of its workers: a kernel one test compiles is a
disk hit for every other test of the run, and no entry from an earlier run (made by other code)
can stand in for a compile. ``-n auto`` (pyproject's addopts) runs one worker per core where no
GPU is visible; with a GPU, or with ``-m gpu`` / ``-m multigpu``, the tests run in one process,
since they share the device.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from blasdx.calls import matmul as array_gemm

from blasdx.launch import cuda_driver

from .tma_rules import FakeEncoder

#: The cache folder this process made (and removes at the end); workers inherit the variable.
_owned = pytest.StashKey[str]()


def _gpu_run(config: pytest.Config) -> bool:
    """Whether this run selects the GPU tests (``-m gpu`` / ``-m multigpu``) or has a GPU to run them on."""
    marks = config.getoption("markexpr", "") or ""
    if "gpu" in marks.replace("not gpu", ""):
        return True
    from .gpu_support import gpu_sm

    return gpu_sm() is not None


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto``: a worker per core on a machine without a GPU; none (one process) for GPU runs."""
    return 0 if _gpu_run(config) else (os.cpu_count() or 1)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--skip-ids", metavar="FILE", default=None,
                     help="deselect the test ids FILE lists, one a line (a missing FILE lists none): a run cut "
                          "short goes on from the ids it finished (.ci/gpu/suite.sh)")


def listed_ids(path: str | None) -> set[str]:
    """The test ids a ``--skip-ids`` file lists (none for no file or a missing one)."""
    if not path or not Path(path).is_file():
        return set()
    return {line.strip() for line in Path(path).read_text().splitlines() if line.strip()}


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The order in which the workers take the test files (``--dist loadfile --no-loadscope-reorder``: a file goes
    to one worker, so that its module fixtures, the compile matrices, are built once): the files that compile the
    most (most tests marked slow) first, then by size, so that no long file starts last. Tests ``--skip-ids``
    lists are deselected."""
    done = listed_ids(config.getoption("skip_ids"))
    if done:
        config.hook.pytest_deselected(items=[item for item in items if item.nodeid in done])
        items[:] = [item for item in items if item.nodeid not in done]
    files: dict[str, list[pytest.Item]] = {}
    for item in items:
        files.setdefault(item.nodeid.split("::", 1)[0], []).append(item)
    order = sorted(files.values(), key=lambda tests: (-sum(bool(i.get_closest_marker("slow")) for i in tests),
                                                      -len(tests)))
    items[:] = [item for tests in order for item in tests]


def pytest_configure(config: pytest.Config) -> None:
    """Point BLASDX_CACHE_DIR at a fresh folder for this run (xdist workers, started later, inherit it). GPU runs
    with ``-n`` spread the tests one by one (``--dist load``): they share the device, not compiled matrices."""
    if getattr(config.option, "dist", "no") == "loadfile" and _gpu_run(config):
        config.option.dist = "load"
    if os.environ.get("BLASDX_CACHE_DIR"):  # the caller (or the xdist controller) chose a folder: keep it
        return
    from .gpu_support import gpu_sm

    if gpu_sm() is not None:  # GPU runs keep the user's cache: the compiles of earlier runs serve them
        return
    folder = tempfile.mkdtemp(prefix="blasdx-test-cache-")
    config.stash[_owned] = folder
    os.environ["BLASDX_CACHE_DIR"] = folder


def pytest_unconfigure(config: pytest.Config) -> None:
    """Remove the run's cache folder, in the process that made it."""
    folder = config.stash.get(_owned, None)
    if folder is not None:
        shutil.rmtree(folder, ignore_errors=True)
        os.environ.pop("BLASDX_CACHE_DIR", None)


@pytest.fixture
def fresh_cache(tmp_path, monkeypatch) -> Path:
    """A test of its own kernel cache: an empty cache folder (returned), nothing in memory, zeroed counters."""
    from blasdx.compile import cache

    root = tmp_path / "cache"
    monkeypatch.setenv("BLASDX_CACHE_DIR", str(root))
    monkeypatch.delenv("BLASDX_CACHE", raising=False)
    monkeypatch.delenv("BLASDX_DUMP", raising=False)
    cache.clear_memory_cache()
    cache.stats.reset()
    yield root
    cache.clear_memory_cache()


@pytest.fixture(scope="session")
def build_dir(tmp_path_factory) -> Iterator[Path]:
    """This process's host-emulation builds (tests/host_emulation.py), shared by its test modules; the
    precompiled headers (some 50 MB each) go at the end, the sources and programs stay for a look."""
    folder = tmp_path_factory.mktemp("emulation")
    yield folder
    for headers in folder.glob("pch-*"):
        shutil.rmtree(headers, ignore_errors=True)


@pytest.fixture
def encoder(monkeypatch) -> FakeEncoder:
    """The driver's tensor-map encoder replaced by a FakeEncoder, with no call plan remembered from other tests."""
    fake = FakeEncoder()
    monkeypatch.setattr(cuda_driver, "encode_tiled", fake)
    array_gemm._CALLS.clear()
    return fake


def pytest_sessionfinish(session, exitstatus) -> None:
    """With $BLASDX_MARGINS_JSON set, write how close each passed element-wise check came to its bound
    (reference.MARGINS: what, worst error / bound) there, one file per pytest-xdist worker."""
    import json
    import os

    from blasdx.reference import MARGINS

    path = os.environ.get("BLASDX_MARGINS_JSON")
    if path and MARGINS:
        worker = os.environ.get("PYTEST_XDIST_WORKER")
        with open(f"{path}.{worker}" if worker else path, "w") as f:
            json.dump(MARGINS, f)
