"""Why FlashAttention is faster without saving FLOPs: HBM traffic against sequence length.

Counts are per head, forward only, in elements moved between HBM and SRAM (the
tiling-shapes exercise's model), then bytes at a chosen element size:
  standard attention  4·s·d + 4·s²        (Q, K, V, O, plus S and P each written and read)
  FlashAttention-2    2·s·d + 2·Tr·s·d + s (Q and O once, K and V once per Q block, L once)
FLOPs: 4·s²·d (two matmuls, QKᵀ and PV, each 2·s²·d); both methods do the same.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from rich.console import Group
from rich.table import Table
from rich.text import Text

from drill.visual.tiling import ceil_div, formula_flash, formula_standard

# H200 figures from FLASHATTENTION-FACTS.md, for the roofline remark.
HBM_BYTES_PER_S = 4.8e12
MATMUL_FLOPS_PER_S = 794e12  # measured bf16 matmul ceiling on one H200
MAX_S = 1 << 22

_UNITS = {"": None, "b": 1, "kb": 1000, "kib": 1024, "mb": 1000**2, "mib": 1024**2}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*$")


class BadInput(ValueError):
    """One line saying which input is wrong and why."""


def parse_sram(text: str, dtype_bytes: int) -> tuple[int, str]:
    """SRAM size in elements, and how it was read. A bare number is elements; 100KB, 228KiB are bytes."""
    match = _SIZE.match(text)
    if not match or match.group(2).lower() not in _UNITS:
        raise BadInput(f"--sram {text!r} is not a size: write elements (49152) or bytes (100KB, 228KiB)")
    number, unit = float(match.group(1)), match.group(2).lower()
    scale = _UNITS[unit]
    if scale is None:
        if number != int(number):
            raise BadInput(f"--sram {text!r}: a bare number counts elements, so it must be whole")
        elements, how = int(number), f"{int(number):,} elements"
    else:
        elements = int(number * scale) // dtype_bytes
        how = f"{text.strip()} = {elements:,} elements at {dtype_bytes} B/element"
    if elements < 1:
        raise BadInput(f"--sram {text!r} holds no element")
    return elements, how


def block_sizes(m: int, d: int) -> tuple[int, int]:
    """FlashAttention's choice: Bc = ⌈M/(4d)⌉, Br = min(Bc, d), so Q_i, K_j, V_j, O_i fit together."""
    bc = ceil_div(m, 4 * d)
    return min(bc, d), bc


def lengths(s_max: int, start: int = 512) -> list[int]:
    """512, 1024, … up to s_max, and s_max itself when the doubling misses it."""
    if s_max <= start:
        return [s_max]
    out = []
    s = start
    while s <= s_max:
        out.append(s)
        s *= 2
    if out[-1] != s_max:
        out.append(s_max)
    return out


def flops(s: int, d: int) -> int:
    return 4 * s * s * d


@dataclass(frozen=True)
class Row:
    s: int
    standard: int  # elements
    flash: int  # elements
    flops: int

    @property
    def ratio(self) -> float:
        return self.standard / self.flash


def rows(s_max: int, d: int, br: int) -> list[Row]:
    return [Row(s, formula_standard(s, d), formula_flash(s, d, br), flops(s, d)) for s in lengths(s_max)]


def human_bytes(n: float) -> str:
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if n >= size:
            return f"{n / size:.2f} {unit}"
    return f"{n:.0f} B"


def human_flops(n: float) -> str:
    for unit, size in (("TFLOP", 1e12), ("GFLOP", 1e9), ("MFLOP", 1e6)):
        if n >= size:
            return f"{n / size:.2f} {unit}"
    return f"{n:.0f} FLOP"


def traffic_table(table_rows: list[Row], dtype_bytes: int) -> Table:
    table = Table(title=f"HBM traffic per head, forward (elements; bytes at {dtype_bytes} B/element)",
                  title_justify="left", show_edge=False, pad_edge=False)
    for name in ("s", "standard", "flash", "std/flash", "standard B", "flash B"):
        table.add_column(name, justify="right", no_wrap=True)
    for r in table_rows:
        table.add_row(f"{r.s:,}", f"{r.standard:,}", f"{r.flash:,}", f"{r.ratio:.2f}×",
                      human_bytes(r.standard * dtype_bytes), human_bytes(r.flash * dtype_bytes))
    return table


def compute_table(table_rows: list[Row], dtype_bytes: int) -> Table:
    table = Table(title="Arithmetic per head, forward: 4·s²·d FLOPs (QKᵀ and PV, 2·s²·d each), "
                  "the same for both", title_justify="left", show_edge=False, pad_edge=False)
    for name in ("s", "FLOPs", "FLOP/byte std", "FLOP/byte flash", "S+P held in HBM"):
        table.add_column(name, justify="right", no_wrap=True)
    for r in table_rows:
        table.add_row(f"{r.s:,}", human_flops(r.flops),
                      f"{r.flops / (r.standard * dtype_bytes):.1f}", f"{r.flops / (r.flash * dtype_bytes):.1f}",
                      human_bytes(2 * r.s * r.s * dtype_bytes))
    return table


def summary(s_max: int, d: int, br: int, bc: int, sram_how: str, dtype_bytes: int,
            br_given: bool = False) -> Group:
    table_rows = rows(s_max, d, br)
    head = Text()
    head.append("Standard attention vs FlashAttention-2", style="accent")
    head.append(f"  d = {d}, {dtype_bytes} bytes per element\n")
    if br_given:
        head.append(f"SRAM M: {sram_how}\n")
        head.append(f"  → Br = {br} (given), Bc = ⌈M/(4d)⌉ = {bc}\n")
    else:
        head.append(f"SRAM M: {sram_how}\n")
        head.append(f"  → Bc = ⌈M/(4d)⌉ = {bc}, Br = min(Bc, d) = {br}\n")
    head.append("standard = 4·s·d + 4·s²   flash = 2·s·d + 2·Tr·s·d + s   (Tr = ⌈s/Br⌉)", style="grey50")
    limit = 2 * br / d
    ridge = MATMUL_FLOPS_PER_S / HBM_BYTES_PER_S
    notes = Text(style="grey50")
    notes.append(f"Both counts grow as s²: standard ≈ 4·s², flash ≈ 2·s²·d/Br. As s grows the s·d terms "
                 f"fade and the ratio settles at 2·Br/d = {limit:.2f}×: the larger Br, the fewer times K and V "
                 "are re-read. With Br = M/(4d) (no cap at d) flash moves ≈ 8·s²·d²/M elements, the "
                 "Θ(s²d²/M) of the FlashAttention paper. Standard attention also keeps S and P (s² each) "
                 "in HBM; FlashAttention keeps only L (s numbers).\n")
    notes.append(f"Roofline (one H200: 794 TFLOP/s measured bf16 matmul over the 4.8 TB/s datasheet HBM "
                 f"bandwidth): about {ridge:.0f} FLOP per byte of HBM traffic are needed to keep "
                 "the matmul units busy; attention below that is memory-bound, so cutting bytes moved, "
                 "not FLOPs, is what makes it faster.")
    return Group(head, Text(""), traffic_table(table_rows, dtype_bytes), Text(""),
                 compute_table(table_rows, dtype_bytes), Text(""), notes)


def plot(path: str, s_max: int, d: int, br: int, dtype_bytes: int) -> None:
    """Traffic in bytes against s, both methods, log-log. Needs matplotlib (the `plot` extra)."""
    import matplotlib

    matplotlib.use("Agg")  # files only: never open a window
    import matplotlib.pyplot as plt

    table_rows = rows(s_max, d, br)
    xs = [r.s for r in table_rows]
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    ax.loglog(xs, [r.standard * dtype_bytes for r in table_rows], "o-", label="standard: 4sd + 4s²")
    ax.loglog(xs, [r.flash * dtype_bytes for r in table_rows], "s-", label="FlashAttention-2: 2sd + 2·Tr·sd + s")
    ax.set_xscale("log", base=2)
    ax.set_xticks(xs, [f"{x:,}" for x in xs])
    ax.minorticks_off()
    ax.set_xlabel("sequence length s")
    ax.set_ylabel(f"HBM traffic per head, forward (bytes, {dtype_bytes} B/element)")
    ax.set_title(f"Attention HBM traffic, d = {d}, Br = {br}")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    try:
        fig.savefig(path)
    finally:
        plt.close(fig)
