"""Author checks: the catalog is whole, every stub fails, every solution passes."""

from __future__ import annotations

import pytest

from drill import authoring, catalog
from grading import by_exercise, solution_result

EXERCISES = catalog.all_exercises()
IDS = [ex.key for ex in EXERCISES]


def test_catalog_entries_have_files_checks_solutions_and_hints():
    problems = [p for ex in EXERCISES for p in authoring.layout_problems(ex)]
    assert not problems, "\n".join(problems)


def test_catalog_rejects_unknown_keys():
    text = 'format = 1\ntopic = "t"\ntitle = "T"\nintro = ""\n[[exercise]]\nid = "a"\nfile = "01_a.py"\n' \
           'title = "A"\nfunctions = ["f"]\ncolour = "red"\n'
    with pytest.raises(catalog.CatalogError, match="colour"):
        catalog.parse_catalog(text, "t")


@pytest.mark.parametrize("ex", EXERCISES, ids=IDS)
def test_stub_and_solution_mirror_each_other(ex):
    problems = authoring.mirror_problems(ex, ex.stub_path.read_text(), ex.solution_path.read_text())
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("ex", EXERCISES, ids=IDS)
def test_every_stub_fails(ex, tmp_path):
    problems = authoring.stub_problems(ex, authoring.grade_copy(ex, ex.stub_path, tmp_path))
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("ex", by_exercise(EXERCISES))
def test_every_solution_passes(ex, tmp_path_factory):
    problems = authoring.solution_problems(ex, solution_result(ex, tmp_path_factory))
    assert not problems, "\n".join(problems)


def test_the_rules_catch_a_stub_that_does_not_mirror_its_solution():
    ex = EXERCISES[0]
    stub = ex.stub_path.read_text().replace("raise NotImplementedError", "return None")
    solution = ex.solution_path.read_text().replace(f"def {ex.functions[0]}(", f"def {ex.functions[0]}(extra, ")
    problems = authoring.mirror_problems(ex, stub, solution + "\n# TODO left behind\n")
    assert any("NotImplementedError" in p for p in problems)
    assert any("different signatures" in p for p in problems)
    assert any("still has a TODO" in p for p in problems)
