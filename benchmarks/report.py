"""Table cells shared by the benchmarks' printed tables (this folder is on sys.path when they run)."""

from __future__ import annotations


def cell(row: dict, key: str, fmt: str, default: str = "n/a") -> str:
    """``row[key]`` formatted by ``fmt``, or ``default`` where the row has no such figure."""
    return format(row[key], fmt) if key in row else default
