"""The package's structure, read from its source with ast: no import circle, a pure descriptor layer,
and the old module names still answer.

An edge ``a -> b`` is any import of blasdx module ``b`` written in module ``a``, at its top
or inside a function (a lazy import is still a dependency); imports under
``if TYPE_CHECKING:`` are for annotations only and are left out.
"""

from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "blasdx"
MODULES = sorted(p.stem for p in PACKAGE.glob("*.py") if p.stem not in ("__init__", "__main__"))


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST) -> set[str]:
    """blasdx modules imported anywhere in ``tree`` except under ``if TYPE_CHECKING:``."""
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.ImportFrom):
            if node.level == 1 and node.module is None:  # from . import x, y
                found.update(alias.name for alias in node.names)
            elif node.level == 1:  # from .x import y
                found.add(node.module.split(".")[0])
            elif node.level == 0 and node.module and node.module.split(".")[0] == "blasdx":
                parts = node.module.split(".")
                if len(parts) > 1:
                    found.add(parts[1])
                else:  # from blasdx import x
                    found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                if parts[0] == "blasdx":
                    found.add(parts[1] if len(parts) > 1 else "__init__")
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


def import_graph() -> dict[str, set[str]]:
    """module -> the blasdx modules it imports (package-level names that are not modules are dropped)."""
    graph = {}
    for name in MODULES + ["__init__", "__main__"]:
        tree = ast.parse((PACKAGE / f"{name}.py").read_text())
        graph[name] = {m for m in _imports(tree) if m in MODULES or m == "__init__"} - {name}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle of ``graph`` as a list of modules (first == last), or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def dfs(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state:
                found = dfs(nxt)
                if found:
                    return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            found = dfs(node)
            if found:
                return found
    return None


def test_the_graph_reader_sees_lazy_imports_and_skips_type_checking():
    tree = ast.parse(
        "from . import a\nfrom .b import x\nimport blasdx.c\nfrom blasdx import d\n"
        "def f():\n    from .e import y\n"
        "if TYPE_CHECKING:\n    from .f import z\nelse:\n    from .g import w\n"
    )
    assert _imports(tree) == {"a", "b", "c", "d", "e", "g"}


def test_find_cycle_finds_one():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None


def test_no_import_circle_in_the_package():
    graph = import_graph()
    assert find_cycle(graph) is None, " -> ".join(find_cycle(graph) or [])


VALUE_LAYER = {"errors", "dtypes", "schemes", "operators", "heuristics", "descriptor"}


def test_descriptor_is_a_value_layer_with_one_way_up():
    graph = import_graph()
    assert graph["descriptor"] <= VALUE_LAYER | {"runtime"}, graph["descriptor"]
    for name in VALUE_LAYER - {"descriptor"}:
        assert graph[name] <= VALUE_LAYER, (name, graph[name] - VALUE_LAYER)
    assert "descriptor" not in graph["operators"]


def test_runtime_reaches_no_module_that_imports_the_descriptor():
    """The descriptor's one way up leads to code generation, the cache and the launch, never back."""
    graph = import_graph()
    seen, todo = set(), ["runtime"]
    while todo:
        node = todo.pop()
        for nxt in graph[node] - seen:
            seen.add(nxt)
            todo.append(nxt)
    assert "descriptor" not in seen
    assert {"codegen", "cache", "execute"} <= seen


@pytest.mark.parametrize(
    "module, names",
    [
        ("blasdx.compiler", ["CompileOptions", "CompiledKernel", "DEFAULT_OPTIONS", "HeaderDir", "ResourceUsage",
                             "compile_source", "default_header_search", "find_cuobjdump", "include_dirs_for",
                             "kernel_names", "kernel_tree", "kernels_dir", "nvrtc_version", "resource_usage",
                             "run_cuobjdump", "stats", "check_arch", "check_kernel_name",
                             "DEFAULT_DYNAMIC_SHARED_MEMORY_LIMIT"]),
        ("blasdx.arrays", ["ArrayView", "DeviceArray", "as_array", "array_dtype", "stream_handle", "resolve_stream",
                           "default_stream_handle", "core_stream", "as_core_stream", "wait_for_producers",
                           "pointer_device_id", "current_device_id", "to_device", "from_device", "make_capsule",
                           "read_capsule", "KDL_CPU", "KDL_CUDA", "LEGACY_STREAM", "PER_THREAD_STREAM",
                           "_ADAPTERS", "_span", "_library_of", "_LIVE", "_dl_code_of", "_dl_dtype",
                           "_DEFAULT_STREAM", "_TORCH_STREAM", "_CUPY_STREAM"]),
    ],
)
def test_old_module_names_still_answer(module, names):
    loaded = importlib.import_module(module)
    missing = [n for n in names if not hasattr(loaded, n)]
    assert missing == []


def test_operators_compose_into_descriptors():
    import blasdx as bx

    desc = bx.Size(8, 8, 8) + bx.Function.MM
    assert isinstance(desc, bx.Descriptor) and desc == bx.Function.MM + bx.Size(8, 8, 8)


HEAVY = ("cuda.core", "cuda.bindings", "numpy", "ml_dtypes", "blasdx.arrays", "blasdx.execute", "blasdx.fusion",
         "blasdx.array_gemm")


def _loaded_after(code: str) -> list[str]:
    """The HEAVY modules a fresh interpreter has loaded after running ``code``."""
    probe = code + "\nimport sys\nprint(','.join(sorted(m for m in sys.modules if m.startswith(HEAVY))))\n"
    done = subprocess.run([sys.executable, "-c", f"HEAVY = {HEAVY!r}\n" + probe], capture_output=True, text=True,
                          check=True, cwd=PACKAGE.parent)
    return [m for m in done.stdout.strip().split(",") if m]


def test_import_loads_only_the_value_layer():
    """``import blasdx`` and describing a GEMM load no cuda-python module, no numpy and no launch or array code."""
    assert _loaded_after("import blasdx as bx\nd = bx.Size(8, 8, 8) + bx.Precision(bx.float16) + bx.SM(80)\n"
                         "d = d + bx.Function.MM + bx.Block()\nd.validate(); d.suggested_block_dim") == []


def test_lazy_public_names_load_their_modules():
    loaded = _loaded_after("import blasdx as bx\nbx.matmul")
    assert "blasdx.array_gemm" in loaded and "cuda.core" not in loaded
    import blasdx as bx

    assert set(bx.__all__) <= set(dir(bx))
    for name in bx.__all__:
        assert getattr(bx, name) is not None
    with pytest.raises(AttributeError, match="module 'blasdx' has no attribute 'nothing'"):
        bx.nothing  # noqa: B018
