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


def test_reset_and_start_refuse_a_fifo_or_a_device_at_once(tmp_path):
    """A workspace file that is a FIFO made `drill reset` and `drill start` block for ever in
    read_bytes, and a link to /dev/zero filled memory (a MemoryError traceback): reset now
    refuses in one line with exit 2, and start keeps the file without reading it."""
    import os
    import subprocess
    import sys

    ws = tmp_path / "ws"
    run("start", "flashattention", "--dir", str(ws))
    online = catalog.load_topic("flashattention").get("online-softmax")
    for make in (os.mkfifo, lambda p: p.symlink_to("/dev/zero")):
        target = ws / online.file
        target.unlink()
        make(target)
        for args in (["reset", "online-softmax"], ["start", "flashattention", "--dir", str(ws)]):
            proc = subprocess.run([sys.executable, "-m", "drill", *args], capture_output=True, text=True,
                                  cwd=ws, timeout=60, stdin=subprocess.DEVNULL)
            assert "Traceback" not in proc.stderr, proc.stderr
            if args[0] == "reset":
                assert proc.returncode == 2 and "not a regular file" in proc.stderr, proc.stderr
                assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
            else:
                assert proc.returncode == 0, proc.stderr
        assert not target.is_file() and not list(ws.glob("*.bak"))


def test_reset_without_a_workspace_says_what_to_do(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, out = run("reset", "01")
    assert code == 2 and "drill start flashattention" in out


def test_list_shows_state_and_checks_passed(tmp_path):
    ws = tmp_path / "ws"
    run("start", "flashattention", "--dir", str(ws))
    shutil.copy(ROOT / "tests" / "planted" / "flashattention" / "flash-forward" / "missing_scale.py",
                ws / FORWARD.file)
    code, report_doc = run("check", str(ws / FORWARD.file), "--json")
    assert code == 1
    code, out = run("list", "--json")
    rows = {row["exercise"]: row for row in json.loads(out)["exercises"]}
    forward = rows["flashattention/flash-forward"]
    assert forward["state"] == "failing" and 0 < forward["checks_passed"] < forward["checks"]
    # The one count: the report's own summary says the same numbers.
    assert json.loads(report_doc)["message"].startswith(
        f"{forward['checks_passed']} of {forward['checks']} checks passed")
    assert rows["flashattention/online-softmax"]["state"] == "not started"
    code, out = run("list")
    line = next(line for line in out.splitlines() if "flash-forward" in line)
    assert f"{forward['checks_passed']}/{forward['checks']}" in line and "failing" in line
    assert "passed" not in line.split("failing", 1)[1]  # no "0/17 passed" beside a state
    assert len([line for line in out.splitlines() if line.strip()]) == 1 + len(catalog.all_exercises())
    assert not [line for line in out.splitlines() if line != line.rstrip()]  # piped: no padding


def test_list_and_status_json_have_one_shape(tmp_path):
    ws = tmp_path / "ws"
    run("start", "flashattention", "--dir", str(ws))
    _, listed = run("list", "--json")
    _, status = run("status", "--json")
    listed, status = json.loads(listed), json.loads(status)
    assert listed["exercises"] == status["exercises"] and listed["next"] == status["next"]
    assert set(status) - set(listed) == {"workspace", "torch", "triton"}


def test_scratch_copies_do_not_move_the_count(tmp_path, monkeypatch):
    ws = tmp_path / "ws"
    run("start", "flashattention", "--dir", str(ws))
    monkeypatch.chdir(ws)
    shutil.copy(FORWARD.solution_path, ws / FORWARD.file)
    assert run("check", FORWARD.file)[0] == 0
    # A scratch copy with the same header, failing: graded, said to be unsaved, and the count stays.
    shutil.copy(ROOT / "tests" / "planted" / "flashattention" / "flash-forward" / "missing_scale.py",
                ws / "scratch_forward.py")
    code, out = run("check", "scratch_forward.py")
    assert code == 1 and "not saved to your progress: only a file named 03_flash_forward.py counts" in out
    code, out = run("list", "--json")
    forward = {row["exercise"]: row for row in json.loads(out)["exercises"]}["flashattention/flash-forward"]
    assert forward["state"] == "passed" and forward["latest"] == "pass" and forward["attempts"] == 1
    assert forward["checks_passed"] == forward["checks"] > 0
    _, out = run("list")
    line = next(line for line in out.splitlines() if "flash-forward" in line)
    assert "passed" in line and f"{forward['checks']}/{forward['checks']}" in line
