"""blasdx.compile.cache and blasdx.run.precompile: memory and disk levels, keys, corruption, concurrency (CPU only)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

import blasdx as bx
from blasdx.compile import cache
from blasdx import compile as cc
from blasdx.compile import headers
from blasdx.compile import nvrtc as nvrtc_driver
from blasdx.compile.cache import cache_key, cached_compile, compile_descriptor
from blasdx.base.errors import BlasdxError, CompileError, DescriptorError

REPO = Path(__file__).resolve().parent.parent

GEMM = bx.Size(32, 32, 32) + bx.Precision(bx.float16, bx.float16, bx.float32) + bx.Function.MM + bx.SM(80) + bx.Block()
F64 = bx.Size(16, 16, 16) + bx.Precision(bx.float64) + bx.Function.MM + bx.SM(80) + bx.Block()
INT8 = bx.Size(32, 32, 64) + bx.Precision(bx.int8, bx.int8, bx.int32) + bx.Function.MM + bx.SM(80) + bx.Block()

TINY = 'extern "C" __global__ void tiny(int* x) {{ x[threadIdx.x] = {value}; }}\n'


@pytest.fixture(autouse=True)
def cache_root(fresh_cache) -> Path:
    """Every test gets its own cache folder, an empty in-process cache and zeroed counters (conftest)."""
    return fresh_cache


def _entries(root: Path) -> list[Path]:
    return sorted(root.glob("??/*.bdx"))


def _leftovers(root: Path) -> list[Path]:
    return sorted(root.glob("??/.*.tmp"))


def _run(code: str, root: Path, *extra: str) -> subprocess.CompletedProcess:
    """Run python code in a fresh interpreter against the cache at ``root``."""
    env = {**os.environ, "BLASDX_CACHE_DIR": str(root), "PYTHONPATH": str(REPO)}
    env.pop("BLASDX_CACHE", None)
    command = [sys.executable, "-c", textwrap.dedent(code), *extra]
    return subprocess.run(command, env=env, capture_output=True, text=True)


# -- location and key --------------------------------------------------------------------------------------


def test_cache_dir_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("BLASDX_CACHE_DIR", str(tmp_path / "explicit"))
    assert cache.cache_dir() == tmp_path / "explicit"
    monkeypatch.delenv("BLASDX_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    if sys.platform != "win32":
        assert cache.cache_dir() == tmp_path / "xdg" / "blasdx"
        monkeypatch.delenv("XDG_CACHE_HOME")
        monkeypatch.setenv("HOME", str(tmp_path / "home"))
        assert cache.cache_dir() == tmp_path / "home" / ".cache" / "blasdx"


@pytest.mark.parametrize("value, enabled", [("0", False), ("off", False), ("false", False), ("1", True), ("", True)])
def test_cache_switch(monkeypatch, value, enabled):
    monkeypatch.setenv("BLASDX_CACHE", value)
    assert cache.cache_enabled() is enabled


def test_key_depends_on_everything_that_decides_the_cubin(monkeypatch):
    source = TINY.format(value=1)
    base = cache_key(source, "tiny", "sm_80")
    assert base == cache_key(source, "tiny", "sm_80")
    assert len(base) == 64
    others = {
        cache_key(TINY.format(value=2), "tiny", "sm_80"),
        cache_key(source, "tiny", "sm_90a"),
        cache_key(source, "other", "sm_80"),
        cache_key(source, "tiny", "sm_80", cc.CompileOptions(lineinfo=True)),
    }
    monkeypatch.setattr(nvrtc_driver, "nvrtc_identity", lambda: "nvidia_cuda_nvrtc 99.9")
    others.add(cache_key(source, "tiny", "sm_80"))
    monkeypatch.undo()
    monkeypatch.setattr(cache, "_blasdx_version", lambda: "99.0")
    others.add(cache_key(source, "tiny", "sm_80"))
    assert base not in others and len(others) == 6


@pytest.fixture
def kernels_copy(tmp_path, monkeypatch) -> Path:
    """blasdx's kernels folder copied to tmp and made *the* kernels folder."""
    copy = tmp_path / "kernels"
    shutil.copytree(cc.kernels_dir(), copy)
    monkeypatch.setattr(headers, "kernels_dir", lambda: copy)
    return copy


def test_changing_a_kernel_header_changes_the_key(kernels_copy):
    from blasdx.codegen.gemm import generate

    generated = generate(GEMM)
    before = cache_key(generated.source, generated.kernel_name, generated.arch)
    first = compile_descriptor(GEMM)
    header = next(kernels_copy.glob("blasdx/*.cuh"))
    header.write_text(header.read_text() + "\n// a change\n")
    assert cache_key(generated.source, generated.kernel_name, generated.arch) != before
    cache.clear_memory_cache()
    calls = cc.stats.nvrtc_calls
    second = compile_descriptor(GEMM)
    assert cc.stats.nvrtc_calls == calls + 1  # the old entry does not match any more
    assert second is not first and len(_entries(cache.cache_dir())) == 2


# -- memory level ---------------------------------------------------------------------------------------------


def test_second_compile_of_equal_descriptor_is_the_same_object():
    first = compile_descriptor(GEMM)
    rebuilt = bx.Block() + bx.SM(80) + bx.Function.MM + bx.Precision(bx.float16, bx.float16, bx.float32)
    rebuilt = rebuilt + bx.Size(32, 32, 32)
    assert rebuilt == GEMM and rebuilt is not GEMM
    assert compile_descriptor(rebuilt) is first
    assert GEMM.compile() is first
    assert cache.stats.memory_hits == 2 and cache.stats.nvrtc_calls == 1


def test_compile_descriptor_validates_first():
    incomplete = bx.Size(32, 32, 32) + bx.Precision(bx.float16) + bx.Block()
    with pytest.raises(DescriptorError, match="incomplete descriptor: missing Function, SM"):
        compile_descriptor(incomplete)
    assert cc.stats.nvrtc_calls == 0


def test_cached_compile_is_shared_by_equal_sources():
    source = TINY.format(value=3)
    first = cached_compile(source, "tiny", "sm_80")
    assert cached_compile(str(source), "tiny", "sm_80") is first
    assert cache.stats.as_dict()["nvrtc_calls"] == 1


def test_kernels_of_one_source_share_one_compile(cache_root):
    """The cubin holds every kernel of its source: a second kernel is read from it, and has its own entry."""
    source = TINY.format(value=10) + 'extern "C" __global__ void other(int* x) { x[threadIdx.x] = 11; }\n'
    tiny = cached_compile(source, "tiny", "sm_80")
    other = cached_compile(source, "other", "sm_80")
    assert cache.stats.nvrtc_calls == 1 and cache.stats.compiles == 1
    assert other is not tiny and other.kernel_name == "other" and other.cubin == tiny.cubin
    assert other.registers > 0 and len(_entries(cache_root)) == 2
    in_it = r"\(kernels in it: (other, tiny|tiny, other)\)"
    with pytest.raises(CompileError, match=rf"kernel_name='missing' is not in the cubin {in_it}; is missing declared"):
        cached_compile(source, "missing", "sm_80")
    cache.clear_memory_cache()
    assert cached_compile(source, "other", "sm_80").cubin == tiny.cubin
    assert cache.stats.nvrtc_calls == 1 and cache.stats.disk_hits == 1


@pytest.mark.parametrize(
    "args, error, match",
    [
        (("x", "tiny", "sm80"), ValueError, r"arch='sm80'"),
        (("x", "1tiny", "sm_80"), ValueError, r"kernel_name='1tiny'"),
        (("x", "tiny", "sm_80", {"std": "c++17"}), TypeError, r"options: expected blasdx CompileOptions, got dict"),
    ],
)
def test_cached_compile_checks_arguments(args, error, match):
    with pytest.raises(error, match=match):
        cached_compile(*args)


# -- disk level ------------------------------------------------------------------------------------------------


def test_disk_hit_needs_no_nvrtc(cache_root):
    first = compile_descriptor(GEMM)
    assert len(_entries(cache_root)) == 1 and cache.stats.disk_writes == 1
    cache.clear_memory_cache()
    again = compile_descriptor(GEMM)
    assert again is not first
    assert again.cubin == first.cubin and again.resources == first.resources and again.source == first.source
    assert cache.stats.nvrtc_calls == 1 and cache.stats.disk_hits == 1


def test_new_process_loads_from_disk_without_nvrtc(cache_root):
    """A disk hit neither compiles nor loads NVRTC or cuda.core: the key names the compiler from wheel metadata."""
    code = """
        import json, hashlib, sys, blasdx as bx
        from blasdx.compile import cache
        gemm = bx.Size(32, 32, 32) + bx.Precision(bx.float16, bx.float16, bx.float32) + bx.Function.MM
        gemm = gemm + bx.SM(80) + bx.Block()
        k = gemm.compile()
        loaded = sorted(m for m in ("cuda.core", "cuda.bindings.nvrtc") if m in sys.modules)
        print(json.dumps({**cache.stats.as_dict(), "sha": hashlib.sha256(k.cubin).hexdigest(), "regs": k.registers,
                          "loaded": loaded}))
    """
    cold = _run(code, cache_root)
    assert cold.returncode == 0, cold.stderr
    warm = _run(code, cache_root)
    assert warm.returncode == 0, warm.stderr
    cold_stats, warm_stats = json.loads(cold.stdout), json.loads(warm.stdout)
    assert cold_stats["nvrtc_calls"] == 1 and cold_stats["disk_writes"] == 1
    assert warm_stats["nvrtc_calls"] == 0 and warm_stats["disk_hits"] == 1
    assert cold_stats["loaded"] == ["cuda.bindings.nvrtc", "cuda.core"] and warm_stats["loaded"] == []
    assert warm_stats["sha"] == cold_stats["sha"] and warm_stats["regs"] == cold_stats["regs"]


@pytest.mark.parametrize("damage", ["truncate", "flip", "empty", "garbage"])
def test_corrupt_entry_is_discarded_and_rebuilt(cache_root, damage, caplog):
    first = cached_compile(TINY.format(value=4), "tiny", "sm_80")
    (path,) = _entries(cache_root)
    data = path.read_bytes()
    broken = {
        "truncate": data[: len(data) // 2],
        "flip": data[:100] + bytes([data[100] ^ 0xFF]) + data[101:],
        "empty": b"",
        "garbage": b"not a cache entry at all" * 10,
    }[damage]
    path.write_bytes(broken)
    cache.clear_memory_cache()
    rebuilt = cached_compile(TINY.format(value=4), "tiny", "sm_80")
    assert rebuilt.cubin == first.cubin
    assert cache.stats.corrupt_entries == 1 and cache.stats.nvrtc_calls == 2
    assert "discarding corrupt entry" in caplog.text
    assert path.read_bytes() == data  # a valid entry again
    cache.clear_memory_cache()
    cached_compile(TINY.format(value=4), "tiny", "sm_80")
    assert cache.stats.disk_hits == 1


def test_entry_of_another_key_is_rejected(cache_root):
    cached_compile(TINY.format(value=5), "tiny", "sm_80")
    (path,) = _entries(cache_root)
    disk = cache.DiskCache(cache_root)
    assert disk.get(path.stem) is not None
    impostor = disk.path_for("ab" + path.stem[2:])
    impostor.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy(path, impostor)
    assert disk.get(impostor.stem) is None and not impostor.exists()


def test_cache_off_writes_nothing(cache_root, monkeypatch):
    monkeypatch.setenv("BLASDX_CACHE", "0")
    first = compile_descriptor(GEMM)
    cache.clear_memory_cache()
    compile_descriptor(GEMM)
    assert not cache_root.exists()
    assert cache.stats.nvrtc_calls == 2 and cache.stats.disk_hits == 0
    assert compile_descriptor(GEMM) is not first  # memory still works


def test_failed_compile_is_saved_in_the_cache_failed_folder(cache_root):
    with pytest.raises(CompileError) as caught:
        cached_compile('extern "C" __global__ void bad() { int x = ; }', "bad", "sm_80")
    assert caught.value.saved_to.parent == cache_root / "failed"
    assert cache.cache_info().failed_sources == 1
    assert _entries(cache_root) == []


def test_unwritable_cache_folder_still_compiles(tmp_path, monkeypatch, caplog):
    blocker = tmp_path / "file-not-folder"
    blocker.write_text("")
    monkeypatch.setenv("BLASDX_CACHE_DIR", str(blocker))
    compiled = cached_compile(TINY.format(value=6), "tiny", "sm_80")
    assert compiled.registers > 0
    assert "continuing without disk cache" in caplog.text


# -- concurrency ----------------------------------------------------------------------------------------------


def test_eight_threads_compile_one_key_once(cache_root):
    source = TINY.format(value=7)
    barrier = threading.Barrier(8)
    results: list = [None] * 8

    def worker(i: int) -> None:
        barrier.wait()
        results[i] = cached_compile(source, "tiny", "sm_80")

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(r is results[0] for r in results)
    assert cache.stats.nvrtc_calls == 1
    assert len(_entries(cache_root)) == 1 and _leftovers(cache_root) == []


def test_two_processes_compiling_one_key_leave_one_valid_entry(cache_root):
    code = """
        import sys, time
        from blasdx.compile.cache import cached_compile
        start = float(sys.argv[1])
        while time.time() < start:
            time.sleep(0.001)
        src = 'extern "C" __global__ void tiny(int* x) { x[threadIdx.x] = 8; }\\n'
        for _ in range(3):
            cached_compile(src, "tiny", "sm_80")
            from blasdx.compile.cache import clear_memory_cache; clear_memory_cache()
        print("ok")
    """
    import time

    env = {**os.environ, "BLASDX_CACHE_DIR": str(cache_root), "PYTHONPATH": str(REPO)}
    start = str(time.time() + 2.0)
    procs = [
        subprocess.Popen([sys.executable, "-c", textwrap.dedent(code), start], env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    outputs = [p.communicate(timeout=120) for p in procs]
    assert all(p.returncode == 0 for p in procs), outputs
    (path,) = _entries(cache_root)
    assert _leftovers(cache_root) == []
    entry = cache.DiskCache(cache_root).get(path.stem)
    assert entry is not None and entry.kernel_name == "tiny"


# -- info and clear -------------------------------------------------------------------------------------------


def test_info_and_clear(cache_root):
    compile_descriptor(GEMM)
    cached_compile(TINY.format(value=9), "tiny", "sm_80")
    info = cache.cache_info()
    assert info.path == cache_root and info.enabled and info.entries == 2 and info.size_bytes > 0
    assert info.in_memory == 2
    assert f"cache directory: {cache_root}" in str(info)
    assert cache.clear_cache() == 2
    assert _entries(cache_root) == [] and cache.cache_info().in_memory == 0


# -- precompile -----------------------------------------------------------------------------------------------


def test_precompile_returns_kernels_in_order():
    twin = bx.Block() + bx.SM(80) + bx.Function.MM + bx.Precision(bx.float16, bx.float16, bx.float32)
    twin = twin + bx.Size(32, 32, 32)
    kernels = bx.precompile([GEMM, F64, INT8, twin], workers=2)
    assert [k.kernel_name for k in kernels] == ["blasdx_batched_gemm"] * 4
    assert kernels[0] is kernels[3] is compile_descriptor(GEMM)
    assert kernels[1] is compile_descriptor(F64) and kernels[2] is compile_descriptor(INT8)
    assert cache.stats.nvrtc_calls == 3


def test_precompile_first_thing_in_a_process(tmp_path):
    """Threads that import cuda.core for the first time at once fail; precompile loads it before its threads."""
    script = textwrap.dedent("""
        import blasdx as bx
        sizes = [(32, 32, 32), (32, 32, 16), (16, 32, 32), (32, 16, 32)]
        descs = [bx.Size(*s) + bx.Precision(bx.float32) + bx.Function.MM + bx.SM(80) + bx.Block() for s in sizes]
        print(len(bx.precompile(descs, workers=4)))
    """)
    env = {**os.environ, "BLASDX_CACHE_DIR": str(tmp_path)}
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300)
    assert result.returncode == 0 and result.stdout.strip() == "4", result.stderr


PRECOMPILE_IN_A_NEW_PROCESS = """
    import blasdx as bx
    sizes = (16, 24, 32, 40, 48, 56, 64, 72)
    descs = [bx.Size(s, s, s) + bx.Precision(bx.float16, bx.float16, bx.float32) + bx.Function.MM + bx.SM(80)
             + bx.Block() for s in sizes]
    results = bx.precompile(descs, workers=8, return_exceptions=True)
    failed = [f"{type(r).__name__}: {r}" for r in results if isinstance(r, BaseException)]
    print(len(results), len(failed))
    print("\\n".join(failed))
"""


@pytest.mark.parametrize("attempt", range(2))
def test_precompile_with_many_workers_in_a_fresh_process(tmp_path, attempt):
    """Eight workers start compiling at once in a process that has not imported cuda.core yet (an empty cache)."""
    done = _run(PRECOMPILE_IN_A_NEW_PROCESS, tmp_path / f"cache-{attempt}")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0] == "8 0", done.stdout


CONCURRENT_IMPORTS = """
    import threading
    from blasdx.launch import cuda_modules
    start = threading.Barrier(24)
    errors = []
    getters = (lambda: cuda_modules.core().Program, lambda: cuda_modules.core().ProgramOptions,
               lambda: cuda_modules.nvrtc().nvrtcVersion, lambda: cuda_modules.pathfinder().find_nvidia_header_directory,
               lambda: cuda_modules.driver().cuInit, lambda: cuda_modules.load("cuda.core.utils").StridedMemoryView)
    def work(i):
        start.wait()
        try:
            getters[i % len(getters)]()
        except Exception as exc:
            errors.append(repr(exc))
    threads = [threading.Thread(target=work, args=(i,)) for i in range(24)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    print(len(errors), errors[:3])
"""


@pytest.mark.parametrize("attempt", range(3))
def test_cuda_modules_import_from_many_threads_at_once(tmp_path, attempt):
    done = _run(CONCURRENT_IMPORTS, tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "0 []", done.stdout


def test_precompile_reports_every_failure():
    incomplete = bx.Size(32, 32, 32) + bx.Precision(bx.float16) + bx.Block()
    with pytest.raises(DescriptorError) as caught:
        bx.precompile([GEMM, incomplete, F64], workers=2)
    message = str(caught.value)
    assert message.startswith("precompile: 1 of 3 descriptors failed:")
    failed = "[1] Size(32, 32, 32) + Precision(float16, float16, float16) + Block(): DescriptorError: incomplete"
    assert failed in message
    assert [i for i, _, _ in caught.value.failures] == [1]
    results = bx.precompile([GEMM, incomplete], return_exceptions=True)
    assert results[0] is compile_descriptor(GEMM) and isinstance(results[1], DescriptorError)


def test_precompile_mixed_failures_raise_the_base_error(monkeypatch):
    import importlib

    pc = importlib.import_module("blasdx.run.precompile")  # the attribute blasdx.precompile is the function

    def fake(desc, options):
        raise CompileError("nvrtc broke") if desc == GEMM else DescriptorError("bad")

    monkeypatch.setattr(pc, "compile_descriptor", fake)
    with pytest.raises(BlasdxError, match=r"precompile: 2 of 2 descriptors failed") as caught:
        bx.precompile([GEMM, F64])
    assert type(caught.value) is BlasdxError


def test_precompile_progress_on_request(capsys):
    bx.precompile([GEMM, F64], progress=True)
    err = capsys.readouterr().err
    assert "blasdx precompile: 2/2" in err and err.endswith("\n")
    bx.precompile([GEMM, F64])  # not a terminal, short list: quiet
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("workers", [0, -1, 1.5, True])
def test_precompile_rejects_bad_workers(workers):
    with pytest.raises(ValueError, match=rf"precompile: workers={workers!r}; expected an int >= 1"):
        bx.precompile([GEMM], workers=workers)


def test_precompile_of_nothing():
    assert bx.precompile([]) == []
