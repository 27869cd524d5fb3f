"""Where blasdx keeps what it builds (kernels, tuned choices, its launch call): the cache folder, and whether
the disk level is on. Environment: ``BLASDX_CACHE_DIR`` (the folder), ``BLASDX_CACHE=0`` (no disk level)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

__all__ = ["cache_dir", "cache_enabled"]


def cache_enabled() -> bool:
    """False when ``BLASDX_CACHE`` is 0/false/no/off: no disk level."""
    return os.environ.get("BLASDX_CACHE", "1").strip().lower() not in ("0", "false", "no", "off")


def cache_dir() -> Path:
    """``$BLASDX_CACHE_DIR``, else the user cache dir (``$XDG_CACHE_HOME`` or ``~/.cache``) + ``blasdx``."""
    explicit = os.environ.get("BLASDX_CACHE_DIR")
    if explicit:
        return Path(explicit).expanduser()
    if sys.platform == "win32" and os.environ.get("LOCALAPPDATA"):
        return Path(os.environ["LOCALAPPDATA"]) / "blasdx" / "cache"
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "blasdx"
