"""Ring attention: which K/V shard each rank holds at each ring step, and what causal masking skips.

W ranks each hold one shard of Q, K and V. At step t rank r holds the K/V shard that
started on rank (r − t) mod W (each step it passes its shard to r + 1 and receives
from r − 1), attends its Q shard to it, and merges the partial result by logsumexp.

The sequence is cut into 2W equal chunks. Contiguous sharding gives rank r chunks
2r and 2r+1; zigzag gives chunks r and 2W−1−r, so under a causal mask every rank
does the same work at every step after the first.
"""

from __future__ import annotations

from fractions import Fraction

import click
from rich.console import Group
from rich.table import Table
from rich.text import Text

from drill.console import console
from drill.errors import cannot

MAX_WORLD = 8  # a wider table no longer fits a terminal line


def validate(world: int) -> str:
    if world < 1:
        return f"--world must be at least 1 (got {world})"
    if world > MAX_WORLD:
        return (f"--world {world}: at most {MAX_WORLD} ranks fit on a terminal line "
                "(the pattern is the same for more)")
    return ""


def chunks(rank: int, world: int, zigzag: bool) -> tuple[int, int]:
    """The two sequence chunks (of 2W) that a rank's shard holds."""
    return (rank, 2 * world - 1 - rank) if zigzag else (2 * rank, 2 * rank + 1)


def source(rank: int, step: int, world: int) -> int:
    """Which rank's K/V shard `rank` holds at ring step `step`."""
    return (rank - step) % world


def work(q_rank: int, kv_rank: int, world: int, causal: bool, zigzag: bool) -> Fraction:
    """Fraction of the Q-shard × K/V-shard score block that must be computed.

    Chunk pairs: query chunk a against key chunk b is full when b < a, half (the
    diagonal triangle) when b == a, skipped when b > a.
    """
    if not causal:
        return Fraction(1)
    total = Fraction(0)
    for a in chunks(q_rank, world, zigzag):
        for b in chunks(kv_rank, world, zigzag):
            total += 1 if b < a else Fraction(1, 2) if b == a else 0
    return total / 4


def schedule(world: int, causal: bool, zigzag: bool) -> list[list[tuple[int, Fraction]]]:
    """[rank][step] -> (K/V shard held, work fraction)."""
    return [[(source(r, t, world), work(r, source(r, t, world), world, causal, zigzag))
             for t in range(world)] for r in range(world)]


def cell(kv: int, frac: Fraction, compact: bool = False) -> Text:
    """'KV3 full' (or '3:1' in a compact table when many ranks must fit a line)."""
    word = "skip" if frac == 0 else "full" if frac == 1 else str(frac)
    style = "grey50" if frac == 0 else "blue" if frac == 1 else "cyan"
    if compact:
        return Text(f"{kv}:{'–' if frac == 0 else _num(frac)}", style=style)
    return Text(f"KV{kv} {word}", style=style)


def summary(world: int, causal: bool, zigzag: bool) -> Group:
    plan = schedule(world, causal, zigzag)
    layout = "zigzag" if zigzag else "contiguous"
    head = Text()
    head.append("Ring attention", style="accent")
    head.append(f"  W = {world} ranks, {layout} sharding" + (", causal" if causal else "") + "\n")
    head.append("Sequence in 2W chunks; " + ", ".join(
        f"rank {r}: chunks {chunks(r, world, zigzag)[0]},{chunks(r, world, zigzag)[1]}" for r in range(world)))
    head.append("\nAt step t rank r attends its Q shard to K/V shard (r − t) mod W, then sends it to "
                "rank r+1 and receives the next from rank r−1; partial results merge by logsumexp.")
    compact = world > 5
    table = Table(title="K/V shard held at each step, share of its block computed",
                  title_justify="left", show_edge=False, pad_edge=False)
    table.add_column("rank", justify="right")
    for t in range(world):
        table.add_column(f"t={t}" if compact else f"step {t}", no_wrap=True)
    table.add_column("total", justify="right")
    for r in range(world):
        total = sum(f for _, f in plan[r])
        table.add_row(str(r), *[cell(kv, f, compact) for kv, f in plan[r]], _num(total))
    busiest = [max(plan[r][t][1] for r in range(world)) for t in range(world)]
    table.add_row("max", *[Text(_num(b), style="bold") for b in busiest], _num(sum(busiest)),
                  style="bold")
    notes = Text(style="grey50")
    notes.append(("Cells read 'shard:share'. " if compact else "")
                 + "A share is the part of the shard × shard score block computed: 1 (full) = all of it; "
                 "skip (–) = entirely masked, nothing computed (the shard is still passed on).")
    if causal:
        notes.append(" Each shard is two chunks, so the block is four chunk × chunk quarters, each "
                     "computed whole (key chunk earlier), as a triangle (the same chunk) or not at all. ")
        notes.append(pieces_note(world, zigzag))
    notes.append("\n")
    useful = sum(sum(f for _, f in plan[r]) for r in range(world))
    notes.append(f"Each step lasts as long as its busiest rank: {_num(sum(busiest))} block-times in all, "
                 f"for {_num(useful)} blocks of work spread over {world} rank{'s' if world > 1 else ''} "
                 f"(balance {float(useful / world / sum(busiest)) if sum(busiest) else 1:.0%}).")
    if causal and not zigzag and world > 1:
        notes.append("\nContiguous shards leave early ranks idle and the last rank busy at every step; "
                     "--zigzag pairs an early chunk with a late one to even this out.")
    return Group(head, Text(""), table, Text(""), notes)


def quarters(q_rank: int, kv_rank: int, world: int, zigzag: bool) -> tuple[int, int]:
    """(whole quarters, triangles) that a causal step computes: query chunk a against key chunk b."""
    pairs = [(a, b) for a in chunks(q_rank, world, zigzag) for b in chunks(kv_rank, world, zigzag)]
    return sum(1 for a, b in pairs if b < a), sum(1 for a, b in pairs if b == a)


def pieces_note(world: int, zigzag: bool) -> str:
    """What a 1/2 is made of in this layout: the legend follows the schedule, not one picture."""
    made_of = set()
    for r in range(world):
        for t in range(world):
            kv = source(r, t, world)
            if work(r, kv, world, True, zigzag) == Fraction(1, 2):
                made_of.add(quarters(r, kv, world, zigzag))
    words = {(1, 2): "one whole quarter and the two diagonal triangles",
             (2, 0): "two whole quarters, a rectangle (one query chunk against both key chunks, "
                     "or both query chunks against one)",
             (0, 4): "four triangles", (1, 0): "one whole quarter"}
    if not made_of:
        return ""
    return "Here 1/2 is " + "; or ".join(words.get(m, f"{m[0]} whole quarters and {m[1]} triangles")
                                         for m in sorted(made_of, reverse=True)) + "."


def _num(f: Fraction) -> str:
    return str(f) if f.denominator != 1 else str(f.numerator)


# -- drill show ring ---------------------------------------------------------------


@click.command(name="ring")
@click.option("--world", type=int, default=4, show_default=True, help="Number of ranks W.")
@click.option("--causal", is_flag=True, help="Causal mask: show the blocks it skips.")
@click.option("--zigzag", is_flag=True, help="Zigzag sharding (rank r holds chunks r and 2W-1-r).")
def show_ring(world: int, causal: bool, zigzag: bool) -> None:
    """Which K/V shard each rank holds at each ring step, and the work causal masking leaves."""
    reason = validate(world)
    if reason:
        cannot(reason)
    console.print(summary(world, causal, zigzag))
