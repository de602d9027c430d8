"""Putting an exercise's stub back, keeping the user's version beside it."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

from drill import userfile
from drill.catalog import Exercise


def backup_name(path: Path, when: float | None = None) -> Path:
    """01_online_softmax.py -> 01_online_softmax.py.20261130-154500.bak: not a .py file, so it is
    never mistaken for the exercise, and sorted by time beside it."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(when))
    candidate = path.with_name(f"{path.name}.{stamp}.bak")
    n = 1
    while candidate.exists():  # two resets in one second keep both copies
        n += 1
        candidate = path.with_name(f"{path.name}.{stamp}-{n}.bak")
    return candidate


def restore(ex: Exercise, path: Path) -> Path | None:
    """Write the stub to `path`. Returns where the user's previous file went, or None when there
    was nothing to keep (no file, or it already was the stub). Raises OSError."""
    stub = ex.stub_path.read_bytes()
    backup = None
    if path.exists():
        if not userfile.is_regular(path):
            # Reading a FIFO blocks for ever and /dev/zero fills memory; neither can be backed up.
            raise OSError(f"{os.fsdecode(path.name)} is not a regular file (a folder, a pipe or a device?); "
                          "move it away and run drill reset again")
        if userfile.holds(path, stub):
            return None
        backup = backup_name(path)
        shutil.copy2(path, backup)
    # Write a new file and rename it over the old one: a crash leaves either version, never half.
    tmp = path.with_name(f".{path.name}.drill-reset")
    tmp.write_bytes(stub)
    os.replace(tmp, path)
    return backup
