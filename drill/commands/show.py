"""drill show: draw the algorithms in the terminal (tiling, online softmax, IO, ring)."""

from __future__ import annotations

import time
from pathlib import Path

import click

from drill.console import console, interactive
from drill.errors import cannot


WORKED_EXAMPLE = ("1", "3", "2", "5")  # the row of exercise 01's docstring and its cards


def _check_bytes(dtype_bytes: int) -> None:
    if not 1 <= dtype_bytes <= 16:
        cannot(f"--bytes must be the size of one element, 1 to 16 (got {dtype_bytes})")


@click.group(name="show", invoke_without_command=True)
@click.pass_context
def command(ctx: click.Context) -> None:
    """Draw the algorithm in the terminal.

    \b
      drill show tiling --causal            # the FlashAttention-2 loop, block by block
      drill show online-softmax 1 3 2 5     # running max, sum and rescale per block
      drill show io --s 16384 --br 128 --bc 64   # HBM traffic, K/V re-reads, roofline
      drill show ring --world 4 --zigzag    # ring attention's K/V shards per step
      drill show splits --keys 1000 --splits 6          # split-KV decoding: which split holds each key
      drill show pages --seq-lens 37,12,50 --shared 1   # a paged KV cache: block tables and the pool
    """
    if ctx.invoked_subcommand is None:
        click.echo(ctx.get_help())


@command.command(name="tiling")
@click.option("--s", "s", type=int, default=512, show_default=True, help="Sequence length.")
@click.option("--d", "d", type=int, default=64, show_default=True, help="Head dimension.")
@click.option("--br", type=int, default=128, show_default=True, help="Rows per Q block.")
@click.option("--bc", type=int, default=128, show_default=True, help="Rows per K/V block.")
@click.option("--causal", is_flag=True, help="Causal mask: skip blocks that are entirely masked.")
@click.option("--step", "by_key", is_flag=True, help="Advance one (i, j) step per Enter key.")
@click.option("--delay", type=float, default=None, help="Seconds per step when animated (default: ~8 s in all).")
@click.option("--bytes", "dtype_bytes", type=int, default=2, show_default=True,
              help="Bytes per element, for the byte counts (2: fp16/bf16).")
def tiling(s: int, d: int, br: int, bc: int, causal: bool, by_key: bool, delay: float | None,
           dtype_bytes: int) -> None:
    """The FlashAttention-2 forward loop over the s×s score grid, with SRAM tiles and HBM traffic.

    Animated on a terminal; a static summary (grid, tiles, loop trace, totals) otherwise.
    """
    from drill.visual import tiling as tv

    reason = tv.validate(s, d, br, bc)
    if reason:
        cannot(reason)
    _check_bytes(dtype_bytes)
    if delay is not None and not 0 <= delay <= 60:
        cannot(f"--delay must be between 0 and 60 seconds (got {delay})")
    t = tv.Tiling(s, s, d, br, bc, causal)
    if not interactive() or not t.drawable:
        console.print(tv.summary(t, dtype_bytes))
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
    console.print(tv.totals(t, dtype_bytes))


def _animate(t, delay: float) -> None:
    from rich.live import Live

    from drill.visual import tiling as tv

    frames = tv.steps(t)
    first = next(frames)
    with Live(tv.frame(t, first), console=console, refresh_per_second=30, auto_refresh=False) as live:
        time.sleep(delay)
        for step in frames:
            live.update(tv.frame(t, step), refresh=True)
            time.sleep(delay)


def _step_by_key(t) -> None:
    from drill.visual import tiling as tv

    for step in tv.steps(t):
        console.clear()
        console.print(tv.frame(t, step, footer="Enter: next step · q then Enter: stop"))
        try:
            key = input()
        except EOFError:
            return
        if key.strip().lower() in ("q", "quit"):
            return


@command.command(name="online-softmax", context_settings={"ignore_unknown_options": True})
@click.argument("values", nargs=-1, metavar="X...")
@click.option("--block", type=int, default=2, show_default=True, help="Entries per block.")
def online_softmax(values: tuple[str, ...], block: int) -> None:
    """Stream one row X... in blocks: running max m, sum ℓ and the rescale factor after each.

    Without X, the worked example: 1 3 2 5 in blocks of 2.

    \b
    Example (the card's row):  drill show online-softmax 1 3 2 5 --block 2
    -inf masks an entry; commas work as separators too.
    """
    from drill.visual import online_softmax as ov

    if block < 1:
        cannot(f"--block must be at least 1 (got {block})")
    if not values:
        # No row given: the worked example of exercise 01 and its cards, in blocks of two.
        values = WORKED_EXAMPLE
        console.print("No numbers given: the worked example, row (1 3 | 2 5) in blocks of "
                      f"{block}. Give your own: drill show online-softmax 4 -1 0 7", style="muted",
                      soft_wrap=True)
    try:
        row = ov.parse_values(values)
    except ov.BadRow as exc:
        cannot(str(exc))
    console.print(ov.summary(row, block))


@command.command(name="io")
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
def io(s_max: int, d: int, br: int | None, bc: int | None, sram: str | None, dtype_bytes: int,
       plot_path: str | None) -> None:
    """HBM traffic, K/V re-reads, FLOPs and the roofline of standard attention and FlashAttention-2."""
    from drill.visual import traffic as iov

    if s_max <= 0 or s_max > iov.MAX_S:
        cannot(f"--s must be between 1 and {iov.MAX_S:,} (got {s_max})")
    if d <= 0 or d > 65536:
        cannot(f"--d must be a positive head dimension (got {d})")
    for name, value in (("--br", br), ("--bc", bc)):
        if value is not None and not 0 < value <= iov.MAX_S:
            cannot(f"{name} must be a positive whole number of rows (got {value})")
    _check_bytes(dtype_bytes)
    how = None
    auto_br, auto_bc = iov.DEFAULT_BR, iov.DEFAULT_BC
    if sram is not None:
        try:
            m, how = iov.parse_sram(sram, dtype_bytes)
        except iov.BadInput as exc:
            cannot(str(exc))
        auto_br, auto_bc = iov.block_sizes(m, d)
    if plot_path and not Path(plot_path).expanduser().resolve().parent.is_dir():
        cannot(f"--plot {plot_path}: its folder does not exist")
    if plot_path and not _has_matplotlib():
        cannot("--plot needs matplotlib: pip install 'mlsys-drill[plot]' (or pip install matplotlib)")
    br, bc = br or auto_br, bc or auto_bc
    console.print(iov.summary(s_max, d, br, bc, dtype_bytes, how if (br, bc) == (auto_br, auto_bc) else None))
    if plot_path:
        _plot(plot_path, s_max, d, br, dtype_bytes)


def _plot(path: str, s_max: int, d: int, br: int, dtype_bytes: int) -> None:
    from drill.visual import traffic as iov

    try:
        iov.plot(path, s_max, d, br, dtype_bytes)
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


@command.command(name="ring")
@click.option("--world", type=int, default=4, show_default=True, help="Number of ranks W.")
@click.option("--causal", is_flag=True, help="Causal mask: show the blocks it skips.")
@click.option("--zigzag", is_flag=True, help="Zigzag sharding (rank r holds chunks r and 2W-1-r).")
def ring(world: int, causal: bool, zigzag: bool) -> None:
    """Which K/V shard each rank holds at each ring step, and the work causal masking leaves."""
    from drill.visual import ring as rv

    reason = rv.validate(world)
    if reason:
        cannot(reason)
    console.print(rv.summary(world, causal, zigzag))


@command.command(name="splits")
@click.option("--keys", "sk", type=int, default=100, show_default=True, help="Cached keys (sk).")
@click.option("--splits", "num_splits", type=int, default=6, show_default=True, help="Number of splits.")
def splits(sk: int, num_splits: int) -> None:
    """Split-KV decoding (FlashDecoding): which split each cached key falls in."""
    from drill.visual import decode as dv

    reason = dv.validate_splits(sk, num_splits)
    if reason:
        cannot(reason)
    console.print(dv.splits_summary(sk, num_splits))


@command.command(name="pages")
@click.option("--seq-lens", default="37,12,50", show_default=True, help="Comma-separated sequence lengths.")
@click.option("--page", type=int, default=16, show_default=True, help="Tokens per page.")
@click.option("--shared", type=int, default=0, show_default=True, help="Prefix pages shared by every sequence.")
def pages(seq_lens: str, page: int, shared: int) -> None:
    """PagedAttention: each sequence's block table and the pages it names in the shared pool."""
    from drill.visual import decode as dv

    try:
        lens = [int(x) for x in seq_lens.split(",") if x.strip()]
    except ValueError:
        cannot(f"--seq-lens must be comma-separated integers (got {seq_lens!r})")
    reason = dv.validate_pages(lens, page, shared)
    if reason:
        cannot(reason)
    console.print(dv.pages_summary(lens, page, shared))
