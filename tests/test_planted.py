"""Every hidden check rejects at least one planted wrong implementation (rules in drill/authoring.py)."""

from __future__ import annotations

import pytest

from drill import authoring, catalog
from grading import PLANTED, by_exercise, grade_path, planted_files, solution_result
from sampling import sample

# The torch exercises' planted files (5-10 s each on a CPU): a sixth in a default run.
FILES = sample([pytest.param(p, id=f"{p.parent.name}/{p.stem}") for p in planted_files()], every=6,
               slow=lambda p: catalog.identify(p.values[0]).needs != "cpu")
_results: dict = {}


def _graded(path):
    # Only the checks the file claims to fail: its claim is all this test verifies, and the
    # peak-memory checks it does not name would be most of the time.
    if path not in _results:
        _results[path] = grade_path(path, only=tuple(authoring.expected_failures(path)))
    return _results[path]


@pytest.mark.parametrize("path", FILES)
def test_planted_file_is_rejected_by_the_checks_it_names(path):
    problems = authoring.planted_file_problems(path, _graded(path))
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("ex", by_exercise(catalog.all_exercises()))
def test_every_check_is_failed_by_some_planted_file(ex, tmp_path_factory):
    solution = solution_result(ex, tmp_path_factory)
    problems = authoring.coverage_problems(ex, solution, authoring.planted_files(PLANTED, ex))
    assert not problems, "\n".join(problems)
