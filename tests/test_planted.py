"""Every hidden check rejects at least one planted wrong implementation."""

from __future__ import annotations

from collections import defaultdict

import pytest

from drill import catalog
from grading import base_name, expected_failures, grade_path, planted_files

FILES = planted_files()
_results: dict = {}


def _graded(path):
    if path not in _results:
        _results[path] = grade_path(path)
    return _results[path]


@pytest.mark.parametrize("path", FILES, ids=[f"{p.parent.name}/{p.stem}" for p in FILES])
def test_planted_file_is_rejected_by_the_checks_it_names(path):
    result = _graded(path)
    expected = expected_failures(path)
    assert expected, f"{path.name} names no check it must fail (# expect-fail: ...)"
    assert result.status in ("fail", "error"), f"{path.name} passed: {result.message}"
    failed = [c.name for c in result.checks if c.status == "fail"]
    for prefix in expected:
        assert any(name.startswith(prefix) for name in failed), (
            f"{path.name} should fail '{prefix}', failed: {failed or result.message}")
        for check in result.checks:
            if check.name.startswith(prefix) and check.status == "fail":
                assert check.message, f"{check.name} failed without a message"


@pytest.mark.parametrize("ex", catalog.all_exercises(), ids=lambda ex: ex.key)
def test_every_check_is_failed_by_some_planted_file(ex, tmp_path):
    import shutil

    from drill.grader.runner import grade

    target = tmp_path / ex.file
    shutil.copy(ex.solution_path, target)
    names = {base_name(c.name) for c in grade(ex, target).checks if c.status != "skip"}
    covered = defaultdict(list)
    for path in FILES:
        if path.parent.name != ex.id:
            continue
        for prefix in expected_failures(path):
            for name in names:
                if name.startswith(prefix):
                    covered[name].append(path.name)
    missing = sorted(names - set(covered))
    assert not missing, f"{ex.key}: no planted file fails these checks: {missing}"
    planted = [p for p in FILES if p.parent.name == ex.id]
    assert len(planted) >= 6, f"{ex.key}: only {len(planted)} planted wrong implementations"
