"""The progress database: transactional, and never silently lost."""

from __future__ import annotations

import sqlite3

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
