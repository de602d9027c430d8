"""`drill show` driven as a user would (no TTY): the numbers it prints are checked
against values computed here, independently, from the formulas."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from drill import paths
from drill.cli import cli


def run(*args: str, **kwargs):
    return CliRunner().invoke(cli, ["show", *args], **kwargs)


def one_line_failure(result, *words: str) -> None:
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1, result.output
    for word in words:
        assert word in lines[0], lines[0]


# -- online softmax -------------------------------------------------------------


def test_online_softmax_worked_example_from_the_card():
    result = run("online-softmax", "1", "3", "2", "5", "--block", "2")
    assert result.exit_code == 0, result.output
    out = result.output
    # After block (1, 3): m = 3, l = e^-2 + 1; after (2, 5): m = 5, l rescaled by e^-2.
    l1 = math.exp(1 - 3) + 1
    l2 = l1 * math.exp(3 - 5) + math.exp(2 - 5) + 1
    assert f"{l1:.4f}" == "1.1353" and f"{l2:.4f}" == "1.2034"
    rows = [line for line in out.splitlines() if line.lstrip().startswith(("1 ", "2 "))]
    assert "1.1353" in rows[0] and "3.0000" in rows[0]
    assert "1.2034" in rows[1] and f"{math.exp(-2):.4f}" in rows[1]  # the rescale factor
    total = sum(math.exp(x - 5) for x in (1, 3, 2, 5))
    for x in (1, 3, 2, 5):
        assert f"{x}→{math.exp(x - 5) / total:.4f}" in out


def test_online_softmax_without_numbers_shows_the_worked_example():
    result = run("online-softmax")
    assert result.exit_code == 0, result.output
    assert "worked example" in result.output and "(1 3 | 2 5)" in result.output
    assert "1.1353" in result.output and "1.2034" in result.output


def test_online_softmax_accepts_commas_and_minus_inf():
    result = run("online-softmax", "1,-inf", "-inf", "2", "--block", "1")
    assert result.exit_code == 0, result.output
    out = result.output
    assert "-inf→0.0000" in out
    p1 = math.exp(1 - 2) / (math.exp(1 - 2) + 1)
    assert f"1→{p1:.4f}" in out and f"2→{1 - p1:.4f}" in out


def test_online_softmax_extreme_logits_stay_finite():
    result = run("online-softmax", "1e4", "-1e4", "3", "1e4", "--block", "2")
    assert result.exit_code == 0, result.output
    assert "nan" not in result.output.lower()
    assert "10000→0.5000" in result.output


@pytest.mark.parametrize("args, word", [
    (["1", "foo"], "'foo' is not a number"),
    (["1", "nan"], "nan"),
    (["1", "inf"], "+inf"),
    (["-inf", "-inf"], "every entry is -inf"),
    ([","], "give the row's numbers"),
    (["1", "2", "--block", "0"], "--block"),
])
def test_online_softmax_rejects_bad_rows_in_one_line(args, word):
    one_line_failure(run("online-softmax", *args), word)


# -- tiling ---------------------------------------------------------------------


def flash_total(s, d, br):
    tr = -(-s // br)
    return 2 * s * d + 2 * tr * s * d + s


def causal_total(s, d, br, bc):
    """Element by element: a block is read only if some query in it sees some key in it."""
    tr, tc = -(-s // br), -(-s // bc)
    kv = 0
    skipped = 0
    for i in range(tr):
        last_q = min((i + 1) * br, s) - 1
        for j in range(tc):
            keys = range(j * bc, min((j + 1) * bc, s))
            if any(k <= last_q for k in keys):
                kv += 2 * len(keys) * d
            else:
                skipped += 1
    return 2 * s * d + kv + s, skipped


def test_tiling_default_counts_match_the_exercise_formula():
    result = run("tiling")
    assert result.exit_code == 0, result.output
    s, d, br = 512, 64, 128
    out = result.output
    assert f"total {flash_total(s, d, br):,} elements" in out
    assert f"{4 * s * d + 4 * s * s:,}" in out
    assert "Tr = ⌈s/Br⌉ = 4" in out
    # SRAM tiles with their shapes.
    for tile, shape in (("Q_i", "[128, 64]"), ("K_j", "[128, 64]"), ("S_ij", "[128, 128]"),
                        ("O_i", "[128, 64]"), ("m_i", "[128]")):
        assert any(line.startswith(tile) and shape in line for line in out.splitlines()), tile
    # The loop trace ends with every read and write counted: Q + 4·(K + V) reads, O + L writes.
    last = [line for line in out.splitlines() if line.strip().startswith("16 ")][0]
    assert f"{s * d + 4 * 2 * s * d:,}" in last and f"{s * d + s:,}" in last


def test_tiling_ragged_blocks():
    result = run("tiling", "--s", "300", "--d", "32", "--br", "64", "--bc", "48")
    assert result.exit_code == 0, result.output
    assert f"total {flash_total(300, 32, 64):,} elements" in result.output
    assert "ragged" in result.output


@pytest.mark.parametrize("s, br, bc", [(512, 128, 128), (300, 64, 32), (256, 32, 64), (100, 100, 7)])
def test_tiling_causal_skips_masked_blocks_and_does_not_count_their_loads(s, br, bc):
    result = run("tiling", "--s", str(s), "--br", str(br), "--bc", str(bc), "--causal")
    assert result.exit_code == 0, result.output
    total, skipped = causal_total(s, 64, br, bc)
    assert f"total {total:,} elements" in result.output
    tr, tc = -(-s // br), -(-s // bc)
    assert f"{skipped} of {tr * tc} blocks are entirely masked" in result.output
    assert "not read" in result.output


def test_tiling_causal_grid_marks_skipped_blocks():
    result = run("tiling", "--causal")  # 4 × 4 blocks: 6 above the diagonal
    grid = [line for line in result.output.splitlines() if "│" in line and line[:2].strip().isdigit()]
    grid = [line for line in grid if "┃" not in line and "(" not in line]
    assert len(grid) == 4
    assert sum(line.count("··") for line in grid) == 6
    assert sum(line.count("▚▚") for line in grid) == 4


def test_tiling_too_many_blocks_still_counts():
    result = run("tiling", "--s", "65536", "--br", "16", "--bc", "16")
    assert result.exit_code == 0, result.output
    assert "too many to draw" in result.output
    assert f"total {flash_total(65536, 64, 16):,} elements" in result.output


@pytest.mark.parametrize("args, word", [
    (["--s", "0"], "--s"), (["--s", "-5"], "--s"), (["--d", "0"], "--d"),
    (["--br", "0"], "--br"), (["--bc", "-1"], "--bc"), (["--bytes", "0"], "--bytes"),
    (["--s", str(1 << 30)], "--s"),
])
def test_tiling_rejects_bad_sizes_in_one_line(args, word):
    one_line_failure(run("tiling", *args), word)


def test_tiling_animates_and_steps_when_interactive(monkeypatch):
    import drill.visual.tiling as tiling

    monkeypatch.setattr(tiling, "interactive", lambda: True)
    result = run("tiling", "--s", "256", "--delay", "0")
    assert result.exit_code == 0, result.output
    assert f"total {flash_total(256, 64, 128):,} elements" in result.output
    stepped = run("tiling", "--s", "256", "--step", input="\n\nq\n")
    assert stepped.exit_code == 0, stepped.output
    assert "step 3/4" in stepped.output and "step 4/4" not in stepped.output


def test_render_grid_highlights_one_block():
    from drill.visual.tiling import render_grid

    plain = render_grid(512, 512, 128, 128, causal=True, highlight=(2, 1)).plain
    rows = [line for line in plain.splitlines() if "│" in line]
    assert len(rows) == 4
    assert plain.count("◆◆") == 1 and "◆◆" in rows[2]
    assert rows[2].index("◆◆") == rows[2].index("│") + 1 + 2 * 1
    # s_q ≠ s_k: bottom-right alignment, the last query row block sees every key.
    rect = render_grid(128, 512, 64, 64, causal=True).plain
    rect_rows = [line for line in rect.splitlines() if "│" in line]
    assert len(rect_rows) == 2 and "··" not in rect_rows[1].split("│")[1][:-2]
    assert rect_rows[0].count("··") == 1


# -- io -------------------------------------------------------------------------


def test_io_table_matches_the_formulas():
    result = run("io", "--s", "8192", "--d", "64", "--br", "128", "--bc", "64", "--bytes", "2")
    assert result.exit_code == 0, result.output
    out = result.output
    assert "Br × Bc = 128 × 64" in out
    for s in (512, 1024, 2048, 4096, 8192):
        standard = 4 * s * 64 + 4 * s * s
        flash = flash_total(s, 64, 128)
        from_l2 = 4 * s * 64 + s
        row = [line for line in out.splitlines() if line.strip().startswith(f"{s:,} ") and "×" in line][0]
        assert f"{standard:,}" in row and f"{flash:,}" in row and f"{standard / flash:.2f}×" in row
        assert f"{from_l2:,}" in row and f" {-(-s // 128)} " in row  # K/V passes = ⌈s/Br⌉
        # FLOP per HBM byte with every pass from HBM stays near Br; from L2 it grows with s.
        flop_row = [line for line in out.splitlines() if line.strip().startswith(f"{s:,} ") and "FLOP" in line][0]
        assert flop_row.replace("│", " ").split()[-2:] == [f"{4 * s * s * 64 / (flash * 2):.0f}", f"{4 * s * s * 64 / (from_l2 * 2):.0f}"]
    assert "16,384" not in out
    assert "4·s²·d" in out and "17.18 GFLOP" in out  # 4·8192²·64


def test_io_defaults_to_a_real_tile_and_says_fused_attention_is_compute_bound():
    out = " ".join(run("io").output.split())
    assert "Br × Bc = 128 × 64" in out and "d = 128" in out
    assert "min(Bc, d)" not in out  # FlashAttention-1's cap only with --sram
    assert "hit L2" in out and "compute-bound" in out
    # The roofline is datasheet over datasheet; the measured rate is the BENCHMARKS.md table's.
    assert round(989 / 4.8) == 206 and f"ridge is ≈ {989e12 / 4.8e12:.0f} FLOP per byte" in out
    assert f"cuDNN forward at 610 TFLOP/s (d = 128, 16k tokens), {610 / 989:.0%} of that peak" in out
    assert "794 TFLOP" not in out and "624 of" not in out and "794" not in out.split("Roofline")[1]
    assert "attention below that is memory-bound" not in out
    # s = 16,384, d = 128: 127 FLOP/byte when every pass comes from HBM, 8176 from L2.
    assert "127 FLOP/byte" in out and "8176 with K/V reuse" in out


def test_io_bc_changes_the_tile_footprint_not_the_traffic():
    a, b = run("io", "--s", "4096", "--bc", "64").output, run("io", "--s", "4096", "--bc", "128").output
    a, b = " ".join(a.split()), " ".join(b.split())  # undo line wrapping
    assert "= 64 KiB of 228 KiB" in a and "= 96 KiB of 228 KiB" in b
    assert a.split("HBM traffic per head")[1] == b.split("HBM traffic per head")[1]


def test_io_sram_uses_flashattention1s_rule():
    result = run("io", "--s", "8192", "--d", "64", "--sram", "100KB")
    assert result.exit_code == 0, result.output
    m = 100_000 // 2
    bc = -(-m // (4 * 64))
    br = min(bc, 64)
    assert f"Bc = ⌈M/(4d)⌉ = {bc}, Br = min(Bc, d) = {br}" in result.output
    assert f"{flash_total(8192, 64, br):,}" in result.output


def test_io_sram_in_elements_and_given_br():
    result = run("io", "--s", "1000", "--d", "128", "--sram", "65536", "--br", "128")
    assert result.exit_code == 0, result.output
    assert f"{flash_total(1000, 128, 128):,}" in result.output


@pytest.mark.parametrize("args, word", [
    (["--sram", "12XB"], "--sram"), (["--sram", "0"], "--sram"), (["--s", "0"], "--s"),
    (["--d", "-3"], "--d"), (["--br", "0"], "--br"), (["--bc", "-1"], "--bc"), (["--bytes", "99"], "--bytes"),
    (["--plot", "/nonexistent-folder/x.png"], "--plot"),
])
def test_io_rejects_bad_input_in_one_line(args, word):
    one_line_failure(run("io", *args), word)


def test_io_plot_writes_a_png(tmp_path):
    target = tmp_path / "traffic.png"
    result = run("io", "--s", "2048", "--plot", str(target))
    assert result.exit_code == 0, result.output
    assert target.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_io_plot_without_matplotlib_says_so_before_the_table(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib now raises ImportError
    result = run("io", "--s", "2048", "--plot", str(tmp_path / "x.png"))
    one_line_failure(result, "needs matplotlib")  # the table is not printed first
    assert not (tmp_path / "x.png").exists()


# -- ring -----------------------------------------------------------------------


def test_ring_causal_contiguous_is_unbalanced_and_zigzag_is_balanced():
    contiguous = run("ring", "--world", "4", "--causal")
    assert contiguous.exit_code == 0, contiguous.output
    rows = {line.split()[0]: line for line in contiguous.output.splitlines()
            if line.strip()[:1].isdigit() and "KV" in line}
    assert "KV0 1/2" in rows["0"] and rows["0"].count("skip") == 3
    assert rows["3"].count("full") == 3 and rows["3"].rstrip().endswith("7/2")
    assert "balance 57%" in contiguous.output  # 8 blocks / 4 ranks over 7/2 block-times
    zigzag = run("ring", "--world", "4", "--causal", "--zigzag")
    assert "balance 100%" in zigzag.output
    cells = [line for line in zigzag.output.splitlines() if "KV" in line]
    assert len(cells) == 4 and all(line.count("1/2") == 4 and "skip" not in line for line in cells)


def test_ring_shard_schedule_without_mask():
    result = run("ring", "--world", "3")
    rows = [line for line in result.output.splitlines() if line.strip()[:1].isdigit() and "KV" in line]
    # Rank r holds shard (r − t) mod W at step t.
    for r, line in enumerate(rows):
        assert [int(w[2:]) for w in line.split() if w.startswith("KV")] == [(r - t) % 3 for t in range(3)]


@pytest.mark.parametrize("world", ["0", "-2", "9"])
def test_ring_rejects_bad_world(world):
    one_line_failure(run("ring", "--world", world), "--world")


# -- decode: splits and pages --------------------------------------------------------


def test_splits_follow_the_flash_decoding_contract():
    result = run("splits", "--keys", "10", "--splits", "4")
    assert result.exit_code == 0, result.output
    assert "0001112223" in result.output  # ceil(10/4) = 3 keys a split, the last one shorter
    assert "9..9" in result.output
    empty = run("splits", "--keys", "3", "--splits", "5")
    assert empty.output.count("empty: O = 0, L = -inf") == 2


def test_pages_block_tables_and_shared_prefix():
    result = run("pages", "--seq-lens", "40,35,57", "--page", "8", "--shared", "3")
    assert result.exit_code == 0, result.output
    rows = [line for line in result.output.splitlines() if line.strip()[:1].isdigit() and "│" in line]
    tables = [[int(w) for w in line.split("│")[2].split()] for line in rows]
    assert all(t[:3] == [0, 1, 2] for t in tables)  # the shared prefix pages
    assert [sum(1 for e in t if e >= 0) for t in tables] == [5, 5, 8]  # ceil(seq_len / 8) pages each
    assert "Pool: [S][S][S]" in result.output


@pytest.mark.parametrize("args", [["splits", "--splits", "0"], ["pages", "--seq-lens", "5,x"],
                                  ["pages", "--seq-lens", "10", "--shared", "2", "--page", "8"]])
def test_decode_pictures_reject_bad_input(args):
    one_line_failure(run(*args), "--")


# -- start-up cost ----------------------------------------------------------------


def test_every_view_in_the_catalogs_is_a_click_command_of_its_name():
    import importlib

    import click

    from drill import catalog

    views = catalog.all_views()
    assert {"tiling", "online-softmax", "io", "ring", "splits", "pages"} <= set(views)
    for view in views.values():
        module, _, function = view.command.partition(":")
        command = getattr(importlib.import_module(module), function)
        assert isinstance(command, click.Command) and command.name == view.name, view


def test_show_help_imports_no_heavy_module():
    code = ("import sys; from click.testing import CliRunner; from drill.cli import cli; "
            "r = CliRunner().invoke(cli, ['show', '--help']); assert r.exit_code == 0, r.output; "
            "print(sorted(m for m in ('torch', 'triton', 'matplotlib', 'numpy') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_show_and_watch_import_no_heavy_module():
    code = ("import sys, drill.cli, drill.commands.show, drill.commands.watch, drill.visual.tiling, "
            "drill.visual.traffic, drill.visual.ring, drill.visual.online_softmax, drill.visual.decode; "
            "print(sorted(m for m in ('torch', 'triton', 'matplotlib', 'numpy') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_counts_agree_with_the_tiling_shapes_reference_solution():
    """The picture and the exercise count the same thing: checked against the solution file."""
    import importlib.util

    from drill.visual.tiling import Tiling, flash_traffic, formula_standard

    path = paths.solutions_root() / "flashattention" / "02_tiling_shapes.py"
    spec = importlib.util.spec_from_file_location("tiling_solution", path)
    ref = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ref)
    for s in (1, 7, 64, 100, 512, 1000, 4096):
        for d in (16, 64, 128):
            for br, bc in ((16, 16), (64, 128), (128, 64), (100, 7)):
                expected = ref.hbm_elements(s, d, br, bc)
                assert flash_traffic(Tiling(s, s, d, br, bc)).total == expected["flash"]
                assert formula_standard(s, d) == expected["standard"]


# -- the content review's view fixes ------------------------------------------------


def _benchmark_row(section: str, first_cells: list[str]) -> dict[str, str]:
    """One row of a BENCHMARKS.md table, by its leading cells, as {column: value}."""
    text = (Path(__file__).resolve().parents[1] / "BENCHMARKS.md").read_text(encoding="utf-8")
    import re

    heading = re.search(rf"^#+ {re.escape(section)}.*$", text, re.M)
    body = re.split(r"\n#{2,3} ", text[heading.end():], maxsplit=1)[0]
    lines = [line for line in body.splitlines() if line.startswith("|")]
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    for line in lines[2:]:
        cells = [c.strip() for c in line.strip("|").split("|")]
        if cells[:len(first_cells)] == first_cells:
            return dict(zip(header, cells))
    raise AssertionError(f"no row {first_cells} in {section!r}")


def test_io_quotes_the_measured_rate_its_table_holds():
    from drill.visual import traffic

    row = _benchmark_row("Training attention (NVIDIA H200", ["128", "16k", "1×16", "none", "fwd"])
    assert float(row["SDPA cuDNN"]) * 1e12 == traffic.MEASURED_ATTENTION_FLOPS_PER_S
    assert traffic.MEASURED_IN == "BENCHMARKS.md 'Training attention (NVIDIA H200)'"


def test_io_does_not_credit_flashattention1s_block_rule_with_theorem_2():
    out = " ".join(run("io").output.split())
    assert "With FlashAttention-1's Br = M/(4d) this is the paper's Θ(s²d²/M)" not in out
    assert "K/V blocks outside, Q and O re-read once per K/V block" in out
    assert "not Θ(s²d²/M)" in out
    # Why: at the H100's 228 KiB (116,736 two-byte elements) and d = 128, M > 4d², so
    # FlashAttention-1's rule gives Br = d, and 2·s²·d/Br = 2·s² in the Q-outside count.
    from drill.visual import traffic

    m, d = 228 * 1024 // 2, 128
    assert m > 4 * d * d and traffic.block_sizes(m, d) == (d, -(-m // (4 * d)))
    s = 16384
    assert 2 * s * s * d // traffic.block_sizes(m, d)[0] == 2 * s * s


@pytest.mark.parametrize("s, d, br, bc", [(512, 64, 128, 128), (300, 64, 64, 32), (1000, 32, 128, 64)])
def test_tiling_causal_names_2_tr_s_d_and_the_rows_read_apart(s, d, br, bc):
    result = run("tiling", "--s", str(s), "--d", str(d), "--br", str(br), "--bc", str(bc), "--causal")
    out = " ".join(result.output.split())
    tr = -(-s // br)
    total, _ = causal_total(s, d, br, bc)
    kv = total - 2 * s * d - s
    assert f"= 2·{d}·{kv // (2 * d):,} = {kv:,}" in out
    assert f"without the mask 2·Tr·s·d = {2 * tr * s * d:,}" in out
    assert f"≤ 2·Tr·s·d = {kv:,}" not in out
    if (s, d, br, bc) == (512, 64, 128, 128):  # the default picture: 10 of 16 blocks read
        assert (kv, 2 * tr * s * d) == (163_840, 262_144) == (10 * 2 * 128 * 64, 2 * 4 * 512 * 64)


def test_ring_legend_says_what_a_half_is_in_each_layout():
    contiguous = " ".join(run("ring", "--world", "4", "--causal").output.split())
    zigzag = " ".join(run("ring", "--world", "4", "--causal", "--zigzag").output.split())
    plain = " ".join(run("ring", "--world", "4", "--zigzag").output.split())
    assert "only the triangle under the diagonal" not in contiguous + zigzag + plain
    assert "Here 1/2 is one whole quarter and the two diagonal triangles." in contiguous
    assert "rectangle" not in contiguous
    assert "Here 1/2 is two whole quarters, a rectangle" in zigzag
    assert "triangle" not in plain  # without a mask every cell is full
    # Zigzag off-diagonal steps: rank 1 against shard 0 computes both its chunks against chunk 0.
    from fractions import Fraction

    from drill.visual import ring

    assert ring.chunks(1, 4, True) == (1, 6) and ring.chunks(0, 4, True) == (0, 7)
    assert ring.quarters(1, 0, 4, True) == (2, 0) and ring.work(1, 0, 4, True, True) == Fraction(1, 2)
    assert ring.quarters(1, 1, 4, True) == (1, 2)


def test_pages_shared_prefix_defaults_run_and_the_refusal_reads_well():
    result = run("pages", "--shared", "1")
    assert result.exit_code == 0, result.output
    assert "Pool: [S]" in result.output and "37,20,50" not in result.output
    refused = run("pages", "--seq-lens", "10,40", "--shared", "1")
    one_line_failure(refused, "--shared 1", "16 tokens (1 full page of 16)", "the shortest has 10")
    assert "pages long" not in refused.output


def _documented_show_commands() -> list[str]:
    import re

    from drill import catalog

    lines = [view.example for view in catalog.all_views().values() if view.example]
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    lines += re.findall(r"^\s*(drill show [^\n#`]*)", readme, flags=re.M)
    return sorted({line.split("#")[0].strip() for line in lines})


def test_every_documented_show_example_runs():
    import shlex

    commands = _documented_show_commands()
    assert len(commands) >= 6 and "drill show pages --shared 1" in commands
    for command in commands:
        args = shlex.split(command)[2:]
        result = run(*args)
        assert result.exit_code == 0, (command, result.output)
    # The catalog's ring example shows the balance zigzag is for, so it has the causal mask.
    ring_example = [c for c in commands if c.startswith("drill show ring")]
    assert ring_example and all("--causal" in c for c in ring_example if "--zigzag" in c)
