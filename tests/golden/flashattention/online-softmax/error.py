# drill: flashattention/online-softmax
"""Online softmax: reference solution."""

import numpy as np


def online_softmax_update(m, l, block):
    """One streaming step: returns (m_new, l_new)."""
    block = np.asarray(block, dtype=np.float64)
    m_new = max(m, float(block.max())) if block.size else m
    if m_new == -np.inf:
        # Nothing finite seen yet: exp(-inf - (-inf)) would be NaN, and the sum is still 0.
        return m_new, l
    # exp(m - m_new) <= 1 rescales the old sum onto the new max; for m = -inf it is 0.
    l_new = l * np.exp(m - m_new) + float(np.exp(block - m_new).sum())
    return m_new, l_new


def online_softmax(:x, block_size):
    """Softmax along the last axis, statistics streamed block by block."""
    x = np.asarray(x, dtype=np.float64)
    rows = np.atleast_2d(x)  # [rows, n]
    n = rows.shape[-1]
    m = np.full(rows.shape[0], -np.inf)  # running max per row
    l = np.zeros(rows.shape[0])  # running sum per row
    for start in range(0, n, block_size):
        for r in range(rows.shape[0]):
            m[r], l[r] = online_softmax_update(m[r], l[r], rows[r, start:start + block_size])
    # One final pass to normalise; rows of only -inf are undefined and not checked.
    with np.errstate(invalid="ignore", divide="ignore"):
        p = np.exp(rows - m[:, None]) / l[:, None]
    return p.reshape(x.shape)
