# drill: flashattention/online-softmax
# variant: each block's terms added to the running sum one at a time, in a Python loop
"""Online softmax whose update adds a block's exponentials to l one by one."""

import math

import numpy as np


def online_softmax_update(m, l, block):
    m_new = max(m, float(np.max(block)))
    if m_new == -math.inf:
        return m_new, l
    l = l * math.exp(m - m_new)  # the old sum, moved onto the new max's scale
    for v in block:
        l += math.exp(float(v) - m_new)
    return m_new, l


def online_softmax(x, block_size):
    x = np.asarray(x, dtype=np.float64)
    rows = x.reshape(-1, x.shape[-1])
    out = np.empty_like(rows)
    for r, row in enumerate(rows):
        m, l = -math.inf, 0.0
        for start in range(0, row.shape[0], block_size):
            m, l = online_softmax_update(m, l, row[start:start + block_size])
        with np.errstate(invalid="ignore", divide="ignore"):
            out[r] = np.exp(row - m) / l
    return out.reshape(x.shape)
