"""Honest variants (tests/variants/): correct code written differently must pass every check."""

from __future__ import annotations

from pathlib import Path

import pytest

from grading import grade_path

VARIANTS = Path(__file__).resolve().parent / "variants"
FILES = sorted(VARIANTS.glob("*/*/*.py"))


@pytest.mark.parametrize("path", FILES, ids=[f"{p.parent.name}/{p.stem}" for p in FILES])
def test_honest_variant_passes(path):
    first = path.read_text(encoding="utf-8").splitlines()[:3]
    assert any(line.startswith("# variant:") for line in first), f"{path.name} lacks a '# variant:' line"
    result = grade_path(path)
    failed = [(c.name, c.message) for c in result.checks if c.status != "pass"]
    assert result.status == "pass", (result.message, failed)
