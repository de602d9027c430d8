"""`drill show kv-cache`: the KV-cache bytes per token of MHA, GQA, MQA and MLA for DeepSeek-V3,
recomputed here from the published config rather than trusted."""

from __future__ import annotations

from click.testing import CliRunner

from drill.cli import cli
from drill.visual import mla

# deepseek-ai/DeepSeek-V3 config.json: num_hidden_layers, num_attention_heads, qk_nope_head_dim,
# kv_lora_rank, qk_rope_head_dim.
LAYERS, HEADS, D_H, D_C, D_ROPE = 61, 128, 128, 512, 64
BF16 = 2


def test_bytes_per_token_follow_the_papers_formulas():
    got = mla.kv_cache_bytes_per_token(mla.DEEPSEEK_V3, groups=8, dtype_bytes=BF16)
    assert got == {
        "MHA": 2 * HEADS * D_H * LAYERS * BF16,  # 3,997,696 B ≈ 3.8 MiB
        "GQA": 2 * 8 * D_H * LAYERS * BF16,  # 249,856 B
        "MQA": 2 * D_H * LAYERS * BF16,  # 31,232 B
        "MLA": (D_C + D_ROPE) * LAYERS * BF16,  # 70,272 B ≈ 68.6 KiB
    }
    assert got["MLA"] == 70_272 and got["MHA"] == 3_997_696
    assert round(got["MHA"] / got["MLA"], 2) == 56.89


def test_mla_equals_gqa_with_two_and_a_quarter_groups():
    # DeepSeek-V2 §2.1: MLA's cache equals GQA with only 2.25 groups.
    assert mla.mla_equivalent_groups() == 2.25
    assert mla.elements_per_token_layer(mla.DEEPSEEK_V3, groups=1)["MLA"] == 4.5 * D_H


def test_the_view_prints_the_table():
    result = CliRunner().invoke(cli, ["show", "kv-cache", "--context", "1000"])
    assert result.exit_code == 0, result.output
    for figure in ("3,997,696", "249,856", "31,232", "70,272", "56.89×", "2.25 groups"):
        assert figure in result.output, figure


def test_bad_options_are_refused():
    result = CliRunner().invoke(cli, ["show", "kv-cache", "--groups", "7"])
    assert result.exit_code != 0 and "divide" in result.output
