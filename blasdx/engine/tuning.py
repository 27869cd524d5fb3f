"""Engine configurations timed on the user's GPU (``bx.tune``) and kept on disk beside the kernel cache.

The engine's rule (blasdx.engine.hopper.choose_config) picks a configuration from the shape
alone. ``bx.tune`` times the candidates of one kind of call on the GPU at hand and records
the fastest here; later plans of that kind (same types, shape, operand routes and GPU size) take it
instead of the rule's. The table is one JSON file, ``tuned-engine.json`` in the kernel cache
folder (blasdx.compile.cache.cache_dir), read once per process and rewritten atomically
(temporary file + ``os.replace``) when an entry is added. Nothing is tuned unless asked.
"""

from __future__ import annotations

import json
import os
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..compile.cache import cache_dir, cache_enabled

__all__ = ["CANDIDATES", "TUNED", "TUNED_FILE", "TuneKey", "TunedConfigs", "key_of"]

#: ``bx.tune``'s candidate configurations: a base of blasdx.engine.hopper.CONFIGS and what changes in it.
#: Stream-K candidates (``stream_k``) are tried with waves of tiles (blasdx.calls.tune.STREAM_K_WAVES) for splits.
CANDIDATES = [("narrow", {}), ("narrow", {"bn": 128, "stages": 8}), ("pingpong", {}),
              ("pingpong", {"bm": 64, "bn": 256, "stages": 4}), ("pingpong", {"cluster": 2}), ("wide", {}),
              ("wide clusters", {}), ("wide 192", {}), ("square", {}), ("decode", {}), ("decode", {"bn": 32}),
              ("decode", {"bm": 128, "consumers": 2, "stages": 10}), ("pingpong", {"stream_k": True}),
              ("medium", {"stream_k": True}), ("whole rows 64", {}), ("whole rows", {})]

TUNED_FILE = "tuned-engine.json"
_VERSION = 1  # of the file's layout


@dataclass(frozen=True)
class TuneKey:
    """What a tuned configuration is for: the GPU (its SM count), types, shape, the operands' routes
    (as blasdx.engine.hopper.route gives them: the layout read, repacked or not) and fp8 promotion."""

    multiprocessors: int
    a: str
    b: str
    c: str
    m: int
    n: int
    k: int
    batch: int
    routes: str
    promotion: int

    def text(self) -> str:
        """The key as the file spells it."""
        return (f"sm90x{self.multiprocessors}|{self.a}x{self.b}->{self.c}|{self.batch}x{self.m}x{self.n}x{self.k}|"
                f"{self.routes}|p{self.promotion}")


def key_of(a: Any, b: Any, c: Any, m: int, n: int, k: int, batch: int, multiprocessors: int, route_a: Any,
           route_b: Any, promotion: int) -> TuneKey:
    """The key of a kind of call: DTypes ``a``, ``b``, ``c``, its shape, SM count, the routes as given
    (blasdx.engine.hopper.OperandRoute), promotion."""
    routes = "/".join(("K" if r.k_major else "MN") + ("-repacked" if r.repack else "") for r in (route_a, route_b))
    return TuneKey(multiprocessors, a.name, b.name, c.name, m, n, k, batch, routes, promotion)


class TunedConfigs:
    """The table of tuned configurations (loaded from disk on first use)."""

    def __init__(self, folder: Path | None = None) -> None:
        self._folder = folder
        self._table: dict[str, dict[str, Any]] | None = None
        self._lock = threading.Lock()

    @property
    def path(self) -> Path:
        """The JSON file: ``tuned-engine.json`` in the kernel cache folder (or the folder given)."""
        return (self._folder or cache_dir()) / TUNED_FILE

    def _load(self) -> dict[str, dict[str, Any]]:
        if self._table is None:
            table: dict[str, dict[str, Any]] = {}
            if cache_enabled() or self._folder is not None:
                try:
                    data = json.loads(self.path.read_text())
                    if data.get("version") == _VERSION:
                        table = dict(data.get("entries", {}))
                except (OSError, ValueError, AttributeError):  # none yet, or unreadable: tune again
                    table = {}
            self._table = table
        return self._table

    def get(self, key: TuneKey) -> tuple[dict[str, Any], int] | None:
        """The tuned (configuration's fields, K splits) of ``key``, or None."""
        with self._lock:
            entry = self._load().get(key.text())
        try:
            return dict(entry["config"]), int(entry["splits"])
        except (KeyError, TypeError, ValueError):  # none, or written by another version
            return None

    def put(self, key: TuneKey, config: dict[str, Any], splits: int, ms: float) -> None:
        """Record the winner of ``key`` (its configuration's fields; ``ms``: its time); rewrite the file atomically."""
        with self._lock:
            table = self._load()
            table[key.text()] = {"config": dict(config), "splits": splits, "ms": ms}
            if not cache_enabled() and self._folder is None:
                return
            path = self.path
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, temp = tempfile.mkstemp(prefix=".tuned-", dir=path.parent)
            try:
                with os.fdopen(fd, "w") as f:
                    json.dump({"version": _VERSION, "entries": table}, f, indent=1, sort_keys=True)
                os.replace(temp, path)
            except BaseException:
                Path(temp).unlink(missing_ok=True)
                raise

    def forget(self) -> None:
        """Drop what was read (the file is read again on next use)."""
        with self._lock:
            self._table = None


TUNED = TunedConfigs()
