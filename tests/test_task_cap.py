"""A subject tree's processes and threads are capped (sandbox.MemoryGroup.MAX_TASKS): memory alone let
one grading use up the machine's PIDs, so that nothing else on it could fork while it ran."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from drill.grader import sandbox

SCRIPT = """
import os, threading
stop = threading.Event()
started = 0
for _ in range(48):  # 48 processes of up to 110 threads: well past the cap, far below pid_max
    read, write = os.pipe()
    try:
        pid = os.fork()
    except OSError:
        break
    if pid == 0:
        n = 0
        try:
            for _ in range(110):
                threading.Thread(target=stop.wait, daemon=True).start()
                n += 1
        except RuntimeError:
            pass
        os.write(write, str(n + 1).encode())
        stop.wait(30)
        os._exit(0)
    started += int(os.read(read, 32) or 0)
with open("count.txt", "w") as f:
    f.write(str(started))
"""


def test_tasks_capped(tmp_path: Path):
    group = sandbox.MemoryGroup.create(f"drill-{os.getpid()}-probe", 1 << 30)  # named as a live grader's
    if group is None:
        pytest.skip("no memory cgroup here")
    has_cap = group.pids is not None or (group.path / "pids.max").exists()
    group.remove()
    if not has_cap:
        pytest.skip("no pids controller here")
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    (scratch / "flood.py").write_text(SCRIPT)
    run = sandbox.Contained.start(scratch / "flood.py", [], scratch=scratch, hidden=[], memory_mb=4096,
                                  name=f"drill-{os.getpid()}-flood")
    try:
        end = time.monotonic() + 60
        while run.proc.poll() is None and not (scratch / "count.txt").exists() and time.monotonic() < end:
            time.sleep(0.05)
        time.sleep(0.2)
        count = int((scratch / "count.txt").read_text())
    finally:
        run.close()
    assert 1000 < count <= sandbox.MemoryGroup.MAX_TASKS, f"{count} tasks in one subject tree"
