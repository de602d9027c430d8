"""`drill watch`: one cycle without a TTY (--once), the loop's key handling, and the real
loop in a subprocess re-checking on save and stopping cleanly on q and on Ctrl-C."""

from __future__ import annotations

import os
import queue
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from drill import paths
from drill.cli import cli
from drill.store import Store
from terminal import as_from_a_terminal  # noqa: E402  (tests/ is on sys.path)

FIRST, SECOND = "01_online_softmax.py", "02_tiling_shapes.py"


def stub(name: str) -> Path:
    return paths.exercises_root() / "flashattention" / name


def solution(name: str) -> Path:
    return paths.solutions_root() / "flashattention" / name


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    """A workspace with the first two stubs, registered the way `drill start` registers it."""
    ws = tmp_path / "ws"
    ws.mkdir()
    for name in (FIRST, SECOND):
        shutil.copy(stub(name), ws / name)
    with Store() as store:
        store.set_workspace("flashattention", ws)
        store.set_setting("topic", "flashattention")
    return ws


def watch(*args: str):
    return CliRunner().invoke(cli, ["watch", *args])


def test_once_on_a_stub_reports_the_failures(workspace):
    result = watch(str(workspace / FIRST), "--once")
    assert result.exit_code == 1, result.output
    assert "0 of 14 checks passed" in result.output
    assert "drill hint online-softmax" in result.output


def test_once_on_a_passing_file_offers_the_next_exercise(workspace):
    shutil.copy(solution(FIRST), workspace / FIRST)
    result = watch(str(workspace / FIRST), "--once")
    assert result.exit_code == 0, result.output
    assert "all 14 checks passed" in result.output
    assert f"Next: {SECOND}" in result.output


def test_without_file_it_checks_the_current_exercise(workspace):
    first = watch("--once")
    assert first.exit_code == 1 and "flashattention/online-softmax" in first.output
    shutil.copy(solution(FIRST), workspace / FIRST)
    assert watch("--once").exit_code == 0
    second = watch("--once")  # the first has passed: the current exercise is now the second
    assert "flashattention/tiling-shapes" in second.output, second.output


def test_without_file_or_workspace_it_says_what_to_do():
    result = watch("--once")
    assert result.exit_code == 2
    assert "no workspace yet" in result.output and "drill start flashattention" in result.output


@pytest.mark.parametrize("make, words", [
    (lambda d: d / "missing.py", "no such file"),
    (lambda d: d, "is a directory"),
    (lambda d: (d / "notes.py").write_text("x = 1\n") and d / "notes.py", "not a drill exercise"),
])
def test_files_that_cannot_be_watched_fail_in_one_line(tmp_path, make, words):
    result = watch(str(make(tmp_path)), "--once")
    assert result.exit_code == 2
    assert words in result.output and "Traceback" not in result.output
    assert len(result.output.strip().splitlines()) == 1


def test_loop_reruns_on_save_and_enter_moves_on_with_n_and_quits_on_q(monkeypatch, tmp_path):
    import drill.commands.watch as w

    first, second = tmp_path / FIRST, tmp_path / SECOND
    first.write_text("x")
    checked: list[Path] = []
    watchers: list[tuple[Path, list]] = []

    def fake_cycle(path, store, timeout=None):
        checked.append(path)
        return w.Cycle(path, None, None, "fake", next_path=second if path == first else None)

    class FakeWatcher:
        def __init__(self, path, events):
            self.state = [True]
            watchers.append((path, self.state))

        def close(self):
            self.state[0] = False

    shown = []
    monkeypatch.setattr(w, "run_cycle", fake_cycle)
    events: queue.Queue = queue.Queue()
    for item in [(w.CHANGED, None), (w.CHANGED, None), (w.CHANGED, None),  # a burst of saves: one check
                 (w.KEY, ""), (w.KEY, "what"), (w.KEY, "n"), (w.KEY, "n"), (w.KEY, " Q ")]:
        events.put(item)
    with Store() as store:
        code = w.watch_loop(first, store, None, events, watcher_factory=FakeWatcher,
                            show=lambda r, clear=False: shown.append(r))
    assert checked == [first, first, first, second]  # start, burst, Enter, n ('n' again: no next)
    assert [p for p, _ in watchers] == [first, second]
    assert not any(state[0] for _, state in watchers)  # every watcher closed
    assert code == 2  # the last (fake) cycle could not be graded
    assert any("unknown key 'what'" in getattr(r, "plain", "") for r in shown)
    assert any("n moves on once this file passes" in getattr(r, "plain", "") for r in shown)


class Session:
    """`drill watch FILE` in a subprocess, its output collected line by line."""

    def __init__(self, path: Path):
        env = {**os.environ, "PYTHONUNBUFFERED": "1", "COLUMNS": "100"}
        self.proc = subprocess.Popen([sys.executable, "-m", "drill", "watch", str(path)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, env=env, preexec_fn=as_from_a_terminal)
        self.lines: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for raw in self.proc.stdout:
            self.lines.append(raw.decode("utf-8", "replace"))

    def wait_for(self, text: str, count: int = 1, limit: float = 30) -> None:
        end = time.monotonic() + limit
        while time.monotonic() < end:
            if "".join(self.lines).count(text) >= count:
                return
            time.sleep(0.05)
        raise AssertionError(f"{text!r} ×{count} not seen; output:\n{''.join(self.lines)}")

    def send(self, keys: str) -> None:
        self.proc.stdin.write(keys.encode())
        self.proc.stdin.flush()


def test_real_loop_rechecks_on_save_and_quits_on_q(tmp_path):
    path = tmp_path / FIRST
    shutil.copy(stub(FIRST), path)
    session = Session(path)
    session.wait_for("0 of 14 checks passed")
    time.sleep(0.5)  # let the watcher settle before the save
    shutil.copy(solution(FIRST), path)
    session.wait_for("all 14 checks passed")
    session.send("\n")  # Enter re-runs by hand
    session.wait_for("all 14 checks passed", count=2)
    session.send("q\n")
    session.proc.wait(timeout=15)
    assert session.proc.returncode == 0
    assert "Traceback" not in session.proc.stderr.read().decode()


def test_real_loop_stops_cleanly_on_ctrl_c(tmp_path):
    path = tmp_path / FIRST
    shutil.copy(stub(FIRST), path)
    session = Session(path)
    session.wait_for("0 of 14 checks passed")
    session.proc.send_signal(signal.SIGINT)
    session.proc.wait(timeout=15)
    session.wait_for("stopped watching")
    assert session.proc.returncode == 0
    assert "Traceback" not in session.proc.stderr.read().decode()
