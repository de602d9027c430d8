"""HBM traffic and FLOPs of one attention head's forward pass: the one place they are counted.

Counts are in elements moved between HBM and the chip (multiply by the element size
for bytes). `drill show io`, the tiling picture and the deck's numeric cards use these,
and the flash-forward and flash-backward checks count what a learner's own loop moved
with `summarize` below and report it beside `flash_elements`.

  standard        4·s·d + 4·s²           Q, K, V read, O written; S and P each written and read
  flash           2·s·d + 2·Tr·s·d + s   FlashAttention-2 order (exercise 02): Q and O once,
                                         K and V once per Q block (Tr = ⌈s/Br⌉), L once
  flash from L2   4·s·d + s              the same kernel when K/V re-reads hit L2: HBM sees
                                         K and V about once per head
  FLOPs           4·s²·d                 QKᵀ and PV, 2·s²·d each (softmax not counted)
"""

from __future__ import annotations

from dataclasses import dataclass


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def kv_passes(s: int, br: int) -> int:
    """How many times the loop streams K and V: once per Q block."""
    return ceil_div(s, br)


def standard_elements(s: int, d: int) -> int:
    return 4 * s * d + 4 * s * s


def flash_elements(s: int, d: int, br: int) -> int:
    return 2 * s * d + 2 * kv_passes(s, br) * s * d + s


def flash_elements_l2(s: int, d: int) -> int:
    return 4 * s * d + s


def flops(s: int, d: int) -> int:
    return 4 * s * s * d


def intensity(flop_count: float, elements: float, dtype_bytes: int) -> float:
    """FLOPs per byte of HBM traffic."""
    return flop_count / (elements * dtype_bytes)


# --- measured on code: the rows each input array gave up (drill/grader/recording.py) ---


@dataclass(frozen=True)
class Reads:
    """What a recorded call read of one input array (rows along axis 0), counted as a kernel would
    move it: a block still in use (a re-slice of the rows read last, at most a block) costs nothing
    again, and an elementwise pass over the whole array (K * scale) costs one pass."""

    length: int  # rows in the array
    rows: int = 0  # rows moved, counting repeats but not re-reads of the resident block
    largest: int = 0  # the most rows one access used at once (elementwise whole passes aside)
    covered: int = 0  # distinct rows read at least once
    whole_passes: int = 0  # elementwise passes over the whole array

    @property
    def passes(self) -> float:
        return self.rows / self.length if self.length else 0.0


def summarize(log: list | None, lengths: dict[str, int],
              blocks: dict[str, int] | None = None) -> tuple[dict[str, Reads], bool]:
    """Per array name, its Reads; and whether the log was cut short.

    blocks: the block size of each array (Br for Q, Bc for K and V); a read of at most that many
    rows stays resident, so reading it again (Q[i0:i1] re-sliced in the inner loop, or one
    element of a row after another) is free until another part of the array is read.
    """
    seen: dict[str, list] = {name: [] for name in lengths}
    truncated = False
    for entry in log or []:
        if not (isinstance(entry, list) and len(entry) in (4, 5)):
            continue
        name, start, stop, rows = entry[:4]
        kind = entry[4] if len(entry) == 5 else "rows"
        if rows == -1:
            truncated = True
        elif name in seen and isinstance(start, int) and isinstance(stop, int) and isinstance(rows, int):
            seen[name].append((max(0, start), min(lengths[name], stop), max(0, rows), kind))
    out = {}
    for name, length in lengths.items():
        limit = (blocks or {}).get(name, 0)
        covered = [False] * length
        moved = largest = passes = 0
        resident = None  # (start, stop) of the block in use
        for start, stop, rows, kind in seen[name]:
            covered[start:stop] = [True] * max(0, stop - start)
            if kind == "pass":
                moved, passes, resident = moved + length, passes + 1, None
                continue
            largest = max(largest, rows)
            if resident and resident[0] <= start and stop <= resident[1]:
                continue
            moved += rows
            resident = (start, stop) if stop - start <= limit else None
        out[name] = Reads(length, moved, largest, sum(covered), passes)
    return out, truncated


def moved_elements(reads: dict[str, Reads], d: int, written: int) -> int:
    """Elements moved: rows read times d for the 2-D inputs, plus the elements written."""
    return sum(r.rows * d for r in reads.values()) + written
