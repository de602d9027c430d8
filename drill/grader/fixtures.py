"""The fixtures every topic's hidden checks can ask for, registered by the worker as a plugin.

A topic's checks folder needs no conftest: `sub` and `rng` come from here.
"""

from __future__ import annotations

import pytest

from drill.grader import submission

SEED = 20221127


@pytest.fixture
def sub():
    """The user's module, loaded by the grader before the checks run."""
    return submission.loaded()


@pytest.fixture
def rng():
    """A generator seeded the same way for every check, so a failure can be replayed."""
    import numpy as np

    return np.random.default_rng(SEED)
