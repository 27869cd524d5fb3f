"""Where the CUDA headers and blasdx's own templates are: the include path of every compile.

* the **kernels folder** (:func:`kernels_dir`, :func:`kernel_tree`): ``blasdx/*.cuh``, put
  first on the include path, and a digest of its content for cache keys;
* **header discovery** (:func:`include_dirs_for`): the CUDA headers a source includes
  (``cuda_fp16.h`` ..., ``crt/mma.h``, ``cuda/std/...``) are looked up in the pip wheels
  first, then a CUDA toolkit; a missing one is a :class:`~blasdx.base.errors.CompileError` naming
  every directory searched and the pip package that ships it.

Nothing here loads NVRTC or needs a GPU.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from ..base.errors import CompileError
from ..launch import cuda_modules as _cuda

__all__ = [
    "HeaderDir",
    "KernelTree",
    "default_header_search",
    "header_family",
    "include_dirs_for",
    "kernel_tree",
    "kernels_dir",
    "needed_headers",
]


# ---------------------------------------------------------------------------------------------
# the kernels folder
# ---------------------------------------------------------------------------------------------


def kernels_dir() -> Path:
    """The folder holding ``blasdx/*.cuh``: ``blasdx/kernels`` when installed, ``<repo>/kernels`` in a checkout."""
    package = Path(__file__).resolve().parent.parent
    for candidate in (package / "kernels", package.parent / "kernels"):
        if (candidate / "blasdx").is_dir():
            return candidate
    spec = importlib.util.find_spec("blasdx.kernels")
    for location in (spec.submodule_search_locations or []) if spec else []:
        if (Path(location) / "blasdx").is_dir():
            return Path(location)
    raise CompileError(
        "blasdx's CUDA templates (kernels/blasdx/*.cuh) are missing: looked in "
        f"{package / 'kernels'} and {package.parent / 'kernels'}; reinstall blasdx"
    )


@dataclass(frozen=True)
class KernelTree:
    """A snapshot of the kernels folder: content digest (for cache keys) and header texts."""

    root: Path
    digest: str
    texts: tuple[str, ...]
    folders: tuple[Path, ...]


_HEADER_SUFFIXES = (".cuh", ".cu", ".h", ".hpp", ".inl")
_trees: dict[Path, tuple[tuple[Any, ...], KernelTree]] = {}


def kernel_tree(root: Path | None = None) -> KernelTree:
    """Digest and texts of every file under ``root`` (default :func:`kernels_dir`), memoised on their stat."""
    root = kernels_dir() if root is None else Path(root)
    files = sorted(p for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
    signature = tuple((p, *_stat(p)) for p in files)
    cached = _trees.get(root)
    if cached is not None and cached[0] == signature:
        return cached[1]
    digest = hashlib.sha256()
    texts = []
    for p in files:
        data = p.read_bytes()
        digest.update(f"{p.relative_to(root).as_posix()}\0{len(data)}\0".encode() + data)
        if p.suffix in _HEADER_SUFFIXES:
            texts.append(data.decode(errors="replace"))
    folders = (root, *sorted({p.parent for p in files} - {root}))
    tree = KernelTree(root, digest.hexdigest(), tuple(texts), folders)
    _trees[root] = (signature, tree)
    return tree


def _stat(path: Path) -> tuple[int, int]:
    """(mtime_ns, size): what tells a changed file from an unchanged one."""
    st = path.stat()
    return (st.st_mtime_ns, st.st_size)


# ---------------------------------------------------------------------------------------------
# header discovery
# ---------------------------------------------------------------------------------------------

_PACKAGES = {
    "cudart": 'cuda-toolkit[cudart] (nvidia-cuda-runtime): pip install "cuda-toolkit[cudart]"',
    "crt": 'nvidia-cuda-crt: pip install "cuda-toolkit[crt]"',
    "cccl": 'nvidia-cuda-cccl: pip install "cuda-toolkit[cccl]"',
}
_INCLUDE = re.compile(r'^\s*#\s*include\s*[<"]([^>"]+)[>"]', re.MULTILINE)
_CUDART_EXTRA = frozenset({"mma.h", "device_types.h", "builtin_types.h", "driver_types.h", "channel_descriptor.h"})


@dataclass(frozen=True)
class HeaderDir:
    """One directory of the header search path and who proposed it (for error messages)."""

    path: Path
    origin: str

    def __str__(self) -> str:
        return f"{self.path} ({self.origin})"


def header_family(name: str) -> str | None:
    """Which pip package family ships the CUDA header ``name``; None for anything else."""
    if name.startswith("crt/"):
        return "crt"
    if name.startswith(("cuda/", "nv/", "cub/", "thrust/")):
        return "cccl"
    if name in _CUDART_EXTRA or (
        name.startswith(("cuda_", "vector_", "cooperative_groups", "sm_")) and name.endswith((".h", ".hpp"))
    ):
        return "cudart"
    return None


def _implied_headers(name: str) -> tuple[tuple[str, bool], ...]:
    """Headers that ``name`` pulls in, as (header, required): ``mma.h`` needs ``crt/mma.h``."""
    if name == "mma.h":
        return (("crt/mma.h", True),)
    if header_family(name) == "cudart":
        return (("nv/target", False),)  # NVRTC has a built-in copy; use the wheel's when present
    return ()


def _pathfinder_dirs() -> list[HeaderDir]:
    """Header folders cuda.pathfinder finds (pip wheels, conda, CUDA_HOME), when it can."""
    try:
        pathfinder = _cuda.pathfinder()
    except ImportError:  # pragma: no cover - cuda-pathfinder is a dependency
        return []
    find = getattr(pathfinder, "find_nvidia_header_directory", None)
    if find is None:  # pragma: no cover - very old cuda-pathfinder
        return []
    out = []
    for libname in ("cudart", "nvrtc", "crt", "cccl"):
        try:
            found = find(libname)
        except Exception:  # unknown libname in this version, or nothing installed
            continue
        if found:
            out.append(HeaderDir(Path(found), f"cuda.pathfinder {libname}"))
    return out


def _toolkit_dirs(root: str | Path, origin: str) -> list[HeaderDir]:
    """``<root>/include`` and ``<root>/include/cccl`` of a CUDA toolkit."""
    include = Path(root) / "include"
    return [HeaderDir(include, origin), HeaderDir(include / "cccl", origin)]


def default_header_search() -> tuple[HeaderDir, ...]:
    """Where headers are looked for, in order: cuda.pathfinder, $CUDA_HOME, $CUDA_PATH, /usr/local/cuda."""
    candidates = _pathfinder_dirs()
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(var):
            candidates += _toolkit_dirs(os.environ[var], f"${var}")
    candidates += _toolkit_dirs("/usr/local/cuda", "default toolkit location")
    seen: set[Path] = set()
    unique = []
    for c in candidates:
        key = c.path.resolve() if c.path.exists() else c.path
        if key not in seen:
            seen.add(key)
            unique.append(c)
    return tuple(unique)


@lru_cache(maxsize=4096)
def _has_header(directory: Path, name: str) -> bool:
    """Whether ``directory/name`` is a file (memoised: header folders do not change under us)."""
    return (directory / name).is_file()


def needed_headers(texts: Iterable[str], local_dirs: Sequence[Path] = ()) -> dict[str, bool]:
    """CUDA headers the texts include (and what those imply) -> whether each is required."""
    needed: dict[str, bool] = {}
    for text in texts:
        for name in _INCLUDE.findall(text):
            if header_family(name) is None or any(_has_header(d, name) for d in local_dirs):
                continue
            needed[name] = True
            for implied, required in _implied_headers(name):
                needed[implied] = needed.get(implied, False) or required
    return needed


def include_dirs_for(
    texts: Iterable[str], search: Sequence[HeaderDir] | None = None, local_dirs: Sequence[Path] = ()
) -> list[Path]:
    """Directories that supply the CUDA headers ``texts`` include, in search order.

    Each header is taken from the first directory that has it; every directory that
    supplies one is returned. A required header found nowhere raises CompileError.
    """
    search = default_header_search() if search is None else tuple(search)
    needed = needed_headers(texts, local_dirs)
    chosen: list[Path] = []
    missing = []
    for name, required in sorted(needed.items()):
        home = next((d.path for d in search if _has_header(d.path, name)), None)
        if home is None:
            if required:
                missing.append(name)
        elif home not in chosen:
            chosen.append(home)
    if missing:
        raise CompileError(_missing_headers_message(missing, search))
    order = {d.path: i for i, d in enumerate(search)}
    return sorted(chosen, key=order.__getitem__)


def _missing_headers_message(missing: Sequence[str], search: Sequence[HeaderDir]) -> str:
    """Which headers are missing, where we looked, and which pip package ships each."""
    lines = ["CUDA headers not found, so NVRTC cannot compile this source:"]
    for name in missing:
        lines.append(f"  {name}: install {_PACKAGES[header_family(name) or 'cudart']}")
    lines.append("Searched, in order:")
    lines += [f"  {d}" for d in search] or ["  (no directories: cuda.pathfinder found none, CUDA_HOME is unset)"]
    lines.append("Install the packages named above, or set CUDA_HOME to a CUDA toolkit that has them.")
    return "\n".join(lines)
