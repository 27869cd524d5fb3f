"""The package's structure, read from its source with ast: layers that import downwards only, no import
circle, a pure descriptor layer, and the facades' names still answer.

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

#: The layers from the ground up: a module may import its own layer and the layers below it only.
#: The package root's own modules (__init__, __main__) sit above every layer.
LAYERS = ["base", "plan", "describe", "codegen", "launch", "compile", "arrays", "run", "engine", "fusion", "calls",
          "numba", "reference"]
ROOT_TOP = {"__init__", "__main__"}
MAX_MODULES = 12


def module_names() -> list[str]:
    """Every blasdx module as a dotted name below ``blasdx`` (``run.execute``, ``errors``, ``arrays``)."""
    names = []
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = list(path.relative_to(PACKAGE).with_suffix("").parts)
        if parts[-1] == "__init__" and len(parts) > 1:
            parts = parts[:-1]
        names.append(".".join(parts))
    return names


MODULES = module_names()


def _path_of(name: str) -> Path:
    base = PACKAGE.joinpath(*name.split("."))
    return base / "__init__.py" if base.is_dir() else base.with_suffix(".py")


def _is_package(name: str) -> bool:
    return PACKAGE.joinpath(*name.split(".")).is_dir()


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _resolve(importer: str, level: int, module: str | None) -> list[str]:
    """The dotted base a relative ``from`` import names, seen from ``importer``."""
    package = importer.split(".") if _is_package(importer) else importer.split(".")[:-1]
    if importer in ("__init__", "__main__"):
        package = []
    base = package[: len(package) - (level - 1)] if level > 1 else package
    return base + (module.split(".") if module else [])


def _imports(tree: ast.AST, importer: str = "__main__") -> set[str]:
    """blasdx modules imported anywhere in ``tree`` except under ``if TYPE_CHECKING:`` (dotted, below blasdx)."""
    found: set[str] = set()

    def add(parts: list[str], names: list[str]) -> None:
        for name in names:  # from X import name: name may be a module of X
            dotted = ".".join(parts + [name])
            if dotted in MODULES:
                found.add(dotted)
            elif parts:
                found.add(".".join(parts))

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.ImportFrom):
            names = [alias.name for alias in node.names]
            if node.level >= 1:
                add(_resolve(importer, node.level, node.module), names)
            elif node.module and node.module.split(".")[0] == "blasdx":
                add(node.module.split(".")[1:], names)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                if parts[0] == "blasdx":
                    found.add(".".join(parts[1:]) or "__init__")
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


def import_graph() -> dict[str, set[str]]:
    """module -> the blasdx modules it imports (names that are not modules are dropped)."""
    graph = {}
    for name in MODULES:
        tree = ast.parse(_path_of(name).read_text())
        graph[name] = {m for m in _imports(tree, name) if m in MODULES or m == "__init__"} - {name}
    return graph


def layer_of(module: str) -> int:
    """The rank of a module's layer (LAYERS index); the root's top modules rank above every layer."""
    head = module.split(".")[0]
    if head in ROOT_TOP:
        return len(LAYERS)
    return LAYERS.index(head)


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
        "from ..base import dtypes\nfrom ..plan.heuristics import x\nimport blasdx.base.errors\nfrom blasdx import arrays\n"
        "def f():\n    from ..compile import cache\n"
        "if TYPE_CHECKING:\n    from ..describe.descriptor import z\nelse:\n    from .view import w\n"
    )
    assert _imports(tree, "arrays.streams") == {"base.dtypes", "plan.heuristics", "base.errors", "arrays",
                                                "compile.cache", "arrays.view"}


def test_find_cycle_finds_one():
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": set()}) is None


def test_every_module_lives_in_a_layer_and_every_layer_says_its_job():
    for name in MODULES:
        assert name.split(".")[0] in set(LAYERS) | ROOT_TOP, f"{name} is in no layer of LAYERS"
    for layer in LAYERS:
        if _is_package(layer):
            doc = ast.get_docstring(ast.parse(_path_of(layer).read_text()))
            assert doc and len(doc) > 40, f"blasdx/{layer}/__init__.py needs a docstring that says its job"
            size = len(list(PACKAGE.joinpath(layer).glob("*.py"))) - 1
            assert size <= MAX_MODULES, f"blasdx/{layer} holds {size} modules (at most {MAX_MODULES})"


def test_no_module_imports_a_layer_above_its_own():
    graph = import_graph()
    upward = sorted(f"{a} -> {b}" for a, deps in graph.items() for b in deps
                    if b != "__init__" and layer_of(b) > layer_of(a))
    assert upward == []


def test_no_import_circle_in_the_package():
    graph = import_graph()
    assert find_cycle(graph) is None, " -> ".join(find_cycle(graph) or [])


def test_no_import_circle_counting_type_checking_imports():
    """Annotations too point down only: a circle through them would still be one to a reader."""
    graph = {}
    for name in MODULES:
        tree = ast.parse(_path_of(name).read_text())
        for node in ast.walk(tree):  # lift TYPE_CHECKING bodies into the module
            if isinstance(node, ast.If) and _is_type_checking(node):
                node.test = ast.Constant(True)
        graph[name] = {m for m in _imports(tree, name) if m in MODULES} - {name}
    assert find_cycle(graph) is None, " -> ".join(find_cycle(graph) or [])


def test_descriptor_reaches_the_runtime_only_through_the_backend():
    graph = import_graph()
    for name in ("describe.descriptor", "describe.trsm"):
        assert all(layer_of(m) <= LAYERS.index("describe") for m in graph[name]), graph[name]
    assert "describe.backend" in graph["describe.descriptor"]
    assert graph["describe.backend"] == set()


def test_runtime_reaches_no_module_that_imports_the_descriptor():
    """The descriptor's one way up leads to code generation, the cache and the launch, never back."""
    graph = import_graph()
    seen, todo = set(), ["run.runtime"]
    while todo:
        node = todo.pop()
        for nxt in graph[node] - seen:
            seen.add(nxt)
            todo.append(nxt)
    assert "describe.descriptor" not in seen
    assert {"codegen.sources", "compile.cache", "run.execute"} <= seen


@pytest.mark.parametrize(
    "module, names",
    [
        ("blasdx.compile", ["CompileOptions", "CompiledKernel", "DEFAULT_OPTIONS", "HeaderDir", "ResourceUsage",
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


HEAVY = ("cuda.core", "cuda.bindings", "numpy", "ml_dtypes", "blasdx.arrays", "blasdx.run.execute", "blasdx.fusion.kernel",
         "blasdx.calls.matmul")


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
    assert "blasdx.calls.matmul" in loaded and "cuda.core" not in loaded
    import blasdx as bx

    assert set(bx.__all__) <= set(dir(bx))
    for name in bx.__all__:
        assert getattr(bx, name) is not None
    with pytest.raises(AttributeError, match="module 'blasdx' has no attribute 'nothing'"):
        bx.nothing  # noqa: B018


def test_every_subpackage_ships():
    """pyproject.toml names its packages one by one: a subpackage missing there would be left out of the wheel."""
    tomllib = pytest.importorskip("tomllib")
    listed = set(tomllib.loads((PACKAGE.parent / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    found = {"blasdx"} | {f"blasdx.{name}" for name in MODULES if _is_package(name)}
    assert found - listed == set()
