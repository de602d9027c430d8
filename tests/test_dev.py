"""drill dev check and drill dev new: the author checks as commands, and the scaffolder."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from drill import authoring, catalog, paths
from drill.cli import cli

ROOT = Path(__file__).resolve().parent.parent


def run(*args: str):
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    return result.exit_code, result.output


def test_dev_check_passes_an_exercise_that_keeps_every_rule():
    code, out = run("dev", "check", "flashattention/tiling-shapes")
    assert code == 0, out
    assert "✓ flashattention/tiling-shapes" in out and "1 of 1 exercises pass" in out


def test_dev_check_reports_a_planted_file_that_passes_and_checks_nothing_fails(tmp_path):
    ex = catalog.resolve("flashattention/tiling-shapes")
    folder = tmp_path / "planted" / ex.topic / ex.id
    folder.mkdir(parents=True)
    text = ex.solution_path.read_text().replace("# drill: flashattention/tiling-shapes\n",
                                                "# drill: flashattention/tiling-shapes\n"
                                                "# expect-fail: Br and Bc from the SRAM size\n", 1)
    (folder / "not_wrong_at_all.py").write_text(text)
    code, out = run("dev", "check", ex.key, "--planted", str(tmp_path / "planted"))
    assert code == 1, out
    assert "✗ flashattention/tiling-shapes" in out
    assert "not_wrong_at_all.py passed" in out
    assert "no planted file fails these checks" in out and "only 1 planted" in out


def test_dev_check_unknown_name_cannot():
    code, out = run("dev", "check", "no-such-topic")
    assert code == 2 and "unknown topic or exercise" in out


def fake_checkout(tmp_path: Path) -> Path:
    root = tmp_path / "checkout"
    (root / "exercises").mkdir(parents=True)
    (root / "solutions").mkdir()
    return root


def test_dev_new_in_a_copy_of_a_topic_appends_the_next_exercise(tmp_path):
    root = fake_checkout(tmp_path)
    topic = catalog.load_topic("flashattention")
    (root / "exercises" / "flashattention").mkdir()
    shutil.copy(paths.exercises_root() / "flashattention" / "catalog.toml", root / "exercises" / "flashattention")
    (root / "solutions" / "flashattention").mkdir()
    code, out = run("dev", "new", "flashattention/causal-skip", "--root", str(root), "--title", 'Skip "masked" blocks')
    assert code == 0, out
    number = f"{int(topic.exercises[-1].number) + 1:02d}"
    spec = catalog.parse_catalog((root / "exercises" / "flashattention" / "catalog.toml").read_text(), "flashattention")
    assert [ex.id for ex in spec.exercises] == [ex.id for ex in topic.exercises] + ["causal-skip"]
    new = spec.exercises[-1]
    assert new.file == f"{number}_causal_skip.py" and new.title == 'Skip "masked" blocks'
    for path in (root / "exercises" / "flashattention" / new.file, root / "solutions" / "flashattention" / new.file,
                 root / "exercises" / "flashattention" / "checks" / f"test_{number}_causal_skip.py",
                 root / "tests" / "planted" / "flashattention" / "causal-skip" / "returns_input.py"):
        assert path.is_file(), path
    stub = (root / "exercises" / "flashattention" / new.file).read_text()
    solution = (root / "solutions" / "flashattention" / new.file).read_text()
    assert authoring.mirror_problems(new, stub, solution) == []
    # The existing topic is not given a conftest (the grader has the fixtures) or a second catalog header.
    assert not (root / "exercises" / "flashattention" / "checks" / "conftest.py").exists()


def test_dev_new_refuses_a_taken_id_and_a_bad_name(tmp_path):
    root = fake_checkout(tmp_path)
    assert run("dev", "new", "demo/double-it", "--root", str(root))[0] == 0
    code, out = run("dev", "new", "demo/double-it", "--root", str(root))
    assert code == 2 and "already in" in out
    code, out = run("dev", "new", "Demo/Double It", "--root", str(root))
    assert code == 2 and "lowercase" in out
    code, out = run("dev", "new", "demo/other", "--root", str(tmp_path))
    assert code == 2 and "not drill's source checkout" in out


def test_a_scaffolded_topic_passes_every_author_check_but_the_planted_count(tmp_path, monkeypatch):
    root = fake_checkout(tmp_path)
    code, out = run("dev", "new", "demo/double-it", "--root", str(root))
    assert code == 0, out
    monkeypatch.setattr(paths, "exercises_root", lambda: root / "exercises")
    monkeypatch.setattr(paths, "solutions_root", lambda: root / "solutions")
    catalog.load_topic.cache_clear()
    try:
        ex = catalog.load_topic("demo").exercises[0]
        assert ex.key == "demo/double-it" and ex.file == "01_double_it.py"
        work = tmp_path / "work"
        work.mkdir()
        problems = authoring.check_exercise(ex, root / "tests" / "planted", work)
    finally:
        catalog.load_topic.cache_clear()
    assert problems == [f"demo/double-it: only 1 planted wrong implementations (want {authoring.MIN_PLANTED})"]


@pytest.mark.parametrize("bad_title", ['a """ b', "two\nlines"])
def test_dev_new_rejects_a_title_that_would_break_the_files(tmp_path, bad_title):
    code, out = run("dev", "new", "demo/x", "--root", str(fake_checkout(tmp_path)), "--title", bad_title)
    assert code == 2 and "--title" in out
