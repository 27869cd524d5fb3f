"""The mutation check's mutants (tests/mutations/run.py) still apply to this tree and name real tests.

A mutant whose pattern no longer occurs exactly once would test nothing; the GPU run of the check
(.ci/gpu/tests.sh) is where each must be caught.
"""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _runner():
    spec = importlib.util.spec_from_file_location("mutation_runner", ROOT / "tests" / "mutations" / "run.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


RUN = _runner()


@pytest.mark.parametrize("mutant", RUN.MUTANTS, ids=lambda m: m.name)
def test_mutant_applies_exactly_once_and_changes_the_tree(mutant, tmp_path):
    tree = tmp_path / "tree"
    RUN.copy_tree(tree)
    before = {path: (tree / path).read_text() for path, _, _ in mutant.edits}
    RUN.apply(tree, mutant)
    for path, text in before.items():
        assert (tree / path).read_text() != text, f"{mutant.name}: {path} unchanged"
    assert (ROOT / mutant.edits[0][0]).read_text() == before[mutant.edits[0][0]], "the source tree was touched"


@pytest.mark.parametrize("mutant", RUN.MUTANTS, ids=lambda m: m.name)
def test_mutant_names_existing_gpu_tests(mutant):
    assert mutant.tests, f"{mutant.name}: no tests to catch it"
    for node in mutant.tests:
        path, name = node.split("::")
        function = re.sub(r"\[.*\]$", "", name)
        source = (ROOT / path).read_text()
        assert re.search(rf"^def {function}\(", source, re.MULTILINE), f"{mutant.name}: {node} does not exist"
        assert "pytestmark = pytest.mark.gpu" in source, f"{mutant.name}: {path} is not a GPU test module"


def test_a_pattern_that_no_longer_occurs_is_an_error(tmp_path):
    tree = tmp_path / "tree"
    RUN.copy_tree(tree)
    stale = RUN.Mutant("stale", "nothing", (("kernels/blasdx/hopper/scheduler.cuh", "no such text", "x"),), ("t",))
    with pytest.raises(ValueError, match=r"^stale: kernels/blasdx/hopper/scheduler.cuh: the pattern occurs 0 times"):
        RUN.apply(tree, stale)
