"""Fresh inputs (issue 31): every run draws its own secret seed, shown in --json; `--seed N` replays a
run and such a replay is never saved as progress."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from pathlib import Path

from drill import paths

SOLUTION = Path(__file__).resolve().parent.parent / "solutions" / "flashattention" / "02_tiling_shapes.py"


def _check(path: Path, *extra) -> tuple[int, dict]:
    proc = subprocess.run([sys.executable, "-m", "drill", "check", str(path), "--json", *extra],
                          capture_output=True, text=True, timeout=120)
    return proc.returncode, json.loads(proc.stdout)


def _attempts() -> int:
    with sqlite3.connect(paths.database()) as conn:
        return conn.execute("SELECT COUNT(*) FROM attempts").fetchone()[0]


def test_every_run_draws_a_fresh_seed_and_a_chosen_seed_replays_unsaved(tmp_path):
    path = tmp_path / SOLUTION.name
    path.write_bytes(SOLUTION.read_bytes())
    (rc1, first), (rc2, second) = _check(path), _check(path)
    assert rc1 == rc2 == 0
    assert isinstance(first["seed"], int) and isinstance(second["seed"], int)
    assert first["seed"] != second["seed"], "two runs were graded on the same inputs"
    saved = _attempts()
    assert saved == 2
    rc, replay = _check(path, "--seed", str(first["seed"]))
    assert rc == 0 and replay["seed"] == first["seed"] and replay["seed_chosen"] is True
    assert _attempts() == saved, "a replay with --seed was saved as progress"
