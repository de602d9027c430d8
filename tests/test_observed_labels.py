"""A check that decides from what the subject says about itself is labelled observed (DESIGN.md, Grading).

The report's "verified" must never stand on the subject's own word: read logs (`.reads`), 06's and
12's communication records (`runs.ops`), the arguments or inputs as the subject returns them after
the call (`return_args`, `return_inputs`, a rank's `changed`), Triton launch records, and 14's count
of masks applied to full tiles all come from inside the subject. This test reads the hidden checks'
source and requires `@pytest.mark.observed` on every check that uses one of them.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

CHECKS = Path(__file__).resolve().parent.parent / "exercises" / "flashattention" / "checks"
# What only the subject can report, as it appears in a check's source.
SELF_REPORTS = (".reads", "runs.ops(", "return_args=True", "return_inputs=True", '.get("changed")',
                "all_visible", "launches")


def _checks():
    for path in sorted(CHECKS.glob("test_*.py")):
        source = path.read_text(encoding="utf-8")
        for node in ast.parse(source).body:
            if isinstance(node, ast.FunctionDef) and node.name.startswith("test_"):
                yield path.name, node, source


def _observed(node) -> bool:
    return any("observed" in ast.unparse(d) for d in node.decorator_list)


@pytest.mark.parametrize("file, node, source", [pytest.param(*c, id=f"{c[0]}::{c[1].name}") for c in _checks()])
def test_checks_that_rest_on_the_subjects_word_are_marked_observed(file, node, source):
    body = ast.get_source_segment(source, node)
    used = [s for s in SELF_REPORTS if s in body]
    doc = (ast.get_docstring(node) or "").splitlines()[0]
    if used or "(observed" in doc:
        assert _observed(node), f"{file}::{node.name} decides from {used or 'what its name says is observed'} " \
                                "but is reported as verified: add @pytest.mark.observed"


def test_the_rule_sees_a_mislabelled_check():
    source = 'def test_x(sub):\n    """Reads (observed)"""\n    outcome.reads\n'
    node = ast.parse(source).body[0]
    assert not _observed(node) and ".reads" in ast.get_source_segment(source, node)
