"""Decode pictures: which split each cached key falls in, and a block table as pages in a pool.

Split-KV (exercise 08): the sk keys are cut into num_splits chunks of ceil(sk / num_splits)
keys, the last one shorter; chunks that start past sk are empty. PagedAttention (exercise
09): key t of a sequence lives in physical page block_table[t // page] at slot t % page.
Standard library and rich only: `drill show` must start fast.
"""

from __future__ import annotations

import click
from rich.console import Group
from rich.table import Table
from rich.text import Text

from drill.console import console
from drill.errors import cannot
from drill.words import plural

MAX_KEYS_DRAWN = 96  # one character per key; longer caches are drawn one character per block
MAX_SPLITS = 64
MAX_SEQS = 8
STYLES = ["blue", "green", "magenta", "yellow", "cyan", "red", "bright_blue", "bright_green"]
SYMBOLS = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ!#$%&*+=?@"


# --------------------------------------------------------------------------- split-KV


def validate_splits(sk: int, num_splits: int) -> str:
    if sk < 1:
        return f"--keys must be at least 1 (got {sk})"
    if not 1 <= num_splits <= MAX_SPLITS:
        return f"--splits must be between 1 and {MAX_SPLITS} (got {num_splits})"
    return ""


def split_bounds(sk: int, num_splits: int) -> list[tuple[int, int]]:
    """(start, stop) of each split, the contract of exercise 08; empty splits have start == stop."""
    size = -(-sk // num_splits)
    return [(min(c * size, sk), min((c + 1) * size, sk)) for c in range(num_splits)]


def splits_summary(sk: int, num_splits: int) -> Group:
    bounds = split_bounds(sk, num_splits)
    size = -(-sk // num_splits)
    head = Text()
    head.append("Split-KV decoding", style="accent")
    head.append(f"  {plural(sk, 'cached key')}, {plural(num_splits, 'split')} of ceil({sk}/{num_splits}) = "
                f"{plural(size, 'key')}\n")
    head.append("Each split is one thread block: softmax over its own keys gives (O_c, L_c); the splits "
                "then merge by logsumexp, o = Σ e^(L_c − L) · O_c with L = log Σ e^(L_c).")
    step = max(1, -(-sk // MAX_KEYS_DRAWN))  # keys per character
    strip = Text()
    for first in range(0, sk, step):
        c = first // size
        strip.append(SYMBOLS[c % len(SYMBOLS)], style=STYLES[c % len(STYLES)])
    scale = "one character per key" if step == 1 else f"one character per {step} keys"
    table = Table(title="Splits", title_justify="left", show_edge=False, pad_edge=False)
    for name in ("split", "keys", "count"):
        table.add_column(name, justify="right" if name != "keys" else "left")
    for c, (a, b) in enumerate(bounds):
        label = Text(SYMBOLS[c % len(SYMBOLS)], style=STYLES[c % len(STYLES)])
        keys = f"{a}..{b - 1}" if b > a else Text("empty: O = 0, L = -inf, weight 0", style="grey50")
        table.add_row(label, keys, str(b - a))
    empty = sum(1 for a, b in bounds if a == b)
    notes = Text(style="grey50")
    notes.append(f"Keys, {scale}, marked by split:\n", style="grey50")
    tail = f"; {empty} empty split{'s' if empty != 1 else ''} (more splits than the keys fill)" if empty else ""
    last = bounds[-1 - empty][1] - bounds[-1 - empty][0]
    notes2 = Text(f"The last non-empty split holds {last} key{'s' if last != 1 else ''}{tail}.", style="grey50")
    return Group(head, Text(""), notes, strip, Text(""), table, Text(""), notes2)


# --------------------------------------------------------------------------- paged KV cache


def validate_pages(seq_lens: list[int], page: int, shared: int) -> str:
    if not seq_lens or len(seq_lens) > MAX_SEQS:
        return f"--seq-lens must list 1 to {MAX_SEQS} lengths (got {len(seq_lens)})"
    if any(n < 1 for n in seq_lens):
        return "--seq-lens must all be at least 1"
    if not 1 <= page <= 256:
        return f"--page must be between 1 and 256 (got {page})"
    if shared < 0 or any(shared * page > n for n in seq_lens):
        return (f"--shared {shared}: every sequence must hold the shared prefix, {shared * page} tokens "
                f"({shared} full page{'s' if shared != 1 else ''} of {page}); the shortest has {min(seq_lens)}")
    if sum(-(-n // page) for n in seq_lens) > 200:
        return "too many pages to draw (at most 200): use fewer or shorter sequences, or larger pages"
    return ""


def block_tables(seq_lens: list[int], page: int, shared: int) -> tuple[list[list[int]], int]:
    """A deterministic allocation: the shared prefix pages first, then each sequence's own pages
    handed out round-robin, as a pool serving several requests at once would interleave them."""
    counts = [-(-n // page) for n in seq_lens]
    tables = [list(range(shared)) for _ in seq_lens]
    next_page = shared
    left = [c - shared for c in counts]
    while any(left):
        for b in range(len(seq_lens)):
            if left[b]:
                tables[b].append(next_page)
                next_page += 1
                left[b] -= 1
    return tables, next_page


def pages_summary(seq_lens: list[int], page: int, shared: int) -> Group:
    tables, pool = block_tables(seq_lens, page, shared)
    head = Text()
    head.append("Paged KV cache", style="accent")
    head.append(f"  page size {page}, {plural(len(seq_lens), 'sequence')}, {plural(pool, 'page')} in the pool"
                + (f", {shared} shared prefix page{'s' if shared != 1 else ''}" if shared else "") + "\n")
    head.append("Key t of sequence b is in physical page block_table[b][t // page], slot t % page; "
                "entries past a sequence's last page are -1 (and k_pages[-1] is a real page: never read them).")
    table = Table(title="Block tables (logical page → physical page)", title_justify="left",
                  show_edge=False, pad_edge=False)
    table.add_column("seq", justify="right")
    table.add_column("seq_len", justify="right")
    table.add_column("block table")
    table.add_column("last page", justify="right")
    width = max(len(t) for t in tables) + 1
    for b, (n, row) in enumerate(zip(seq_lens, tables)):
        cells = Text()
        for p in range(width):
            entry = row[p] if p < len(row) else -1
            style = "grey50" if entry < 0 else ("bold" if p < shared else STYLES[b % len(STYLES)])
            cells.append(f"{entry:>3} ", style=style)
        used = n - (len(row) - 1) * page
        table.add_row(str(b), str(n), cells, f"{used}/{page} slots")
    pool_line = Text("Pool: ")
    owner = {}
    for b, row in enumerate(tables):
        for p, entry in enumerate(row):
            owner.setdefault(entry, "S" if p < shared else str(b))
    for entry in range(pool):
        who = owner[entry]
        pool_line.append(f"[{who}]", style="bold" if who == "S" else STYLES[int(who) % len(STYLES)])
    stored = pool * page
    waste = stored - (sum(seq_lens) - shared * page * (len(seq_lens) - 1))  # the shared keys are stored once
    notes = Text(style="grey50")
    notes.append(f"Each pool page is marked by the sequence that owns it (S: shared by all). Unused "
                 f"slots, all in last pages: {waste} of {stored} ({waste / stored:.0%}); a contiguous "
                 f"reservation of max_len = {max(seq_lens)} per sequence would leave "
                 f"{len(seq_lens) * max(seq_lens) - sum(seq_lens)} slots empty.")
    if shared:
        notes.append(f"\nSharing the prefix stores {plural(shared * page * (len(seq_lens) - 1), 'key')} once "
                     "instead of once per sequence. The shared pages drawn here are full, so each sequence "
                     "writes its new keys into pages of its own; PagedAttention also shares a partly filled "
                     "last page, and a sequence that writes into a shared page first copies it "
                     "(copy-on-write).")
    return Group(head, Text(""), table, Text(""), pool_line, Text(""), notes)


# -- drill show splits, drill show pages -------------------------------------------


@click.command(name="splits")
@click.option("--keys", "sk", type=int, default=100, show_default=True, help="Cached keys (sk).")
@click.option("--splits", "num_splits", type=int, default=6, show_default=True, help="Number of splits.")
def show_splits(sk: int, num_splits: int) -> None:
    """Split-KV decoding (FlashDecoding): which split each cached key falls in."""
    reason = validate_splits(sk, num_splits)
    if reason:
        cannot(reason)
    console.print(splits_summary(sk, num_splits))


@click.command(name="pages")
@click.option("--seq-lens", default="37,20,50", show_default=True, help="Comma-separated sequence lengths.")
@click.option("--page", type=int, default=16, show_default=True, help="Tokens per page.")
@click.option("--shared", type=int, default=0, show_default=True, help="Prefix pages shared by every sequence.")
def show_pages(seq_lens: str, page: int, shared: int) -> None:
    """PagedAttention: each sequence's block table and the pages it names in the shared pool."""
    try:
        lens = [int(x) for x in seq_lens.split(",") if x.strip()]
    except ValueError:
        cannot(f"--seq-lens must be comma-separated integers (got {seq_lens!r})")
    reason = validate_pages(lens, page, shared)
    if reason:
        cannot(reason)
    console.print(pages_summary(lens, page, shared))
