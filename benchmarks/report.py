"""Table cells and plot files shared by the benchmarks (this folder is on sys.path when they run)."""

from __future__ import annotations

from typing import Any


def cell(row: dict, key: str, fmt: str, default: str = "n/a") -> str:
    """``row[key]`` formatted by ``fmt``, or ``default`` where the row has no such figure."""
    return format(row[key], fmt) if key in row else default


def case_labels(rows: list[dict]) -> list[str]:
    """The x-axis labels of a plot of cases: the case's name over its M x N x K."""
    return [f"{r['case']}\n{'x'.join(map(str, r['size']))}" for r in rows]


def save_plot(plt: Any, fig: Any, path: Any) -> None:
    """Lay out ``fig``, write it to ``path`` at 120 dpi, close it and say where it went."""
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    print(f"plot: {path}")
