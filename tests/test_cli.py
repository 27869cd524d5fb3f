"""python -m blasdx: describe, source, sass, compile, cache, matmul; safe expressions; whole error messages (CPU only)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from blasdx import compile as cc
from blasdx.__main__ import main, parse_descriptor

REPO = Path(__file__).resolve().parent.parent
EXPR = "Size(64,64,64) + Precision(float16, float16, float32) + Function.MM + SM(80) + Block()"


@pytest.fixture(autouse=True)
def cache_root(fresh_cache) -> Path:
    """Every test gets its own cache folder and an empty in-process cache (conftest)."""
    return fresh_cache


def test_describe_prints_every_trait(capsys):
    assert main(["describe", EXPR]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0] == repr(parse_descriptor(EXPR))
    for line in ("instruction                  mma.sync.m16n8k16", "arch                         sm_80",
                 "is_supported                 True", "suggested_block_dim          (128, 1, 1)"):
        assert line in out


def test_describe_of_an_incomplete_descriptor_marks_missing_traits(capsys):
    assert main(["describe", "Size(16, 16, 16) + Precision(float64)"]) == 0
    out = capsys.readouterr().out
    assert "(n/a: sm: this descriptor has no SM operator" in out
    assert "is_complete                  False" in out


def test_source_prints_the_generated_cuda(capsys):
    from blasdx.codegen.gemm import generate

    assert main(["source", EXPR]) == 0
    assert capsys.readouterr().out == generate(parse_descriptor(EXPR)).source


def test_sass_prints_tensor_core_code(capsys):
    try:
        cc.find_cuobjdump()
    except cc.CompileError:
        pytest.skip("cuobjdump not installed")
    assert main(["sass", EXPR]) == 0
    out = capsys.readouterr().out
    assert "Function : blasdx_batched_gemm" in out and "HMMA" in out


def test_compile_prints_a_table_per_arch(capsys):
    assert main(["compile", EXPR, "--arch", "sm_80,sm_90a"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1].split() == ["arch", "instruction", "threads", "registers", "static", "smem", "dynamic", "smem",
                                "local", "cubin", "from"]
    assert lines[3].startswith("sm_80 ") and lines[4].startswith("sm_90a ")
    assert all(" 0 B " in line and "nvrtc" in line for line in lines[3:5])  # no local memory, fresh compiles
    assert main(["compile", EXPR]) == 0  # the descriptor's own SM, now from the cache
    table = capsys.readouterr().out.splitlines()
    assert len(table) == 4 and table[3].startswith("sm_80 ") and "cache" in table[3]


def test_cache_info_and_clear(capsys, cache_root):
    assert main(["compile", EXPR]) == 0
    assert main(["cache", "info"]) == 0
    out = capsys.readouterr().out
    assert f"cache directory: {cache_root}" in out and "entries:         1 " in out
    assert main(["cache", "clear"]) == 0
    assert capsys.readouterr().out.strip() == f"removed 1 entries from {cache_root}"


@pytest.mark.parametrize(
    "argv, message",
    [
        (["describe", "__import__('os').system('true')"], "expression: unknown name '__import__'"),
        (["describe", "Size.__class__"], "expression: private attribute '__class__' is not allowed"),
        (["describe", "[x for x in Size]"], "expression: ListComp is not allowed"),
        (["describe", "Size(64,64"], "expression: invalid syntax at column"),
        (["describe", "Size(64,64,64) + Size(8,8,8)"], "Size(64, 64, 64) and Size(8, 8, 8): a descriptor takes one"),
        (["compile", EXPR, "--arch", "sm_70"], "SM: 70 is not a supported architecture"),
        (["compile", EXPR, "--arch", "ampere"], "--arch: 'ampere'; expected targets such as sm_80 or sm_90a"),
        (["source", "Size(64,64,64) + Precision(float16)"], "incomplete descriptor: missing Function, SM"),
    ],
)
def test_errors_print_their_message_and_exit_2(capsys, argv, message):
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"blasdx {argv[0]}: error: ")
    assert message in lines[0]


def test_an_error_keeps_its_whole_message(capsys):
    """The list of supported combinations is the part of the message a user acts on."""
    assert main(["describe", "Size(64,64,64) + Precision(tfloat32) + SM(90)"]) == 2
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert lines[0] == ("blasdx describe: error: Precision(tfloat32, tfloat32, tfloat32) is not a supported (A, B, C) "
                        "combination. Supported:")
    assert "  bfloat16 x bfloat16 -> float32 (sm_80+)" in lines
    assert lines[-1] == "  complex float64 x float64 -> float64 (sm_75+)"


def test_matmul_explains_its_fields(capsys):
    assert main(["matmul", "bfloat16", "4096x4096x4096", "--explain"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("hopper wgmma+TMA, 128x256x64, ") and ", 1 K split, D by TMA, x K-major, y MN-major" in out[0]
    legend = "\n".join(out[1:])
    for field in ("stages", "consumers", "group 8", "K split", "D by TMA", "K-major"):
        assert field in legend
    with pytest.raises(SystemExit):
        main(["matmul", "--help"])
    text = capsys.readouterr().out
    assert "--batch BATCH" in text and "problems in the batch" in text and "The line names, in order:" in text


def test_expression_namespace_has_no_builtins():
    with pytest.raises(Exception, match="unknown name 'open'"):
        parse_descriptor("open('/etc/passwd')")
    desc = parse_descriptor("SM(80)")  # a lone operator becomes a descriptor
    assert desc.sm == 80


def test_module_entry_point(cache_root):
    env = {**os.environ, "BLASDX_CACHE_DIR": str(cache_root), "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-m", "blasdx", "describe", EXPR], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "mma.sync.m16n8k16" in done.stdout
    bad = subprocess.run([sys.executable, "-m", "blasdx", "describe", "nope"], env=env, capture_output=True, text=True)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1
    usage = subprocess.run([sys.executable, "-m", "blasdx"], env=env, capture_output=True, text=True)
    assert usage.returncode == 2 and "usage:" in usage.stderr
