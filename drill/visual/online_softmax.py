"""Online softmax over one row, block by block: the running max m, sum ℓ and rescale factor.

After each block: m' = max(m, max(block)); ℓ' = exp(m − m')·ℓ + Σ exp(x − m').
The start state is m = −inf, ℓ = 0. The final ℓ equals the one-pass sum, so the
softmax exp(x − m)/ℓ is exact.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import click
from rich.console import Group
from rich.table import Table
from rich.text import Text

from drill.console import console
from drill.errors import cannot

MAX_VALUES = 10_000
MAX_PROBS = 32  # probabilities listed after the table

_WORDS = {"inf": math.inf, "+inf": math.inf, "infinity": math.inf, "+infinity": math.inf,
          "-inf": -math.inf, "-infinity": -math.inf, "∞": math.inf, "-∞": -math.inf}


class BadRow(ValueError):
    """The row cannot be streamed; the message says why in one line."""


def parse_values(texts: list[str] | tuple[str, ...]) -> list[float]:
    """Numbers from the command line: '1 3 2 5', '1,3,2,5', '-inf' and 'inf' spelled out."""
    values = []
    for text in texts:
        for piece in text.replace(",", " ").split():
            word = piece.strip().lower().replace("−", "-")
            if word in _WORDS:
                values.append(_WORDS[word])
                continue
            try:
                value = float(word)
            except ValueError:
                raise BadRow(f"{piece!r} is not a number (write numbers like 1, -2.5, 1e4 or -inf)") from None
            if math.isnan(value):
                raise BadRow("nan is not a logit: the softmax of a row with NaN is NaN")
            values.append(value)
    if not values:
        raise BadRow("give the row's numbers, e.g. drill show online-softmax 1 3 2 5 --block 2")
    if len(values) > MAX_VALUES:
        raise BadRow(f"{len(values):,} numbers is more than this table shows ({MAX_VALUES:,})")
    if any(v == math.inf for v in values):
        raise BadRow("+inf has no softmax (exp(+inf − +inf) is undefined); use -inf to mask an entry")
    if all(v == -math.inf for v in values):
        raise BadRow("every entry is -inf: the row has no softmax (0/0); real kernels return 0 for it")
    return values


@dataclass(frozen=True)
class BlockStep:
    index: int
    values: tuple[float, ...]
    block_max: float
    m_old: float
    m_new: float
    scale: float  # exp(m_old − m_new): how much the old ℓ shrinks
    l_old: float
    block_sum: float  # Σ exp(x − m_new) over this block
    l_new: float


def stream(values: list[float], block: int) -> list[BlockStep]:
    """The state after each block, starting from m = −inf, ℓ = 0."""
    if block < 1:
        raise BadRow(f"--block must be at least 1 (got {block})")
    m, l = -math.inf, 0.0
    out = []
    for index, start in enumerate(range(0, len(values), block)):
        chunk = tuple(values[start:start + block])
        block_max = max(chunk)
        m_new = max(m, block_max)
        if m_new == -math.inf:
            # Everything so far is masked: nothing to rescale yet, ℓ stays 0.
            scale, block_sum = 1.0, 0.0
        else:
            scale = math.exp(m - m_new)  # exp(−inf) = 0 on the first finite block
            block_sum = sum(math.exp(x - m_new) for x in chunk)
        l_new = scale * l + block_sum
        out.append(BlockStep(index, chunk, block_max, m, m_new, scale, l, block_sum, l_new))
        m, l = m_new, l_new
    return out


def softmax(values: list[float]) -> list[float]:
    """The one-pass reference: subtract the max, exponentiate, divide by the sum."""
    m = max(values)
    e = [math.exp(x - m) for x in values]
    total = sum(e)
    return [x / total for x in e]


def fmt(x: float) -> str:
    if x == -math.inf:
        return "-inf"
    if x == math.inf:
        return "inf"
    if x != 0 and (abs(x) >= 1e6 or abs(x) < 1e-4):
        return f"{x:.4e}"
    if abs(x) >= 1000:
        return f"{x:.6g}"  # 10000, not 10000.0000: keeps the table narrow
    return f"{x:.4f}"


def table(steps: list[BlockStep]) -> Table:
    out = Table(title="Online softmax, one block at a time (start: m = -inf, ℓ = 0)",
                title_justify="left", show_edge=False, pad_edge=False,
                caption="rescale = exp(m_old − m_new);  ℓ_new = rescale · ℓ_old + Σ exp(x − m_new)",
                caption_justify="left")
    for name in ("block", "entries", "m_old", "m_new", "rescale", "ℓ_old", "Σ e^(x−m_new)", "ℓ_new"):
        out.add_column(name, justify="left" if name in ("block", "entries") else "right")
    for st in steps:
        scale = fmt(st.scale) if st.m_new != -math.inf else "– (all -inf so far)"
        out.add_row(str(st.index + 1), entries(st.values), fmt(st.m_old),
                    fmt(st.m_new), scale, fmt(st.l_old), fmt(st.block_sum), fmt(st.l_new))
    return out


def entries(values: tuple[float, ...]) -> str:
    shown = [fmt_entry(x) for x in values]
    if len(shown) > 4:
        shown = shown[:2] + [f"…({len(values)})"] + shown[-1:]
    return " ".join(shown)


def fmt_entry(x: float) -> str:
    if math.isinf(x):
        return fmt(x)
    return f"{x:g}"


def summary(values: list[float], block: int) -> Group:
    steps = stream(values, block)
    last = steps[-1]
    probs = softmax(values)
    one_pass = sum(math.exp(x - max(values)) for x in values)
    text = Text()
    text.append(f"Final state: m = {fmt(last.m_new)}, ℓ = {fmt(last.l_new)}; "
                f"logsumexp L = m + log ℓ = {fmt(last.m_new + math.log(last.l_new))}\n")
    text.append(f"One pass over the whole row: max = {fmt(max(values))}, Σ exp(x − max) = {fmt(one_pass)}"
                " (the same ℓ: online softmax is exact)\n")
    text.append("Softmax exp(x − m) / ℓ:\n", style="accent")
    pairs = [f"{fmt_entry(x)}→{p:.4f}" for x, p in zip(values, probs)]  # one word: never split
    if len(pairs) > MAX_PROBS:
        pairs = pairs[:MAX_PROBS] + [f"… {len(pairs) - MAX_PROBS:,} more"]
    text.append("  " + "  ".join(pairs))
    text.append(f"\n  (sums to {sum(probs):.4f})", style="grey50")
    note = Text("Whenever a block raises the max, the old ℓ (and, in attention, the old output O) "
                "is multiplied by exp(m_old − m_new) ≤ 1, so nothing overflows.", style="grey50")
    return Group(table(steps), Text(""), text, Text(""), note)


# -- drill show online-softmax -----------------------------------------------------

WORKED_EXAMPLE = ("1", "3", "2", "5")  # the row of exercise 01's docstring and its cards


@click.command(name="online-softmax", context_settings={"ignore_unknown_options": True})
@click.argument("values", nargs=-1, metavar="X...")
@click.option("--block", type=int, default=2, show_default=True, help="Entries per block.")
def show_online_softmax(values: tuple[str, ...], block: int) -> None:
    """Stream one row X... in blocks: running max m, sum ℓ and the rescale factor after each.

    Without X, the worked example: 1 3 2 5 in blocks of 2.

    \b
    Example (the card's row):  drill show online-softmax 1 3 2 5 --block 2
    -inf masks an entry; commas work as separators too.
    """
    if block < 1:
        cannot(f"--block must be at least 1 (got {block})")
    if not values:
        # No row given: the worked example of exercise 01 and its cards, in blocks of two.
        values = WORKED_EXAMPLE
        console.print("No numbers given: the worked example, row (1 3 | 2 5) in blocks of "
                      f"{block}. Give your own: drill show online-softmax 4 -1 0 7", style="muted",
                      soft_wrap=True)
    try:
        row = parse_values(values)
    except BadRow as exc:
        cannot(str(exc))
    console.print(summary(row, block))
