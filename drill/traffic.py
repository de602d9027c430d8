"""HBM traffic of attention, counted in elements: the formulas and the count measured on code.

One place for both, so the lesson (`drill show io`), exercise 02's expected values and the
traffic a learner's own forward pass is measured to move all agree.
"""

from __future__ import annotations

from dataclasses import dataclass


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def standard_elements(s: int, d: int) -> int:
    """Standard attention: read Q, K, V and write O (4·s·d); write and read S, then P (4·s²)."""
    return 4 * s * d + 4 * s * s


def flash_elements(s: int, d: int, Br: int) -> int:
    """FlashAttention-2 order: Q read and O written once (2·s·d), K and V once per Q block
    (2·Tr·s·d), L written once (s)."""
    return 2 * s * d + 2 * ceil_div(s, Br) * s * d + s


@dataclass(frozen=True)
class Reads:
    """What a recorded call read of one input array (rows along axis 0)."""

    length: int  # rows in the array
    rows: int = 0  # rows read, counting repeats
    largest: int = 0  # the most rows read in one access
    covered: int = 0  # distinct rows read at least once

    @property
    def passes(self) -> float:
        return self.rows / self.length if self.length else 0.0


def summarize(log: list | None, lengths: dict[str, int]) -> tuple[dict[str, Reads], bool]:
    """Per array name, its Reads; and whether the log was cut short."""
    seen: dict[str, list] = {name: [] for name in lengths}
    truncated = False
    for entry in log or []:
        if not (isinstance(entry, list) and len(entry) == 4):
            continue
        name, start, stop, rows = entry
        if rows == -1:
            truncated = True
        elif name in seen and isinstance(start, int) and isinstance(stop, int) and isinstance(rows, int):
            seen[name].append((max(0, start), min(lengths[name], stop), max(0, rows)))
    out = {}
    for name, length in lengths.items():
        spans = seen[name]
        covered = [False] * length
        for start, stop, _ in spans:
            covered[start:stop] = [True] * max(0, stop - start)
        out[name] = Reads(length, sum(r for _, _, r in spans), max((r for _, _, r in spans), default=0),
                          sum(covered))
    return out, truncated


def moved_elements(reads: dict[str, Reads], d: int, written: int) -> int:
    """Elements moved: rows read times d for the 2-D inputs, plus the elements written."""
    return sum(r.rows * d for r in reads.values()) + written
