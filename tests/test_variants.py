"""Correct variants of the exercises (tests/variants/<exercise>/): every check must accept each one.

A check that rejects an honest variant is a defect, as much as one that passes a planted mistake.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from grading import ROOT, grade_path

VARIANTS = ROOT / "tests" / "variants"
FILES = sorted(p for p in VARIANTS.glob("*/*.py") if p.is_file())


@pytest.mark.parametrize("path", FILES, ids=[f"{p.parent.name}/{p.stem}" for p in FILES])
def test_variant_passes_every_check(path: Path):
    result = grade_path(path)
    failed = [f"{c.name}: {c.message}" for c in result.checks if c.status not in ("pass", "skip")]
    assert result.status == "pass", result.message + "\n" + "\n".join(failed)
