"""The FlashAttention-2 forward loop: which score blocks exist, what sits in SRAM, what moves.

Counting follows the tiling-shapes exercise (DESIGN.md): elements moved between
HBM and SRAM, Q_i read once per row block, K_j and V_j read once per (i, j) pair
that is computed, O_i and its logsumexp L_i written once. Without a mask the total
is 2*s*d + 2*Tr*s*d + s. With a causal mask, a block that is entirely masked is
never visited, so its K_j, V_j loads are not counted.

Causal masks align bottom-right, as in the forward exercise: query q sees key k
when k <= q + (s_k - s_q).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import click
from rich.console import Group
from rich.table import Table
from rich.text import Text

from drill import iocount
from drill.console import console, interactive
from drill.errors import cannot
from drill.visual import check_bytes

FULL, DIAGONAL, SKIP = "full", "diagonal", "skip"
MAX_DRAWN = 48  # blocks per side; a bigger grid would not fit a terminal line
MAX_S = 1 << 24

# Two characters per block so the grid looks square in a terminal.
GLYPHS = {FULL: "██", DIAGONAL: "▚▚", SKIP: "··"}
PENDING = {FULL: "░░", DIAGONAL: "░░", SKIP: "··"}
HIGHLIGHT = "◆◆"
STYLES = {FULL: "blue", DIAGONAL: "cyan", SKIP: "grey50"}


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def validate(s: int, d: int, br: int, bc: int) -> str:
    """Why these sizes cannot be drawn, in one line; '' when they can."""
    for name, value in (("--s", s), ("--d", d), ("--br", br), ("--bc", bc)):
        if value <= 0:
            return f"{name} must be a positive whole number (got {value})"
    if s > MAX_S:
        return f"--s {s} is more than this picture handles ({MAX_S:,}); try a shorter sequence"
    if d > MAX_S:
        return f"--d {d} is not a head dimension (at most {MAX_S:,})"
    return ""


@dataclass(frozen=True)
class Tiling:
    s_q: int
    s_k: int
    d: int
    br: int
    bc: int
    causal: bool = False

    @property
    def tr(self) -> int:
        return ceil_div(self.s_q, self.br)

    @property
    def tc(self) -> int:
        return ceil_div(self.s_k, self.bc)

    def rows(self, i: int) -> tuple[int, int]:
        return i * self.br, min((i + 1) * self.br, self.s_q)

    def cols(self, j: int) -> tuple[int, int]:
        return j * self.bc, min((j + 1) * self.bc, self.s_k)

    def kind(self, i: int, j: int) -> str:
        """full: no entry masked; diagonal: some masked; skip: every entry masked."""
        if not self.causal:
            return FULL
        r0, r1 = self.rows(i)
        c0, c1 = self.cols(j)
        offset = self.s_k - self.s_q
        if c0 > r1 - 1 + offset:
            return SKIP
        if c1 - 1 <= r0 + offset:
            return FULL
        return DIAGONAL

    def visited(self, i: int) -> int:
        """How many column blocks row block i computes (the loop stops at the last unmasked one)."""
        if not self.causal:
            return self.tc
        last_key = self.rows(i)[1] - 1 + self.s_k - self.s_q
        if last_key < 0:
            return 0
        return min(self.tc, last_key // self.bc + 1)

    @property
    def drawable(self) -> bool:
        return self.tr <= MAX_DRAWN and self.tc <= MAX_DRAWN


@dataclass(frozen=True)
class Traffic:
    """HBM elements moved by one forward pass, split by tensor."""
    q_read: int
    kv_read: int
    o_written: int
    l_written: int
    skipped_blocks: int
    computed_blocks: int

    @property
    def reads(self) -> int:
        return self.q_read + self.kv_read

    @property
    def writes(self) -> int:
        return self.o_written + self.l_written

    @property
    def total(self) -> int:
        return self.reads + self.writes


def flash_traffic(t: Tiling) -> Traffic:
    """Totals in O(Tr) arithmetic, so any size can be counted without stepping through it."""
    kv = 0
    computed = 0
    for i in range(t.tr):
        n = t.visited(i)
        computed += n
        kv += 2 * t.d * min(n * t.bc, t.s_k)  # rows of K (and of V) in the first n blocks
    return Traffic(q_read=t.s_q * t.d, kv_read=kv, o_written=t.s_q * t.d, l_written=t.s_q,
                   skipped_blocks=t.tr * t.tc - computed, computed_blocks=computed)


def formula_flash(s: int, d: int, br: int) -> int:
    """The exercise's closed form (no mask): Q once, O once, K and V once per Q block, L once."""
    return iocount.flash_elements(s, d, br)


def formula_standard(s: int, d: int) -> int:
    """Read Q, K, V, write O, and S and P each written once and read once."""
    return iocount.standard_elements(s, d)


@dataclass(frozen=True)
class Step:
    """One (i, j) position of the FlashAttention-2 loop and the HBM traffic up to and including it."""
    index: int
    i: int
    j: int
    kind: str
    read_now: dict[str, int] = field(default_factory=dict)
    written_now: dict[str, int] = field(default_factory=dict)
    reads: int = 0
    writes: int = 0


def steps(t: Tiling):
    """Every (i, j) in loop order, skipped blocks included so a picture can show them."""
    reads = writes = 0
    index = 0
    for i in range(t.tr):
        r0, r1 = t.rows(i)
        for j in range(t.tc):
            c0, c1 = t.cols(j)
            kind = t.kind(i, j)
            read_now: dict[str, int] = {}
            written_now: dict[str, int] = {}
            if j == 0:
                read_now[f"Q_{i}"] = (r1 - r0) * t.d
            if kind != SKIP:
                read_now[f"K_{j}"] = (c1 - c0) * t.d
                read_now[f"V_{j}"] = (c1 - c0) * t.d
            if j == t.tc - 1:
                written_now[f"O_{i}"] = (r1 - r0) * t.d
                written_now[f"L_{i}"] = r1 - r0
            reads += sum(read_now.values())
            writes += sum(written_now.values())
            yield Step(index, i, j, kind, read_now, written_now, reads, writes)
            index += 1


def sram_tiles(t: Tiling, i: int = 0, j: int = 0) -> list[tuple[str, tuple[int, ...], str]]:
    """(name, actual shape at (i, j), what it is) for everything in SRAM during one step."""
    rows = t.rows(i)[1] - t.rows(i)[0]
    cols = t.cols(j)[1] - t.cols(j)[0]
    return [
        ("Q_i", (rows, t.d), "query block, loaded once per i"),
        ("K_j", (cols, t.d), "key block, streamed"),
        ("V_j", (cols, t.d), "value block, streamed"),
        ("S_ij", (rows, cols), "Q_i K_jᵀ · scale, never written to HBM"),
        ("P̃_ij", (rows, cols), "exp(S_ij − m_i), overwrites S_ij"),
        ("O_i", (rows, t.d), "unnormalised output, divided by ℓ_i at the end"),
        ("m_i", (rows,), "running row max"),
        ("ℓ_i", (rows,), "running row sum"),
    ]


def shape_text(shape: tuple[int, ...]) -> str:
    return "[" + ", ".join(str(n) for n in shape) + "]"


def _prod(shape: tuple[int, ...]) -> int:
    out = 1
    for n in shape:
        out *= n
    return out


def sram_elements(t: Tiling, i: int = 0, j: int = 0) -> int:
    """Elements held at once (P̃_ij reuses S_ij's space)."""
    return sum(_prod(shape) for name, shape, _ in sram_tiles(t, i, j) if name != "P̃_ij")


# -- drawing ------------------------------------------------------------------


def render_grid(s_q: int, s_k: int, br: int, bc: int, causal: bool = False,
                highlight: tuple[int, int] | None = None, upto: tuple[int, int] | None = None) -> Text:
    """The s_q × s_k score matrix cut into Br × Bc blocks, one cell per block.

    ██ computed block, ▚▚ computed with some entries masked (causal diagonal),
    ·· skipped (every entry masked), ◆◆ the highlighted block (i, j).
    With `upto`, blocks after that loop position are drawn as not yet computed (░░).
    The result is a rich Text: print it, or take `.plain` for plain text.
    """
    t = Tiling(s_q, s_k, 1, br, bc, causal)
    text = Text()
    if not t.drawable:
        text.append(f"({t.tr}×{t.tc} blocks: too many to draw; larger --br/--bc shrink the grid)",
                    style="muted")
        return text
    label = len(str(t.tr - 1))
    text.append(" " * (label + 2) + f"keys → (j = 0 … {t.tc - 1})\n", style="grey50")
    order = None if upto is None else upto[0] * t.tc + upto[1]
    for i in range(t.tr):
        text.append(f"{i:>{label}} ", style="grey50")
        text.append("│", style="grey50")
        for j in range(t.tc):
            kind = t.kind(i, j)
            if highlight == (i, j):
                text.append(HIGHLIGHT, style="bold red")
            elif order is not None and i * t.tc + j > order:
                text.append(PENDING[kind], style="grey35")
            else:
                text.append(GLYPHS[kind], style=STYLES[kind])
        text.append("│", style="grey50")
        if i < t.tr - 1:
            text.append("\n")
    text.append("\n" + " " * (label + 1) + f"↑ queries (i = 0 … {t.tr - 1})", style="grey50")
    return text


def legend(causal: bool, animated: bool = False, highlight: bool = False) -> Text:
    text = Text()
    text.append(GLYPHS[FULL], style=STYLES[FULL])
    text.append(" computed  ")
    if causal:
        text.append(GLYPHS[DIAGONAL], style=STYLES[DIAGONAL])
        text.append(" computed, partly masked  ")
        text.append(GLYPHS[SKIP], style=STYLES[SKIP])
        text.append(" skipped (fully masked)  ")
    if animated:
        text.append(PENDING[FULL], style="grey35")
        text.append(" not yet  ")
    if highlight:
        text.append(HIGHLIGHT, style="bold red")
        text.append(" this block")
    return text


def sram_table(t: Tiling, i: int = 0, j: int = 0, title: str = "SRAM (one thread block)",
               skipped: bool = False) -> Table:
    """The tiles in SRAM; a skipped block loads no K_j, V_j and forms no S_ij."""
    table = Table(title=title, title_justify="left", show_edge=False, pad_edge=False)
    table.add_column("tile")
    table.add_column("shape", no_wrap=True)
    table.add_column("what it is", style="grey50")
    for name, shape, what in sram_tiles(t, i, j):
        if skipped and name in ("K_j", "V_j", "S_ij", "P̃_ij"):
            continue
        table.add_row(name, shape_text(shape), what)
    return table


def hbm_table(t: Tiling) -> Table:
    s, d = t.s_q, t.d
    table = Table(title="HBM", title_justify="left", show_edge=False, pad_edge=False)
    table.add_column("tensor")
    table.add_column("shape", no_wrap=True)
    table.add_column("traffic", style="grey50")
    table.add_row("Q", shape_text((s, d)), "each Q_i read once")
    table.add_row("K, V", shape_text((t.s_k, d)), "each K_j, V_j read once per row block i")
    table.add_row("O", shape_text((s, d)), "each O_i written once, after its last j")
    table.add_row("L", shape_text((s,)), "logsumexp m + log ℓ per row, for backward")
    table.add_row("S, P", shape_text((s, t.s_k)), "never stored (standard attention writes both)")
    return table


def step_action(t: Tiling, step: Step) -> str:
    """What happens at this step, in words."""
    i, j = step.i, step.j
    parts = []
    if f"Q_{i}" in step.read_now:
        parts.append(f"load Q_{i} {shape_text((t.rows(i)[1] - t.rows(i)[0], t.d))}")
    if step.kind == SKIP:
        parts.append(f"block ({i}, {j}) is entirely masked: skipped, K_{j} and V_{j} are not read")
    else:
        rows = t.rows(i)[1] - t.rows(i)[0]
        cols = t.cols(j)[1] - t.cols(j)[0]
        parts.append(f"load K_{j}, V_{j} {shape_text((cols, t.d))}")
        parts.append(f"S_{i}{j} = Q_{i} K_{j}ᵀ {shape_text((rows, cols))}"
                     + (" (some entries masked)" if step.kind == DIAGONAL else ""))
        parts.append(f"rescale ℓ_{i}, O_{i} by exp(m − m′), add P̃ V_{j}")
    if step.written_now:
        parts.append(f"O_{i} ← O_{i} / ℓ_{i}; write O_{i} and L_{i} to HBM")
    return "; ".join(parts)


def counters(t: Tiling, step: Step, dtype_bytes: int = 2) -> Text:
    total = step.reads + step.writes
    final = flash_traffic(t).total
    text = Text()
    text.append("HBM traffic so far: ")
    text.append(f"{step.reads:,}", style="accent")
    text.append(" elements read, ")
    text.append(f"{step.writes:,}", style="accent")
    text.append(" written = ")
    text.append(f"{total:,}", style="bold")
    text.append(f" of {final:,} ({total * dtype_bytes:,} bytes at {dtype_bytes} B/element)")
    now = {**step.read_now, **{k: -v for k, v in step.written_now.items()}}
    if now:
        moves = ", ".join(f"{'+' if v > 0 else 'wrote '}{name} {abs(v):,}" for name, v in now.items())
        text.append(f"\nthis step: {moves}", style="grey50")
    else:
        text.append("\nthis step: nothing moved", style="grey50")
    return text


def hbm_line(t: Tiling, step: Step) -> Text:
    """The whole tensors in HBM and which rows of them are in SRAM at this step."""
    r0, r1 = t.rows(step.i)
    c0, c1 = t.cols(step.j)
    text = Text("HBM  ", style="accent")
    text.append(f"Q {shape_text((t.s_q, t.d))} rows {r0}:{r1} → Q_{step.i} · ")
    if step.kind == SKIP:
        text.append(f"K, V {shape_text((t.s_k, t.d))} (not read this step) · ")
    else:
        text.append(f"K, V {shape_text((t.s_k, t.d))} rows {c0}:{c1} → K_{step.j}, V_{step.j} · ")
    text.append(f"O {shape_text((t.s_q, t.d))} · L {shape_text((t.s_q,))} · ")
    text.append(f"S, P {shape_text((t.s_q, t.s_k))} never stored", style="grey50")
    return text


def frame(t: Tiling, step: Step, footer: str = "") -> Group:
    """One picture of the loop at `step`: grid, SRAM tiles, counters, the action in words."""
    total = t.tr * t.tc
    head = Text()
    head.append(f"FlashAttention-2 forward  step {step.index + 1}/{total}  ", style="accent")
    head.append(f"row block i = {step.i}, column block j = {step.j}  ({step.kind})")
    grid = render_grid(t.s_q, t.s_k, t.br, t.bc, t.causal, highlight=(step.i, step.j),
                       upto=(step.i, step.j))
    side = Table.grid(padding=(0, 4))
    side.add_column()
    side.add_column()
    skipped = step.kind == SKIP
    side.add_row(grid, sram_table(t, step.i, step.j, skipped=skipped,
                                  title=f"SRAM at (i={step.i}, j={step.j})"
                                  + (": skipped, nothing loaded" if skipped else "")))
    parts = [head, hbm_line(t, step), Text(""), side, legend(t.causal, animated=True, highlight=True), Text(""),
             Text(step_action(t, step)), counters(t, step)]
    if footer:
        parts.append(Text(footer, style="grey50"))
    return Group(*parts)


MAX_TRACE = 64  # loop positions listed in the static summary


def trace_table(t: Tiling, limit: int = MAX_TRACE) -> Table:
    table = Table(title="The loop, step by step (elements moved between HBM and SRAM)",
                  title_justify="left", show_edge=False, pad_edge=False)
    for name, justify in (("step", "right"), ("(i, j)", "left"), ("block", "left"),
                          ("read now", "left"), ("written now", "left"),
                          ("reads so far", "right"), ("writes so far", "right")):
        table.add_column(name, justify=justify, no_wrap=True)
    for step in steps(t):
        if step.index >= limit:
            break
        table.add_row(str(step.index + 1), f"({step.i}, {step.j})", step.kind,
                      " ".join(step.read_now) or "–", " ".join(step.written_now) or "–",
                      f"{step.reads:,}", f"{step.writes:,}")
    return table


def totals(t: Tiling, dtype_bytes: int = 2) -> Text:
    """The final counts, each next to the formula it comes from."""
    s, d = t.s_q, t.d
    flash = flash_traffic(t)
    standard = formula_standard(s, d)
    text = Text()
    text.append("FlashAttention-2 HBM traffic (elements):\n", style="accent")
    text.append(f"  Q read once            s·d        = {flash.q_read:,}\n")
    if t.causal:
        # Each row block reads K and V only up to its last unmasked key block.
        rows_read = flash.kv_read // (2 * d)
        text.append(f"  K, V visited blocks    2·d·(K rows read, summed over row blocks) = 2·{d}·{rows_read:,} "
                    f"= {flash.kv_read:,}  (skipped blocks not read; without the mask 2·Tr·s·d = "
                    f"{2 * t.tr * t.s_k * d:,})\n")
    else:
        text.append(f"  K and V per row block  2·Tr·s·d   = {flash.kv_read:,}\n")
    text.append(f"  O written once         s·d        = {flash.o_written:,}\n")
    text.append(f"  L written once         s          = {flash.l_written:,}\n")
    text.append(f"  reads {flash.reads:,} + writes {flash.writes:,} = ")
    text.append(f"total {flash.total:,}", style="bold")
    text.append(f" elements = {flash.total * dtype_bytes:,} bytes at {dtype_bytes} B/element\n")
    no_mask = formula_flash(s, d, t.br)
    text.append(f"  2·s·d + 2·Tr·s·d + s = 2·{s}·{d} + 2·{t.tr}·{s}·{d} + {s} = {no_mask:,}"
                + (" without the mask\n" if t.causal else "\n"))
    if t.causal:
        saved = no_mask - flash.total
        text.append(f"  causal: {flash.skipped_blocks} of {t.tr * t.tc} blocks are entirely masked and "
                    f"skipped; their K_j, V_j loads are counted as not read ({saved:,} elements saved)\n")
    text.append("Standard attention (S and P written to HBM and read back):\n", style="accent")
    text.append(f"  4·s·d + 4·s² = 4·{s}·{d} + 4·{s}² = ")
    text.append(f"{standard:,}", style="bold")
    text.append(f" elements = {standard * dtype_bytes:,} bytes"
                + (" (it computes every block, masked or not)" if t.causal else "") + "\n")
    text.append(f"standard / flash = {standard / flash.total:.2f}×", style="bold")
    return text


def summary(t: Tiling, dtype_bytes: int = 2) -> Group:
    """The static picture when nothing can be animated: grid, tiles, loop trace, totals."""
    head = Text()
    head.append("FlashAttention-2 forward", style="accent")
    head.append(f"  s = {t.s_q}, d = {t.d}, Br = {t.br}, Bc = {t.bc}"
                + (", causal" if t.causal else "") + "\n")
    head.append(f"Q is cut into Tr = ⌈s/Br⌉ = {t.tr} row blocks, K and V into Tc = ⌈s/Bc⌉ = {t.tc} "
                f"column blocks: {t.tr * t.tc} score blocks S_ij of at most [{t.br}, {t.bc}]. "
                "Outer loop over i (Q_i stays in SRAM), inner loop over j (K_j, V_j stream through).")
    if t.s_q % t.br or t.s_k % t.bc:
        head.append("\nThe last block is ragged (fewer rows than the block size): its loads are "
                    "masked and it moves only the rows that exist.")
    parts = [head, Text("")]
    parts.append(render_grid(t.s_q, t.s_k, t.br, t.bc, t.causal))
    if t.drawable:
        parts.append(legend(t.causal))
    parts += [Text(""), sram_table(t, 0, 0, title="SRAM during step (i, j), shapes of block (0, 0)"),
              Text(f"  about {sram_elements(t):,} elements at once "
                   f"({sram_elements(t) * dtype_bytes:,} bytes at {dtype_bytes} B/element)",
                   style="grey50"),
              Text(""), hbm_table(t), Text("")]
    n = t.tr * t.tc
    parts.append(trace_table(t))
    if n > MAX_TRACE:
        parts.append(Text(f"  … {n - MAX_TRACE:,} more steps", style="grey50"))
    parts += [Text(""), totals(t, dtype_bytes)]
    return Group(*parts)


# -- drill show tiling -------------------------------------------------------------


@click.command(name="tiling")
@click.option("--s", "s", type=int, default=512, show_default=True, help="Sequence length.")
@click.option("--d", "d", type=int, default=64, show_default=True, help="Head dimension.")
@click.option("--br", type=int, default=128, show_default=True, help="Rows per Q block.")
@click.option("--bc", type=int, default=128, show_default=True, help="Rows per K/V block.")
@click.option("--causal", is_flag=True, help="Causal mask: skip blocks that are entirely masked.")
@click.option("--step", "by_key", is_flag=True, help="Advance one (i, j) step per Enter key.")
@click.option("--delay", type=float, default=None, help="Seconds per step when animated (default: ~8 s in all).")
@click.option("--bytes", "dtype_bytes", type=int, default=2, show_default=True,
              help="Bytes per element, for the byte counts (2: fp16/bf16).")
def show_tiling(s: int, d: int, br: int, bc: int, causal: bool, by_key: bool, delay: float | None,
                dtype_bytes: int) -> None:
    """The FlashAttention-2 forward loop over the s×s score grid, with SRAM tiles and HBM traffic.

    Animated on a terminal; a static summary (grid, tiles, loop trace, totals) otherwise.
    """
    reason = validate(s, d, br, bc)
    if reason:
        cannot(reason)
    check_bytes(dtype_bytes)
    if delay is not None and not 0 <= delay <= 60:
        cannot(f"--delay must be between 0 and 60 seconds (got {delay})")
    t = Tiling(s, s, d, br, bc, causal)
    if not interactive() or not t.drawable:
        console.print(summary(t, dtype_bytes))
        return
    try:
        if by_key:
            _step_by_key(t)
        else:
            _animate(t, delay if delay is not None else min(0.6, max(0.03, 8 / (t.tr * t.tc))))
    except KeyboardInterrupt:
        console.print("[muted]stopped[/muted]")
        return
    console.print()
    console.print(totals(t, dtype_bytes))


def _animate(t: Tiling, delay: float) -> None:
    from rich.live import Live

    frames = steps(t)
    first = next(frames)
    with Live(frame(t, first), console=console, refresh_per_second=30, auto_refresh=False) as live:
        time.sleep(delay)
        for step in frames:
            live.update(frame(t, step), refresh=True)
            time.sleep(delay)


def _step_by_key(t: Tiling) -> None:
    for step in steps(t):
        console.clear()
        console.print(frame(t, step, footer="Enter: next step · q then Enter: stop"))
        try:
            key = input()
        except EOFError:
            return
        if key.strip().lower() in ("q", "quit"):
            return
