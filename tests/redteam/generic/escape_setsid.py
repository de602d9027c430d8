# drill: flashattention/{{ID}}
# Attack: a grandchild that calls setsid(), outlives the grader and rewrites its results
# and the progress database once drill has gone.
import ctypes
import os
import sqlite3
import time


def _escape():
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            ctypes.CDLL(None).prctl(15, b"{{MARKER}}", 0, 0, 0)  # PR_SET_NAME, so the test can look
            for _ in range(600):
                time.sleep(0.05)
                try:
                    conn = sqlite3.connect("{{DB}}")
                    conn.execute("UPDATE attempts SET status = 'pass'")
                    conn.commit()
                except Exception:
                    pass
            os._exit(0)
        os._exit(0)


_escape()


def _attack(*args, **kwargs):
    _escape()
    return None


for _name in {{FUNCTIONS}}:
    globals()[_name] = _attack
