"""The identity of the linker that decides a kept linked cubin (blasdx.compile.ltoir.linker_identity)."""

from __future__ import annotations

import os
import types

import pytest

from blasdx.compile import ltoir as _ltoir
from blasdx.compile import nvrtc as _nvrtc

WHEELS = {"nvidia_nvjitlink": "13.0.88", "nvidia_nvvm": "13.0.88", "cuda_core": "1.2.0"}


def _pathfinder(monkeypatch, files: dict[str, str]) -> None:
    """cuda.pathfinder's loader answering ``files`` ({library: path}); other names are not found."""
    import cuda.pathfinder

    def load(name):
        if name not in files:
            raise RuntimeError(f"{name} not found")
        return types.SimpleNamespace(abs_path=files[name])

    monkeypatch.setattr(cuda.pathfinder, "load_nvidia_dynamic_lib", load)


def test_wheels_name_the_linker(monkeypatch):
    monkeypatch.setattr(_nvrtc, "_wheel_versions", lambda names: dict(WHEELS))
    assert _ltoir.linker_identity() == "nvidia_nvjitlink 13.0.88 nvidia_nvvm 13.0.88 cuda_core 1.2.0"


def test_a_toolkit_nvvm_is_named_by_its_file(monkeypatch, tmp_path):
    """NVVM from a CUDA toolkit (no wheel): the file's path, size and time name it, and a new file changes
    the identity, so cubins linked by another NVVM are never taken."""
    pytest.importorskip("cuda.pathfinder")
    library = tmp_path / "libnvvm.so.4"
    library.write_bytes(b"x" * 10)
    wheels = {k: v for k, v in WHEELS.items() if k != "nvidia_nvvm"}
    monkeypatch.setattr(_nvrtc, "_wheel_versions", lambda names: dict(wheels))
    _pathfinder(monkeypatch, {"nvvm": str(library)})
    first = _ltoir.linker_identity()
    assert first is not None and f"nvvm {library} 10 " in first and "nvidia_nvjitlink 13.0.88" in first
    library.write_bytes(b"y" * 11)
    os.utime(library, ns=(1, 2))
    assert _ltoir.linker_identity() not in (None, first)


def test_no_identity_when_a_linker_cannot_be_found(monkeypatch):
    pytest.importorskip("cuda.pathfinder")
    monkeypatch.setattr(_nvrtc, "_wheel_versions", lambda names: {"cuda_core": "1.2.0"})
    _pathfinder(monkeypatch, {})
    assert _ltoir.linker_identity() is None


def test_link_keys_take_text_sources(monkeypatch):
    """A Numba kernel links CUDA C++ or PTX text (float16 kernels link Numba's own C++ shim): its key hashes
    the text, so another text gives another key (a regression: the key once failed on str data)."""
    pytest.importorskip("numba.cuda")
    from numba.cuda.cudadrv.linkable_code import LTOIR, CUSource

    from blasdx.fusion import numba_lowering

    monkeypatch.setattr(_ltoir, "linker_identity", lambda: "nvidia_nvjitlink 13.0.88 nvvm x")

    def library(source: str) -> types.SimpleNamespace:
        return types.SimpleNamespace(
            _entry_name="_ZN6kernel", needs_cudadevrt=False, _nvvm_options={"opt": 3}, _max_registers=None,
            _lto=True, llvm_strs=["; ModuleID = 'k'\ndefine void @_ZN6kernel() {}"],
            _linking_files=[LTOIR(b"\x01ltoir", name="gemm"), CUSource(source, name="shim.cu")])

    first = numba_lowering._link_key(library("__device__ int f() { return 1; }"), (9, 0, "a"))
    again = numba_lowering._link_key(library("__device__ int f() { return 1; }"), (9, 0, "a"))
    other = numba_lowering._link_key(library("__device__ int f() { return 2; }"), (9, 0, "a"))
    assert first is not None and first == again and other != first
