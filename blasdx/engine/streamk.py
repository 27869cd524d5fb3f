"""Stream-K on the Hopper engine: the decomposition kernels/blasdx/hopper/scheduler.cuh runs, and its cost.

A stream-K launch (an EngineConfig with ``stream_k``) takes its launch's ``splits`` as ``waves`` (at
least 2): of the output's ``tiles``, the last ``min(tiles, tiles mod blocks + (waves - 1) * blocks)``
are shared. Their (tile, K step) iterations, tile-major, are cut into one contiguous range per
block of the persistent grid (q or q + 1 iterations each), so a last partial wave of tiles no longer leaves SMs idle; the tiles
before them run whole, ``blocks`` at a time. A block's range meets one or more tiles (one unit each);
the units of one tile add up their partial sums as K splits do (splitk.cuh). :func:`work` is the
scheduler's ``work(unit)`` in Python (the tests check the decomposition on it) and
:func:`estimate` the rule's cost of a launch in K steps.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["MIN_WAVES", "Decomposition", "Piece", "decomposition", "estimate", "work"]

#: The fewest waves a stream-K launch shares: the partial wave and one whole wave before it, so no block's
#: range is a sliver of one tile.
MIN_WAVES = 2


@dataclass(frozen=True)
class Decomposition:
    """StreamKScheduler's numbers for ``tiles`` tiles of ``steps`` K steps on ``blocks`` blocks."""

    tiles: int
    steps: int
    blocks: int
    dp_tiles: int  # whole tiles before the shared ones (a multiple of blocks)
    iterations: int  # the shared tiles' K steps
    sk_blocks: int  # blocks with a stream-K range (every range holds at least one iteration)
    pieces: int  # the most units a block's range is cut into
    units: int

    @property
    def per_block(self) -> int:
        """q: the iterations of a range (the first ``longer`` ranges take one more)."""
        return self.iterations // self.sk_blocks

    @property
    def longer(self) -> int:
        """r: the ranges of q + 1 iterations."""
        return self.iterations % self.sk_blocks

    def begin_of(self, block: int) -> int:
        """The first shared iteration of block ``block``'s range (``block`` <= sk_blocks)."""
        return block * self.per_block + min(block, self.longer)

    def owner(self, x: int) -> int:
        """The block whose range holds shared iteration ``x``."""
        split = self.longer * (self.per_block + 1)
        return x // (self.per_block + 1) if x < split else self.longer + (x - split) // self.per_block

    def range_of(self, block: int) -> tuple[int, int]:
        """Block ``block``'s shared iterations [begin, end) (empty past sk_blocks)."""
        if block >= self.sk_blocks:
            return 0, 0
        return self.begin_of(block), self.begin_of(block + 1)


@dataclass(frozen=True)
class Piece:
    """One unit's work: tile index (over all problems), K steps [k_begin, k_end), the tile's parts."""

    tile: int
    k_begin: int
    k_end: int
    parts: int


def decomposition(tiles: int, steps: int, blocks: int, waves: int) -> Decomposition:
    """StreamKScheduler's constructor: ``tiles`` of all problems, ``steps`` K steps each (> 0), ``blocks`` in
    the grid, ``waves`` the launch's splits."""
    shared = min(tiles, tiles % blocks + (waves - 1) * blocks)
    iterations = shared * steps
    sk_blocks = min(blocks, iterations)
    longest = -(-iterations // sk_blocks)
    pieces = (longest - 1) // steps + 2
    dp_tiles = tiles - shared
    return Decomposition(tiles, steps, blocks, dp_tiles, iterations, sk_blocks, pieces, dp_tiles + pieces * blocks)


def work(d: Decomposition, unit: int) -> Piece | None:
    """StreamKScheduler::work: unit ``unit``'s piece, or None for a unit of no work (parts 0)."""
    if unit < d.dp_tiles:
        return Piece(unit, 0, d.steps, 1)
    u = unit - d.dp_tiles
    block, piece = u % d.blocks, u // d.blocks
    begin, end = d.range_of(block)
    t = begin // d.steps + piece
    if begin >= end or t * d.steps >= end:
        return None
    first = t * d.steps
    parts = d.owner(first + d.steps - 1) - d.owner(first) + 1
    return Piece(d.dp_tiles + t, max(begin, first) - first, min(end, first + d.steps) - first, parts)


def estimate(tiles: int, steps: int, blocks: int, waves: int, fixup_steps: int) -> int:
    """The launch's time in K steps: the whole tiles' rounds, then the longest block's shared range plus
    ``fixup_steps`` for each of its pieces that shares a tile (its partial sums written, or read back)."""
    d = decomposition(tiles, steps, blocks, waves)
    longest = 0
    for block in range(d.sk_blocks):
        begin, end = d.range_of(block)
        cost = end - begin
        for i in range(d.pieces):
            p = work(d, d.dp_tiles + i * d.blocks + block)
            if p is not None and p.parts > 1:
                cost += fixup_steps
        longest = max(longest, cost)
    return d.dp_tiles // blocks * steps + longest
