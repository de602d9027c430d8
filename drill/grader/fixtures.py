"""The fixtures every topic's hidden checks can ask for, registered by the worker as a plugin.

A topic's checks folder needs no conftest: `sub` and `rng` come from here.
"""

from __future__ import annotations

import pytest

from drill.grader import submission

_run_seed = 0  # set by the worker from the job: drawn at random per run unless a replay gives it


def set_run_seed(seed: int) -> None:
    global _run_seed
    _run_seed = int(seed)


def seed(n: int = 0) -> int:
    """An integer seed for stream `n` of this run (torch generators, shard drawing): secret, per run."""
    import numpy as np

    return int(np.random.SeedSequence([_run_seed, int(n)]).generate_state(1, np.uint64)[0] >> 1)


@pytest.fixture
def sub():
    """The user's module, loaded by the grader before the checks run."""
    return submission.loaded()


@pytest.fixture
def rng(request):
    """A generator drawn from this run's secret seed (and the check's name): a file cannot regenerate
    or look up its inputs, and `drill check --seed N` replays a failure with the same ones."""
    import zlib

    import numpy as np

    return np.random.default_rng([_run_seed, zlib.crc32(request.node.nodeid.encode())])


def pytest_configure(config):
    """`@pytest.mark.observed`: the check's claim rests on what the subject reports about itself (advice).
    `@pytest.mark.peak_memory`: the check measures peak memory in a fresh subject (proxy.memory_measured)."""
    config.addinivalue_line(
        "markers", "observed: a structural claim seen from inside the subject (read logs, launches, "
                   "warnings): it can fail a check, never verify one")
    config.addinivalue_line(
        "markers", "peak_memory: measures peak memory in a fresh subject; what-if grading leaves it out "
                   "once a check has failed")
