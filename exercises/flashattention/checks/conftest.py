"""Fixtures shared by the hidden checks: the user's module and a seeded generator."""

import numpy as np
import pytest

from drill.grader import submission


@pytest.fixture
def sub():
    """The user's module, loaded by the grader before the checks run."""
    return submission.loaded()


@pytest.fixture
def rng():
    return np.random.default_rng(20221127)
