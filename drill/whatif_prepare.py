"""What-if questions prepared in the background once `drill check` passes a file.

`drill check` starts `drill whatif FILE --prepare` as a detached, lower-priority process when
it reports a pass in a terminal; that process grades the session's mutants and saves each
outcome to the store as it comes. While it runs it holds a lock named by the file's key, so a
`drill whatif` started meanwhile reads the outcomes from the store instead of grading the same
mutants a second time, and grades any left over itself once the lock is free.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

from drill import paths

ENV_SWITCH = "DRILL_WHATIF_BACKGROUND"  # "0": never start one (the tests set it)
POLL_S = 0.25


def _lock_path(key: str) -> Path:
    return paths.home() / f"whatif-{key}.lock"


@contextmanager
def holding(key: str):
    """The lock of `key`'s preparation: yields True if this process holds it, False if another does."""
    path = _lock_path(key)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def running(key: str) -> bool:
    """Whether a background preparation of `key` is grading now."""
    path = _lock_path(key)
    if not path.exists():
        return False
    with open(path, "a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(handle, fcntl.LOCK_UN)
        return False


def start(path: Path) -> bool:
    """Start preparing the questions about `path` in the background, unless switched off."""
    if os.environ.get(ENV_SWITCH, "1") == "0":
        return False
    try:
        subprocess.Popen([sys.executable, "-m", "drill", "whatif", str(path), "--prepare"],
                         stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         start_new_session=True, close_fds=True)
    except OSError:
        return False
    return True


def wait_for_outcome(key: str, mutant_id: str) -> dict | None:
    """The outcome the background preparation saves for `mutant_id`; None once it has stopped without."""
    from drill.store import Store

    with Store() as store:
        while True:
            alive = running(key)  # read before the store: an outcome saved just before it ends is seen
            found = store.mutant_outcomes(key).get(mutant_id)
            if found is not None or not alive:
                return found
            time.sleep(POLL_S)
