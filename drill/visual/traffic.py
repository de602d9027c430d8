"""Why FlashAttention is faster without saving FLOPs: HBM traffic against sequence length.

Counts are per head, forward only, in elements moved between HBM and the chip (the
formulas live in drill/iocount.py), then bytes at a chosen element size. The tiles
default to what real kernels use (Br × Bc = 128 × 64); FlashAttention-1's rule for
deriving them from the SRAM size is available with --sram. Besides the paper-style
count, where every pass over K and V comes from HBM, the table shows the count when
those re-reads hit L2, which is what happens on an H100/H200 and why a fused kernel
there is compute-bound.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import click
from rich.console import Group
from rich.table import Table
from rich.text import Text

from drill import iocount
from drill.console import console
from drill.errors import cannot
from drill.visual import check_bytes

# H200 figures for the roofline remark: the datasheet's, and one measured in BENCHMARKS.md.
HBM_BYTES_PER_S = 4.8e12  # datasheet HBM3e bandwidth
PEAK_FLOPS_PER_S = 989e12  # datasheet dense BF16 Tensor Core peak (as the H100 SXM)
MEASURED_ATTENTION_FLOPS_PER_S = 610e12  # SDPA cuDNN, d = 128, 16k tokens, no mask, forward
MEASURED_IN = "BENCHMARKS.md 'Training attention (NVIDIA H200)'"
L2_BYTES = 50e6  # H100 SXM and H200
SMEM_BYTES = 228 * 1024  # shared memory per SM, H100/H200
MAX_S = 1 << 22
DEFAULT_BR, DEFAULT_BC = 128, 64  # FlashAttention-2's forward tile for d = 128

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
    """FlashAttention-1's Algorithm 1: Bc = ⌈M/(4d)⌉, Br = min(Bc, d), so Q_i, K_j, V_j, O_i fit together."""
    bc = iocount.ceil_div(m, 4 * d)
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


@dataclass(frozen=True)
class Row:
    s: int
    d: int
    br: int

    @property
    def standard(self) -> int:
        return iocount.standard_elements(self.s, self.d)

    @property
    def flash(self) -> int:
        """Every pass over K and V read from HBM (the paper-style count, exercise 02)."""
        return iocount.flash_elements(self.s, self.d, self.br)

    @property
    def flash_l2(self) -> int:
        """K and V re-reads served by L2: HBM sees them about once."""
        return iocount.flash_elements_l2(self.s, self.d)

    @property
    def passes(self) -> int:
        return iocount.kv_passes(self.s, self.br)

    @property
    def flops(self) -> int:
        return iocount.flops(self.s, self.d)

    @property
    def ratio(self) -> float:
        return self.standard / self.flash


def rows(s_max: int, d: int, br: int) -> list[Row]:
    return [Row(s, d, br) for s in lengths(s_max)]


def human_bytes(n: float) -> str:
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if n >= size:
            return f"{n / size:.3g} {unit}"
    return f"{n:.0f} B"


def human_flops(n: float) -> str:
    for unit, size in (("TFLOP", 1e12), ("GFLOP", 1e9), ("MFLOP", 1e6)):
        if n >= size:
            return f"{n / size:.4g} {unit}"
    return f"{n:.0f} FLOP"


def traffic_table(table_rows: list[Row]) -> Table:
    table = Table(title="HBM traffic per head, forward, in elements (Tr: passes over K and V)",
                  title_justify="left", show_edge=False, pad_edge=False)
    for name in ("s", "standard", "flash", "std/flash", "Tr", "flash, L2"):
        table.add_column(name, justify="right", no_wrap=True)
    for r in table_rows:
        table.add_row(f"{r.s:,}", f"{r.standard:,}", f"{r.flash:,}", f"{r.ratio:.2f}×", f"{r.passes:,}",
                      f"{r.flash_l2:,}")
    return table


def compute_table(table_rows: list[Row], dtype_bytes: int) -> Table:
    table = Table(title=f"Bytes at {dtype_bytes} B/element, 4·s²·d FLOPs (QKᵀ and PV, 2·s²·d each, the same "
                  "for both) and FLOP per HBM byte", title_justify="left", show_edge=False, pad_edge=False)
    for name in ("s", "FLOPs", "std B", "flash B", "L2 B", "F/B std", "F/B flash", "F/B L2"):
        table.add_column(name, justify="right", no_wrap=True)
    for r in table_rows:
        table.add_row(f"{r.s:,}", human_flops(r.flops), human_bytes(r.standard * dtype_bytes),
                      human_bytes(r.flash * dtype_bytes), human_bytes(r.flash_l2 * dtype_bytes),
                      f"{iocount.intensity(r.flops, r.standard, dtype_bytes):.0f}",
                      f"{iocount.intensity(r.flops, r.flash, dtype_bytes):.0f}",
                      f"{iocount.intensity(r.flops, r.flash_l2, dtype_bytes):.0f}")
    return table


def summary(s_max: int, d: int, br: int, bc: int, dtype_bytes: int, sram_how: str | None = None) -> Group:
    table_rows = rows(s_max, d, br)
    last = table_rows[-1]
    head = Text()
    head.append("Standard attention vs FlashAttention-2", style="accent")
    head.append(f"  d = {d}, {dtype_bytes} bytes per element\n")
    if sram_how:
        head.append(f"SRAM M: {sram_how}\n  → FlashAttention-1's rule: Bc = ⌈M/(4d)⌉ = {bc}, "
                    f"Br = min(Bc, d) = {br}\n")
    else:
        head.append(f"Tiles: Br × Bc = {br} × {bc} (real kernels use 128 × 64 or 128 × 128; "
                    "--sram derives them from SRAM as FlashAttention-1 did)\n")
    tiles = (br + 2 * bc) * d * dtype_bytes
    head.append(f"Q, K, V tiles in shared memory: (Br + 2·Bc)·d = {tiles / 1024:.0f} KiB of "
                f"{SMEM_BYTES // 1024} KiB per SM; S, P and the O accumulator live in registers\n")
    head.append("standard = 4·s·d + 4·s²   flash = 2·s·d + 2·Tr·s·d + s (Tr = ⌈s/Br⌉)   "
                "flash, K/V from L2 = 4·s·d + s", style="grey50")
    ridge = PEAK_FLOPS_PER_S / HBM_BYTES_PER_S
    kv_bytes = 2 * last.s * d * dtype_bytes
    no_l2 = iocount.intensity(last.flops, last.flash, dtype_bytes)
    with_l2 = iocount.intensity(last.flops, last.flash_l2, dtype_bytes)
    notes = Text(style="grey50")
    notes.append(f"Standard attention also keeps S and P in HBM ({human_bytes(2 * last.s ** 2 * dtype_bytes)} "
                 f"at s = {last.s:,}); FlashAttention keeps only L, s numbers.\n")
    notes.append(f"K/V re-reads: the loop streams all of K and V once per Q block, Tr = ⌈s/Br⌉ times "
                 f"({last.passes:,} at s = {last.s:,}); Bc only sets how many tiles a pass takes. Counted "
                 f"that way flash moves ≈ 2·s²·d/Br elements and the ratio to standard settles at "
                 f"2·Br/d = {2 * br / d:.2f}×: the larger Br, the fewer passes. The paper's Θ(s²d²/M) "
                 "(Theorem 2) counts FlashAttention-1's order instead: K/V blocks outside, Q and O re-read "
                 "once per K/V block, Tc = ⌈s/Bc⌉ ≈ 4sd/M times with Bc = ⌈M/(4d)⌉. In the Q-outside order "
                 "its Br = min(⌈M/(4d)⌉, d) stops at d whenever M > 4d², and 2·s²·d/Br is then 2·s², "
                 "not Θ(s²d²/M).\n")
    notes.append(f"On a modern GPU most of those passes never reach HBM: the thread blocks working on "
                 f"one head run at the same time and read the same K/V tiles, and one head's K and V "
                 f"({human_bytes(kv_bytes)} at s = {last.s:,}) "
                 f"{'fit' if kv_bytes <= L2_BYTES else 'do not fit'} in the {L2_BYTES / 1e6:.0f} MB L2 of "
                 "an H100/H200, so the re-reads mostly hit L2 and HBM sees K and V about once "
                 "(the 'K/V from L2' column).\n")
    notes.append(f"Roofline (one H200, datasheet figures: {PEAK_FLOPS_PER_S / 1e12:.0f} TFLOP/s dense BF16 "
                 f"over {HBM_BYTES_PER_S / 1e12:.1f} TB/s): the ridge is ≈ {ridge:.0f} FLOP per byte of HBM traffic. Standard attention "
                 f"sits far below it (memory-bound; even its QKᵀ alone does only ≈ d FLOP/byte). At "
                 f"s = {last.s:,} FlashAttention-2 does {no_l2:.0f} FLOP/byte if every pass came from HBM "
                 f"({'above' if no_l2 >= ridge else 'below'} the ridge) and {with_l2:.0f} with K/V reuse in L2: "
                 "far above it, so a fused kernel on an H100/H200 is compute-bound, limited by the "
                 "Tensor Cores and the exponentials, not by HBM. Measured on an H200: SDPA's cuDNN "
                 f"forward at {MEASURED_ATTENTION_FLOPS_PER_S / 1e12:.0f} TFLOP/s (d = 128, 16k tokens), "
                 f"{MEASURED_ATTENTION_FLOPS_PER_S / PEAK_FLOPS_PER_S:.0%} of that peak ({MEASURED_IN}). "
                 "Cutting bytes is what moved "
                 "attention from the bandwidth roof to the compute roof.")
    return Group(head, Text(""), traffic_table(table_rows), Text(""),
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
    ax.loglog(xs, [r.flash_l2 * dtype_bytes for r in table_rows], "^--", label="FlashAttention-2, K/V from L2: 4sd + s")
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


# -- drill show io -----------------------------------------------------------------


@click.command(name="io")
@click.option("--s", "s_max", type=int, default=16384, show_default=True,
              help="Longest sequence in the table (it doubles from 512 up to this).")
@click.option("--d", "d", type=int, default=128, show_default=True, help="Head dimension.")
@click.option("--br", type=int, default=None, help="Rows per Q block (default 128, a real kernel's tile).")
@click.option("--bc", type=int, default=None, help="Rows per K/V block (default 64).")
@click.option("--sram", default=None,
              help="Derive Br, Bc from SRAM as FlashAttention-1 did: elements (49152) or bytes (100KB, 228KiB).")
@click.option("--bytes", "dtype_bytes", type=int, default=2, show_default=True,
              help="Bytes per element (2: fp16/bf16, 4: fp32).")
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False), default=None,
              help="Also draw traffic against s into this PNG (needs matplotlib).")
def show_io(s_max: int, d: int, br: int | None, bc: int | None, sram: str | None, dtype_bytes: int,
            plot_path: str | None) -> None:
    """HBM traffic, K/V re-reads, FLOPs and the roofline of standard attention and FlashAttention-2."""
    if s_max <= 0 or s_max > MAX_S:
        cannot(f"--s must be between 1 and {MAX_S:,} (got {s_max})")
    if d <= 0 or d > 65536:
        cannot(f"--d must be a positive head dimension (got {d})")
    for name, value in (("--br", br), ("--bc", bc)):
        if value is not None and not 0 < value <= MAX_S:
            cannot(f"{name} must be a positive whole number of rows (got {value})")
    check_bytes(dtype_bytes)
    how = None
    auto_br, auto_bc = DEFAULT_BR, DEFAULT_BC
    if sram is not None:
        try:
            m, how = parse_sram(sram, dtype_bytes)
        except BadInput as exc:
            cannot(str(exc))
        auto_br, auto_bc = block_sizes(m, d)
    if plot_path and not Path(plot_path).expanduser().resolve().parent.is_dir():
        cannot(f"--plot {plot_path}: its folder does not exist")
    if plot_path and not _has_matplotlib():
        cannot("--plot needs matplotlib: pip install 'mlsys-drill[plot]' (or pip install matplotlib)")
    br, bc = br or auto_br, bc or auto_bc
    console.print(summary(s_max, d, br, bc, dtype_bytes, how if (br, bc) == (auto_br, auto_bc) else None))
    if plot_path:
        _plot(plot_path, s_max, d, br, dtype_bytes)


def _plot(path: str, s_max: int, d: int, br: int, dtype_bytes: int) -> None:
    try:
        plot(path, s_max, d, br, dtype_bytes)
    except (OSError, ValueError) as exc:
        cannot(f"could not write the plot to {path}: {exc}")
    console.print(f"wrote [accent]{path}[/accent]")


def _has_matplotlib() -> bool:
    # Asked before the table is printed, so a missing matplotlib is the only output.
    import importlib.util

    try:
        return importlib.util.find_spec("matplotlib") is not None
    except (ImportError, ValueError):  # a None entry in sys.modules (blocked) raises ValueError
        return False
