"""The documentation builds without a warning, and names every public name, trait and layer (CPU only).

Runs Sphinx (a test extra) the way the README's docs command does, with ``-W``: a broken
reference, an unclosed literal or a docstring read as a substitution fails the build.
"""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import pytest

import blasdx as bx

from .test_structure import LAYERS

REPO = Path(__file__).resolve().parent.parent
DOCS = REPO / "docs"

#: The descriptor traits of the design's contract, each of which the API page documents.
TRAITS = (
    "size", "m", "n", "k", "precision", "a_value_type", "b_value_type", "c_value_type", "type", "function",
    "arrangement", "leading_dimension", "alignment", "sm", "block_dim", "suggested_block_dim",
    "max_threads_per_block", "suggested_leading_dimension", "suggested_alignment", "shared_memory_size", "a_size",
    "b_size", "c_size", "a_dim", "b_dim", "c_dim", "instruction", "suggested_smem_layout_a",
    "suggested_smem_layout_b", "suggested_smem_layout_c", "is_complete", "is_supported", "validate",
)


@pytest.fixture(scope="module")
def inventory(tmp_path_factory) -> set[str]:
    """Build the HTML docs with warnings as errors; the names of every documented Python object."""
    pytest.importorskip("sphinx")
    pytest.importorskip("myst_parser")
    from sphinx.cmd.build import build_main
    from sphinx.util.inventory import InventoryFile

    out = tmp_path_factory.mktemp("docs")
    with warnings.catch_warnings():  # Sphinx's own deprecations of its extension API, not the docs' warnings
        warnings.simplefilter("ignore", DeprecationWarning)
        warnings.simplefilter("ignore", PendingDeprecationWarning)
        status = build_main(["-b", "html", "-W", "--keep-going", "-q", "-E", str(DOCS), str(out)])
    assert status == 0, "sphinx-build -W failed: see the warnings above"
    with open(out / "objects.inv", "rb") as handle:
        loaded = InventoryFile.load(handle, "", lambda base, uri: uri)
    return {name for kind, entries in loaded.items() if kind.startswith("py:") for name in entries}


def test_every_public_name_is_documented(inventory):
    missing = [name for name in bx.__all__ if f"blasdx.{name}" not in inventory
               and not any(entry.endswith(f".{name}") for entry in inventory)]
    assert missing == []


@pytest.mark.parametrize("cls", ["Descriptor", "TrsmDescriptor"])
def test_every_trait_is_documented(inventory, cls):
    own = {"TrsmDescriptor": ("side", "fill_mode", "diag", "batches_per_block")}.get(cls, ())
    expected = TRAITS if cls == "Descriptor" else own
    assert [t for t in expected if f"blasdx.{cls}.{t}" not in inventory] == []


def test_device_gemm_is_documented(inventory):
    assert {"blasdx.DeviceGemm", "blasdx.DeviceGemm.for_problem", "blasdx.DeviceGemm.grid"} <= inventory


def test_the_layer_page_draws_every_layer_in_order():
    """The figure lists the layers top-down in the order tests/test_structure.py enforces bottom-up."""
    text = (DOCS / "layers.md").read_text()
    figure = text.split("```text", 1)[1].split("```", 1)[0]
    found = [m[1] for m in re.finditer(r"^ \| (\w+)/", figure, re.M)]
    assert list(reversed(found)) == LAYERS
    for package in LAYERS:
        modules = sorted(p.stem for p in (REPO / "blasdx" / package).glob("*.py") if p.stem != "__init__")
        box = figure.split(f"| {package}/", 1)[1].split("+---", 1)[0]
        assert [m for m in modules if m not in box] == [], package


def test_the_readme_says_how_to_build_the_docs():
    readme = (REPO / "README.md").read_text()
    assert "python -m sphinx -W -b html docs docs/_build" in readme


def _cited_result_files() -> tuple[set[str], list[tuple[str, str]]]:
    """Files under benchmarks/results/ that the docs and README name, and the names on the performance
    pages that match no file (other pages may name results a benchmark has yet to write)."""
    results = REPO / "benchmarks" / "results"
    files = {p.relative_to(results).as_posix() for p in results.rglob("*") if p.is_file()}
    cited: set[str] = set()
    unresolved = []
    for page in [*sorted(DOCS.glob("*.md")), REPO / "README.md"]:
        for match in re.finditer(r"[\w./*-]+\.(?:json|png)\b", page.read_text()):
            name = match.group(0).split("benchmarks/results/")[-1]
            hits = {f for f in files if Path(f).match(name) and ("/" in name) == ("/" in f)}
            if not hits and page.name.startswith("performance"):
                unresolved.append((page.name, match.group(0)))
            cited |= hits
    return cited, unresolved


def test_every_result_file_is_cited_and_every_citation_exists():
    """benchmarks/results/ holds what the pages cite (current tables; experiment rounds under history/)."""
    cited, unresolved = _cited_result_files()
    results = REPO / "benchmarks" / "results"
    files = {p.relative_to(results).as_posix() for p in results.rglob("*") if p.is_file()}
    assert unresolved == []
    assert sorted(files - cited) == []
