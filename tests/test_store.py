"""The progress database: transactional, and never silently lost."""

from __future__ import annotations

import sqlite3
import pytest

from drill.store import Store


def test_attempts_and_settings_round_trip(drill_home):
    with Store() as store:
        store.record_attempt("t/a", "fail", "/x.py", 1.0, {"status": "fail"})
        store.record_attempt("t/a", "pass", "/x.py", 1.0, {"status": "pass"})
        store.set_setting("lang", "zh")
    with Store() as store:
        assert [a.status for a in store.attempts("t/a")] == ["fail", "pass"]
        assert store.passed("t/a") and not store.passed("t/b")
        assert store.get_setting("lang") == "zh"


def test_a_corrupt_file_is_moved_aside_not_deleted(drill_home, capsys):
    path = drill_home / "drill.sqlite3"
    path.write_bytes(b"this is not a database" * 100)
    with Store() as store:
        store.set_setting("x", "1")
    moved = list(drill_home.glob("drill.sqlite3.corrupt-*"))
    assert len(moved) == 1 and moved[0].read_bytes().startswith(b"this is not")
    assert "moved to" in capsys.readouterr().err


def test_a_failed_write_leaves_earlier_progress(drill_home):
    with Store() as store:
        store.record_attempt("t/a", "pass", "/x.py", 1.0, {})
        try:
            with store.conn:
                store.conn.execute("INSERT INTO attempts (exercise, at, status, file, seconds, result_json) "
                                   "VALUES ('t/a', 'now', 'pass', 'f', 1, '{}')")
                store.conn.execute("INSERT INTO attempts (exercise, at, status, file, seconds, result_json) "
                                   "VALUES ('t/a', 'now', 'bogus', 'f', 1, '{}')")
        except sqlite3.IntegrityError:
            pass
        assert len(store.attempts("t/a")) == 1


def test_drill_home_that_is_a_file_gets_one_line(tmp_path):
    import subprocess
    import sys

    home = tmp_path / "not-a-dir"
    home.write_text("")
    proc = subprocess.run([sys.executable, "-m", "drill", "status"], capture_output=True, text=True,
                          env={"DRILL_HOME": str(home), "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 2 and "DRILL_HOME" in proc.stderr and "Traceback" not in proc.stderr


# -- a lock is not damage; damage is moved aside only when it can be ---------------------------

def _hold_lock(path):
    """Another process's view: a connection in the middle of an exclusive write."""
    other = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    other.execute("BEGIN EXCLUSIVE")
    return other


def test_a_locked_database_is_waited_for_then_refused_never_moved(drill_home, capsys):
    import pytest

    from drill.store import StoreError

    with Store() as store:
        store.record_attempt("t/a", "pass", "/x.py", 1.0, {})
    other = _hold_lock(drill_home / "drill.sqlite3")
    try:
        with pytest.raises(StoreError, match="locked by another process"):
            Store(lock_wait=2.5)
        assert "waiting up to" in capsys.readouterr().err
        assert not list(drill_home.glob("*.corrupt-*"))
    finally:
        other.rollback()
        other.close()
    with Store() as store:  # nothing was lost
        assert store.passed("t/a")


def test_a_lock_released_while_waiting_lets_the_command_go_on(drill_home):
    import threading

    with Store() as store:
        store.set_setting("x", "1")
    other = _hold_lock(drill_home / "drill.sqlite3")
    release = threading.Timer(2.5, lambda: (other.rollback(), other.close()))
    release.start()
    try:
        with Store(lock_wait=20) as store:
            assert store.get_setting("x") == "1"
    finally:
        release.join()


def test_a_write_that_meets_a_lock_fails_in_one_clear_error(drill_home):
    import pytest

    from drill.store import StoreError

    store = Store(lock_wait=0.5)
    other = _hold_lock(drill_home / "drill.sqlite3")
    try:
        with pytest.raises(StoreError, match="locked"):
            store.record_attempt("t/a", "pass", "/x.py", 1.0, {})
    finally:
        other.rollback()
        other.close()
        store.close()


def test_a_malformed_database_is_moved_aside(drill_home, capsys):
    path = drill_home / "drill.sqlite3"
    with Store() as store, store.conn:  # one transaction: thousands of fsyncs would take a minute
        store.conn.executemany("INSERT INTO settings (key, value) VALUES (?, ?)",
                               [(f"k{n}", "v" * 100) for n in range(3000)])
    data = path.read_bytes()
    path.write_bytes(data[:4096] + b"\x00" * 4096 + data[8192:])  # a page of the table is zeroed
    with Store() as store:
        assert store.get_setting("k1") is None  # a fresh database
    assert len(list(drill_home.glob("drill.sqlite3.corrupt-*"))) == 1
    assert "moved to" in capsys.readouterr().err


def test_a_damaged_file_in_a_read_only_folder_is_not_moved(drill_home, monkeypatch):
    import os

    import pytest

    from drill.store import StoreError

    (drill_home / "drill.sqlite3").write_bytes(b"garbage" * 1000)
    renamed = []
    monkeypatch.setattr(os, "access", lambda *a, **k: False)
    monkeypatch.setattr(os, "rename", lambda *a: renamed.append(a))
    with pytest.raises(StoreError, match="read-only"):
        Store()
    assert renamed == []


def _read_only_run(home, args):
    """Run drill with `home` read-only: a read-only bind mount as root, permissions otherwise."""
    import os
    import shutil
    import subprocess
    import sys

    import pytest

    env = {**os.environ, "DRILL_HOME": str(home)}
    if os.geteuid() == 0:
        if not shutil.which("unshare"):
            pytest.skip("root without unshare: cannot make a read-only folder")
        probe = subprocess.run(["unshare", "-m", "true"], capture_output=True)
        if probe.returncode:
            pytest.skip("cannot create a mount namespace here")
        script = (f"mount --bind -o ro {home} {home} && exec {sys.executable} -m drill "
                  + " ".join(args))
        return subprocess.run(["unshare", "-m", "sh", "-c", script], capture_output=True, text=True,
                              env=env, timeout=60)
    for p in [home, *home.iterdir()]:
        p.chmod(0o555 if p.is_dir() else 0o444)
    try:
        return subprocess.run([sys.executable, "-m", "drill", *args], capture_output=True, text=True,
                              env=env, timeout=60)
    finally:
        for p in [home, *home.iterdir()]:
            p.chmod(0o755 if p.is_dir() else 0o644)


def test_read_only_home_is_one_line_and_nothing_moves(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    (home / "drill.sqlite3").write_bytes(b"not a database, and read-only" * 100)
    proc = _read_only_run(home, ["status"])
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "DRILL_HOME" in proc.stderr
    assert [p.name for p in home.iterdir()] == ["drill.sqlite3"]


def test_read_only_home_with_a_good_database_is_one_line(tmp_path):
    import os

    home = tmp_path / "home"
    home.mkdir()
    with Store(home / "drill.sqlite3") as store:
        store.set_setting("topic", "flashattention")
    proc = _read_only_run(home, ["status"])
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "writable" in proc.stderr
    with Store(home / "drill.sqlite3") as store:
        assert store.get_setting("topic") == "flashattention"
    assert sorted(os.listdir(home)) == ["drill.sqlite3"]


# -- file names and what counts as an attempt --------------------------------------------------

def test_a_file_name_that_is_not_utf8_round_trips(drill_home):
    import os
    from pathlib import Path

    name = Path(os.fsdecode(b"/tmp/ws-\xff/01_online_softmax\xe9.py"))
    with Store() as store:
        store.record_attempt("t/a", "fail", name, 1.0, {"file": str(name)})
        store.set_workspace("flashattention", name.parent)
    with Store() as store:
        assert store.attempts("t/a")[0].file == str(name)
        assert store.attempts("t/a")[0].result["file"] == str(name)
        assert store.workspace("flashattention") == name.parent


def test_not_graded_runs_are_not_attempts(drill_home):
    from drill import catalog, progress

    ex = catalog.load_topic("flashattention").exercises[0]
    with Store() as store:
        store.record_attempt(ex.key, "error", f"/w/{ex.file}", 1.0, {"message": "no torch"})
        state = progress.state_of(store, ex)
        assert (state.state, state.attempts) == ("not graded", 0)
        store.record_attempt(ex.key, "fail", f"/w/{ex.file}", 1.0, {"checks": [
            {"name": "a", "status": "pass"}, {"name": "b", "status": "fail"}]})
        store.record_attempt(ex.key, "error", f"/w/{ex.file}", 1.0, {"message": "syntax error"})
        state = progress.state_of(store, ex)
        assert (state.state, state.attempts) == ("failing", 1)
        assert (state.passed_checks, state.total_checks) == (1, 2)
        assert state.last.startswith("error: syntax error")


def test_a_grade_that_cannot_be_saved_is_still_shown(tmp_path, monkeypatch):
    from pathlib import Path

    from click.testing import CliRunner

    from drill.cli import cli
    from drill.store import StoreError

    def refuse(self, *args, **kwargs):
        raise StoreError("the progress database is locked by another process")

    monkeypatch.setattr(Store, "record_attempt", refuse)
    path = tmp_path / "01_online_softmax.py"
    solution = Path(__file__).resolve().parent.parent / "solutions" / "flashattention" / "01_online_softmax.py"
    path.write_text(solution.read_text())
    result = CliRunner().invoke(cli, ["check", str(path)])
    assert result.exit_code == 0 and "PASSED" in result.output
    assert "not saved to your progress" in result.output and "locked" in result.output


def test_a_command_facing_a_lock_says_so_and_leaves_the_file(drill_home):
    import os
    import subprocess
    import sys

    with Store() as store:
        store.record_attempt("flashattention/online-softmax", "pass", "/x.py", 1.0, {})
    other = _hold_lock(drill_home / "drill.sqlite3")
    try:
        proc = subprocess.run([sys.executable, "-m", "drill", "status"], capture_output=True, text=True,
                              env={**os.environ, "DRILL_LOCK_WAIT": "3"}, timeout=60)
    finally:
        other.rollback()
        other.close()
    assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 2 and "waiting up to" in lines[0] and "locked by another process" in lines[1]
    assert sorted(p.name for p in drill_home.iterdir()) == ["drill.sqlite3"]
    with Store() as store:
        assert store.passed("flashattention/online-softmax")


def test_an_old_database_loses_its_always_zero_cram_column_but_no_review(drill_home):
    path = drill_home / "drill.sqlite3"
    old = sqlite3.connect(path)
    old.executescript("CREATE TABLE reviews (id INTEGER PRIMARY KEY AUTOINCREMENT, card_id TEXT NOT NULL, "
                      "at TEXT NOT NULL, rating INTEGER NOT NULL, cram INTEGER NOT NULL DEFAULT 0, "
                      "log_json TEXT NOT NULL);"
                      "INSERT INTO reviews (card_id, at, rating, cram, log_json) VALUES ('c', 't', 3, 0, '{}');")
    old.commit()
    old.close()
    with Store() as store:
        columns = [row[1] for row in store.conn.execute("PRAGMA table_info(reviews)")]
        rows = [tuple(row) for row in store.conn.execute("SELECT card_id, rating FROM reviews")]
    assert rows == [("c", 3)]
    if sqlite3.sqlite_version_info >= (3, 35):
        assert "cram" not in columns


def test_an_unknown_schema_version_is_refused_and_left_untouched(tmp_path, monkeypatch):
    import sqlite3

    from drill import paths
    from drill.store import Store, StoreError

    monkeypatch.setenv("DRILL_HOME", str(tmp_path))
    with Store() as store:
        store.record_attempt("flashattention/online-softmax", "pass", "a.py", 1.0, {"status": "pass"})
    with sqlite3.connect(paths.database()) as conn:
        conn.execute("UPDATE meta SET value = '99' WHERE key = 'schema'")
    before = paths.database().read_bytes()
    with pytest.raises(StoreError, match="schema version '99'"):
        Store().__enter__()
    assert paths.database().read_bytes() == before
