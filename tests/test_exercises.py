"""Author checks: the catalog is whole, every stub fails, every solution passes."""

from __future__ import annotations

import ast
import shutil

import pytest

from drill import catalog
from grading import grade_path

EXERCISES = catalog.all_exercises()
IDS = [ex.key for ex in EXERCISES]


def test_catalog_entries_have_files_checks_solutions_and_hints():
    for ex in EXERCISES:
        assert ex.stub_path.is_file(), f"{ex.key}: no stub {ex.stub_path}"
        assert ex.solution_path.is_file(), f"{ex.key}: no solution"
        assert ex.checks_path.is_file(), f"{ex.key}: no hidden checks {ex.checks_path}"
        assert len(ex.hints) >= 2, f"{ex.key}: needs at least two hints"


def test_catalog_rejects_unknown_keys():
    text = 'format = 1\ntopic = "t"\ntitle = "T"\nintro = ""\n[[exercise]]\nid = "a"\nfile = "01_a.py"\n' \
           'title = "A"\nfunctions = ["f"]\ncolour = "red"\n'
    with pytest.raises(catalog.CatalogError, match="colour"):
        catalog.parse_catalog(text, "t")


@pytest.mark.parametrize("ex", EXERCISES, ids=IDS)
def test_stub_and_solution_mirror_each_other(ex):
    stub, solution = ex.stub_path.read_text(), ex.solution_path.read_text()
    assert f"# drill: {ex.key}" in stub.splitlines()[0]
    assert f"# drill: {ex.key}" in solution.splitlines()[0]
    assert "# TODO" in stub and "raise NotImplementedError" in stub
    assert "TODO" not in solution

    def signatures(text):
        return {node.name: [a.arg for a in node.args.args] for node in ast.parse(text).body
                if isinstance(node, ast.FunctionDef) and not node.name.startswith("_")}

    for name in ex.functions:
        assert name in signatures(stub), f"stub lacks {name}"
        assert signatures(stub)[name] == signatures(solution)[name], f"{name}: signatures differ"


@pytest.mark.parametrize("ex", EXERCISES, ids=IDS)
def test_every_stub_fails(ex, tmp_path):
    target = tmp_path / ex.file
    shutil.copy(ex.stub_path, target)
    result = grade_path(target)
    assert result.status == "fail", result.message
    assert result.checks and all(c.status in ("fail", "skip", "not-run") for c in result.checks)
    assert any("not written yet" in c.message for c in result.checks)


@pytest.mark.parametrize("ex", EXERCISES, ids=IDS)
def test_every_solution_passes(ex, tmp_path):
    target = tmp_path / ex.file
    shutil.copy(ex.solution_path, target)
    result = grade_path(target)
    assert result.status == "pass", [(c.name, c.message) for c in result.checks if c.status != "pass"]
