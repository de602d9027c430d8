"""What a default `python -m pytest` grades of the slow matrices, and what only the full run does.

The torch exercises grade in 5-20 s each on a CPU (ring ranks start torch, Triton kernels run
under its interpreter), so a default run grades a fixed sample of their planted files and attacks;
DRILL_FULL_MATRIX=1 (as .ci/run sets) grades all of them. A test left out is skipped with that
reason, never dropped from the collection, so the count of what did not run is always shown.
"""

from __future__ import annotations

import os

import pytest

FULL = bool(os.environ.get("DRILL_FULL_MATRIX"))
SKIP_REASON = "graded in the full run only (DRILL_FULL_MATRIX=1, as CI sets)"


def sample(params: list, every: int, slow=lambda p: True) -> list:
    """`params` (pytest.param objects) with all but every `every`-th slow one marked full-only.

    The choice is by position among the slow ones, so it is the same on every xdist worker.
    """
    out, n = [], 0
    for p in params:
        if slow(p):
            if n % every:
                p = pytest.param(*p.values, id=p.id, marks=[*p.marks, pytest.mark.full])
            n += 1
        out.append(p)
    return out
