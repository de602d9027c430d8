"""Golden report files: each exercise's passing, failing and ungradable submission produces exactly
the stored --json document and plain report (tests/golden.py says how; DRILL_REGOLD=1 rewrites them)."""

from __future__ import annotations

import json
import os

import pytest

from drill import catalog
from golden import CASES, CPU_ONLY, EXERCISES, GOLDEN, produce

from drill.grader import runner

PARAMS = [pytest.param(ex_id, case, id=f"{ex_id}/{case}") for ex_id in EXERCISES for case in CASES]
STATUS = {"pass": "pass", "fail": "fail", "error": "error"}


@pytest.mark.parametrize("ex_id, case", PARAMS)
def test_report_matches_its_golden_files(ex_id, case, tmp_path):
    if ex_id in CPU_ONLY and runner.nvidia_driver_present():
        pytest.skip("graded on the GPU here: the golden files hold the interpreter's report")
    ex = catalog.resolve(f"flashattention/{ex_id}")
    doc, text = produce(ex, case, tmp_path)
    folder = GOLDEN / ex.topic / ex.id
    if os.environ.get("DRILL_REGOLD"):
        (folder / f"{case}.json").write_text(doc, encoding="utf-8")
        (folder / f"{case}.txt").write_text(text, encoding="utf-8")
    assert json.loads(doc)["status"] == STATUS[case], doc[:2000]
    assert doc == (folder / f"{case}.json").read_text(encoding="utf-8"), f"{case}.json differs (DRILL_REGOLD=1 rewrites)"
    assert text == (folder / f"{case}.txt").read_text(encoding="utf-8"), f"{case}.txt differs (DRILL_REGOLD=1 rewrites)"


def test_a_changed_report_does_not_match(tmp_path):
    ex = catalog.resolve("flashattention/tiling-shapes")
    doc, text = produce(ex, "error", tmp_path)
    stored = (GOLDEN / ex.topic / ex.id / "error.json").read_text(encoding="utf-8")
    assert doc == stored
    assert doc.replace("hbm_elements", "hbm_elementz") != stored
