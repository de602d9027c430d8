"""`drill show block-mask` draws the same kinds as exercise 14's reference block_kinds."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from drill.cli import cli
from drill.visual import blockmask

SOLUTION = Path(__file__).resolve().parent.parent / "solutions" / "flashattention" / "14_block_mask.py"


def _solution():
    spec = importlib.util.spec_from_file_location("block_mask_solution", SOLUTION)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("lengths, block, causal, window", [
    ([5, 3], 4, True, None), ([40, 24, 56, 8], 8, True, None), ([30, 21], 8, False, None),
    ([64, 13], 8, False, 10), ([17], 4, True, 1),
])
def test_view_kinds_match_the_reference(lengths, block, causal, window):
    doc = np.repeat(np.arange(len(lengths)), lengths)
    want = _solution().block_kinds(doc, doc, window, causal, block, block)
    assert np.array_equal(np.array(blockmask.kinds(lengths, block, causal, window)), want)


def test_the_view_prints_the_counts():
    result = CliRunner().invoke(cli, ["show", "block-mask", "--docs", "5,3", "--block", "4"])
    assert result.exit_code == 0, result.output
    assert "1 of 4 tiles empty" in result.output and "21 of 64 pairs" in result.output


def test_bad_options_are_refused():
    result = CliRunner().invoke(cli, ["show", "block-mask", "--docs", "5,x"])
    assert result.exit_code != 0
    result = CliRunner().invoke(cli, ["show", "block-mask", "--docs", "4000", "--block", "8"])
    assert result.exit_code != 0 and "tiles" in result.output
