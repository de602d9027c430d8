"""The ring exercises' launcher (exercises/.../checks/_ring_harness.py) on its own: a rank that is
slow to finish joining the process group still joins."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from drill import catalog

pytest.importorskip("torch")

CHECKS = catalog.resolve("flashattention/ring-attention").checks_path.parent
GRADER = Path(__file__).resolve().parent.parent / "drill" / "grader"

# Run in a fresh process: the launcher forks its ranks from it. Rank 1's store answers its last
# reads 1 s late, as on a busy machine, while rank 0 is already through init_process_group.
SLOW_RANK = r'''
import json, os, sys, time
sys.path[:0] = [sys.argv[1], sys.argv[2]]
import numpy as np
import torch.distributed as dist
import _ring_harness as harness

class LateStore(dist.Store):
    def __init__(self, inner):
        super().__init__()
        self.inner = inner
    def set(self, key, value): return self.inner.set(key, value)
    def get(self, key): return self.inner.get(key)
    def add(self, key, n): return self.inner.add(key, n)
    def check(self, keys): return self.inner.check(keys)
    def wait(self, keys, timeout=None):
        if keys[0].endswith("/1"):  # rank 1 waiting for its own address: the last read of its init
            time.sleep(1.0)
        return self.inner.wait(keys)

real = dist.TCPStore
def store(*args, is_master, **kwargs):
    made = real(*args, is_master=is_master, **kwargs)
    return made if is_master else LateStore(made)
harness.dist.TCPStore = store

def run_once(work):
    for rank in range(2):
        folder = os.path.join(work, "ranks", f"W2_r{rank}")
        os.makedirs(folder)
        np.savez(os.path.join(folder, "inputs.npz"), unused=np.zeros(1))
        with open(os.path.join(folder, "user.py"), "w") as f:
            f.write("def ring_attention(q, k, v, group=None, causal=False):\n    raise NotImplementedError\n")
    return harness.run_world(2, work, {"worlds": [2], "user_file": "user.py", "cases": []})

# Whether rank 0 gets through init before rank 1's late read depends on the connection order:
# without the harness's barrier before it cuts the store, each of 3 tries had a failed run.
print(json.dumps([run_once(os.path.join(sys.argv[3], str(i))) for i in range(6)]))
'''


@pytest.mark.slow
def test_a_rank_slow_to_finish_joining_still_joins(tmp_path):
    proc = subprocess.run([sys.executable, "-c", SLOW_RANK, str(CHECKS), str(GRADER), str(tmp_path)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    for run in json.loads(proc.stdout.strip().splitlines()[-1]):
        events = [[e["event"] for e in rank] for rank in run["ranks"]]
        assert run["status"] == "ok", run["ranks"]
        assert all(rank[-1] == "finished" for rank in events), events
