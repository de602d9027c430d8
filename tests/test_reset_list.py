"""`drill reset` puts a stub back without losing the learner's file; `drill list` at a glance."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from click.testing import CliRunner

from drill import catalog
from drill.cli import cli

ROOT = Path(__file__).resolve().parent.parent
SOLUTIONS = ROOT / "solutions" / "flashattention"
FORWARD = catalog.load_topic("flashattention").get("flash-forward")


def run(*args):
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    return result.exit_code, result.output


def test_reset_restores_the_stub_and_keeps_a_backup(tmp_path, monkeypatch):
    ws = tmp_path / "ws"
    run("start", "flashattention", "--dir", str(ws))
    mine = ws / FORWARD.file
    mine.write_text("# drill: flashattention/flash-forward\n# my long work\n")
    monkeypatch.chdir(tmp_path)  # not in the workspace: it is found through the store
    code, out = run("reset", "03")
    assert code == 0 and len(out.strip().splitlines()) == 1, out
    assert mine.read_bytes() == FORWARD.stub_path.read_bytes()
    backups = list(ws.glob(f"{FORWARD.file}.*.bak"))
    assert len(backups) == 1 and backups[0].read_text().endswith("# my long work\n")
    assert backups[0].name in out
    code, out = run("reset", "flash-forward")  # already the stub: nothing new to keep
    assert code == 0 and "nothing to keep" in out
    assert len(list(ws.glob("*.bak"))) == 1


def test_two_resets_in_one_second_keep_both_versions(tmp_path):
    from drill import stubs

    path = tmp_path / FORWARD.file
    for text in ("first\n", "second\n"):
        path.write_text(text)
        stubs.restore(FORWARD, path)
    assert sorted(p.read_text() for p in tmp_path.glob("*.bak")) == ["first\n", "second\n"]


def test_reset_puts_a_deleted_file_back_and_refuses_bad_names(tmp_path, monkeypatch):
    ws = tmp_path / "ws"
    run("start", "flashattention", "--dir", str(ws))
    (ws / FORWARD.file).unlink()
    monkeypatch.chdir(tmp_path)
    code, out = run("reset", "flash-forward")
    assert code == 0 and (ws / FORWARD.file).read_bytes() == FORWARD.stub_path.read_bytes()
    code, out = run("reset", "no-such-thing")
    assert code == 2 and "unknown exercise" in out and len(out.strip().splitlines()) == 1
    notes = tmp_path / "notes.py"
    notes.write_text("x = 1\n")
    code, out = run("reset", str(notes))
    assert code == 2 and "not a drill exercise" in out and notes.read_text() == "x = 1\n"


def test_reset_without_a_workspace_says_what_to_do(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, out = run("reset", "01")
    assert code == 2 and "drill start flashattention" in out


def test_list_shows_state_and_checks_passed(tmp_path):
    ws = tmp_path / "ws"
    run("start", "flashattention", "--dir", str(ws))
    shutil.copy(ROOT / "tests" / "planted" / "flashattention" / "flash-forward" / "missing_scale.py",
                ws / FORWARD.file)
    code, _ = run("check", str(ws / FORWARD.file), "--json")
    assert code == 1
    code, out = run("list", "--json")
    rows = {row["exercise"]: row for row in json.loads(out)}
    forward = rows["flashattention/flash-forward"]
    assert forward["state"] == "failing" and 0 < forward["checks_passed"] < forward["checks"]
    assert rows["flashattention/online-softmax"]["state"] == "not started"
    code, out = run("list")
    line = next(line for line in out.splitlines() if "flash-forward" in line)
    assert f"{forward['checks_passed']}/{forward['checks']} passed" in line and "failing" in line
    assert len([line for line in out.splitlines() if line.strip()]) == 1 + len(catalog.all_exercises())
