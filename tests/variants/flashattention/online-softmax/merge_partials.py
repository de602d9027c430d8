# drill: flashattention/online-softmax
# variant: each block becomes its own (max, sum) partial, merged into the running state like 04's lse merge; a small State class per row
"""Online softmax as a fold of per-block partial statistics: (m, l) merged with (m_b, l_b)."""

import math

import numpy as np


def _merge(m1, l1, m2, l2):
    """Combine two (max, sum-of-exp relative to that max) pairs."""
    m = max(m1, m2)
    if m == -math.inf:
        return m, 0.0
    return m, l1 * math.exp(m1 - m) + l2 * math.exp(m2 - m)


def online_softmax_update(m, l, block):
    block = np.asarray(block, dtype=np.float64)
    if block.size == 0:
        return m, l
    mb = float(block.max())
    lb = float(np.exp(block - mb).sum()) if mb > -math.inf else 0.0  # the block on its own max
    return _merge(m, l, mb, lb)


class State:
    def __init__(self):
        self.m, self.l = -math.inf, 0.0

    def push(self, block):
        self.m, self.l = online_softmax_update(self.m, self.l, block)

    def probabilities(self, row):
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.exp(row - self.m) / self.l


def online_softmax(x, block_size):
    x = np.asarray(x, dtype=np.float64)
    if x.ndim == 1:
        return online_softmax(x[None, :], block_size=block_size)[0]
    out = np.zeros_like(x)
    for r, row in enumerate(x):
        state = State()
        for start in range(0, len(row), block_size):
            state.push(row[start:start + block_size])
        out[r] = state.probabilities(row)
    return out
