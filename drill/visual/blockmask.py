"""The block mask of a packed batch: which [Br, Bc] tiles are empty, partial or full.

Exercise 14's rule: query i sees key j when both belong to the same document and, with
causal or a window, 0 <= i - j (< window). FlexAttention skips empty tiles, masks partial
ones and runs full ones unmasked. Standard library and rich only: `drill show` must start fast.
"""

from __future__ import annotations

import click
from rich.console import Group
from rich.text import Text

from drill.console import console
from drill.errors import cannot

MAX_TOKENS = 4096
MAX_TILES = 64  # per side
GLYPHS = {0: ("·", "grey50"), 1: ("▒", "yellow"), 2: ("█", "green")}


def validate(lengths: list[int], block: int, window: int | None) -> str:
    if not lengths or any(n < 1 for n in lengths):
        return "--docs must list document lengths of at least 1"
    if sum(lengths) > MAX_TOKENS:
        return f"at most {MAX_TOKENS} tokens in all (got {sum(lengths)})"
    if block < 1:
        return f"--block must be at least 1 (got {block})"
    if -(-sum(lengths) // block) > MAX_TILES:
        return f"too many tiles to draw (at most {MAX_TILES} a side): use a larger --block"
    if window is not None and window < 1:
        return f"--window must be at least 1 (got {window})"
    return ""


def doc_ids(lengths: list[int]) -> list[int]:
    return [d for d, n in enumerate(lengths) for _ in range(n)]


def visible(doc: list[int], i: int, j: int, causal: bool, window: int | None) -> bool:
    if doc[i] != doc[j]:
        return False
    if causal or window is not None:
        if j > i:
            return False
        if window is not None and i - j >= window:
            return False
    return True


def kinds(lengths: list[int], block: int, causal: bool, window: int | None) -> list[list[int]]:
    """[Tr][Tc] of 0 (empty), 1 (partial), 2 (full), square tiles of `block` tokens."""
    doc = doc_ids(lengths)
    s = len(doc)
    t = -(-s // block)
    out = []
    for bi in range(t):
        row = []
        for bj in range(t):
            pairs = [visible(doc, i, j, causal, window)
                     for i in range(bi * block, min(s, (bi + 1) * block))
                     for j in range(bj * block, min(s, (bj + 1) * block))]
            row.append(2 if all(pairs) else 1 if any(pairs) else 0)
        out.append(row)
    return out


def block_mask_summary(lengths: list[int], block: int, causal: bool, window: int | None) -> Group:
    grid = kinds(lengths, block, causal, window)
    s = sum(lengths)
    counts = {k: sum(row.count(k) for row in grid) for k in (0, 1, 2)}
    total = sum(counts.values())
    rule = "same document" + (f", 0 ≤ i − j < {window}" if window is not None else ", j ≤ i" if causal else "")
    head = Text()
    head.append("Block mask", style="accent")
    head.append(f"  {len(lengths)} packed documents {lengths}, {s} tokens, tiles of {block}×{block}; "
                f"query i sees key j when: {rule}\n")
    head.append("Rows are query blocks, columns key blocks. ")
    for k, label in ((0, "empty: skipped"), (1, "partial: masked"), (2, "full: no mask")):
        glyph, style = GLYPHS[k]
        head.append(glyph * 2, style=style)
        head.append(f" {label}  ")
    picture = Text()
    for row in grid:
        for k in row:
            glyph, style = GLYPHS[k]
            picture.append(glyph * 2, style=style)
        picture.append("\n")
    visible_pairs = sum(1 for i in range(s) for j in range(s)
                        if visible(doc_ids(lengths), i, j, causal, window)) if s <= 1024 else None
    notes = Text(style="grey50")
    notes.append(f"{counts[0]} of {total} tiles empty ({counts[0] / total:.0%}), {counts[1]} partial, "
                 f"{counts[2]} full: the kernel computes {counts[1] + counts[2]} score tiles instead of {total}")
    if visible_pairs is not None:
        notes.append(f"; {visible_pairs:,} of {s * s:,} pairs are visible ({visible_pairs / (s * s):.0%})")
    notes.append(".")
    return Group(head, Text(""), picture, notes)


@click.command(name="block-mask")
@click.option("--docs", default="40,24,56,8", show_default=True, help="Comma-separated document lengths.")
@click.option("--block", type=int, default=8, show_default=True, help="Tile size (Br = Bc).")
@click.option("--causal/--no-causal", default=True, show_default=True, help="Causal inside each document.")
@click.option("--window", type=int, default=None, help="Sliding window (implies causal).")
def show_block_mask(docs: str, block: int, causal: bool, window: int | None) -> None:
    """FlexAttention's block mask for a packed batch: empty, partial and full tiles."""
    try:
        lengths = [int(x) for x in docs.split(",") if x.strip()]
    except ValueError:
        cannot(f"--docs must be comma-separated integers (got {docs!r})")
    reason = validate(lengths, block, window)
    if reason:
        cannot(reason)
    console.print(block_mask_summary(lengths, block, causal, window))
