"""Bounded in-process caches: the one rule every per-process memo of blasdx follows.

A memo (streams, launch configurations, plans, bound calls) is a dict that grows with the
kinds of calls a program makes. Rather than an LRU, whose bookkeeping would cost the hot
paths on every hit, a full memo is emptied and refilled: a program with more kinds than
the limit pays a rebuild now and then, one with fewer never does.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["cached", "remember"]

_V = TypeVar("_V")


def remember(cache: dict[Any, _V], key: Any, value: _V, limit: int = 1024) -> _V:
    """``cache[key] = value`` (the cache emptied first when it holds ``limit`` entries); returns ``value``."""
    if len(cache) >= limit:
        cache.clear()
    cache[key] = value
    return value


def cached(cache: dict[Any, _V], key: Any, make: Callable[[], _V], limit: int = 1024) -> _V:
    """``cache[key]``, made by ``make()`` and remembered on a miss."""
    found = cache.get(key)
    return found if found is not None else remember(cache, key, make(), limit)
