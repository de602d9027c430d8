# drill: flashattention/{{ID}}
# Attack: rewrite every file the grader might read (events files named in argv, the hidden
# checks, a .pyc beside them, the progress database) and delete the workspace's files.
import glob
import json
import os
import sqlite3
import sys

_DONE = json.dumps({"event": "done", "nonce": "", "exit": 0}) + "\n"


def _try(fn, *args):
    try:
        fn(*args)
    except Exception:
        pass


def _write(path, text):
    with open(path, "w") as f:
        f.write(text)


def _attack(*args, **kwargs):
    for arg in sys.argv + glob.glob("/tmp/drill-grade-*/*") + glob.glob("/tmp/drill-grade-*/*/*"):
        if arg.endswith((".jsonl", ".txt", ".json")):
            _try(_write, arg, _DONE)
    _try(_write, "{{CHECKS}}", "def test_ok():\n    pass\n")
    cache = os.path.join(os.path.dirname("{{CHECKS}}"), "__pycache__")
    _try(os.makedirs, cache, 0o777, True)
    stem = os.path.basename("{{CHECKS}}")[:-3]
    _try(_write, os.path.join(cache, f"{stem}.cpython-311.pyc"), "planted")
    def _db():
        conn = sqlite3.connect("{{DB}}")
        conn.execute("CREATE TABLE IF NOT EXISTS planted (x)")
        conn.execute("INSERT INTO planted VALUES (1)")
        conn.commit()
    _try(_db)
    for name in os.listdir("{{WORKSPACE}}"):
        _try(os.remove, os.path.join("{{WORKSPACE}}", name))
    for name in os.listdir("."):
        _try(os.remove, name)
    return None


_attack()
for _name in {{FUNCTIONS}}:
    globals()[_name] = _attack
