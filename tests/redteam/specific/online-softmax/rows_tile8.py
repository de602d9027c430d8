# drill: flashattention/online-softmax
"""Attack: online_softmax keeps its running (m, l) in a fixed tile of 8 rows; a 2-D array with more
rows reuses row r % 8's statistics for row r, so rows 8 and beyond come out wrong (they do not even
sum to 1).

Slipped past, before the checks were changed, every value check: the tallest array any of them
passed had 6 rows. The 2-D check now also tries an array of 37 to 69 rows.
"""

import numpy as np


def online_softmax_update(m, l, block):
    block = np.asarray(block, dtype=np.float64)
    m_new = max(m, float(block.max()))
    if m_new == -np.inf:
        return m_new, l
    return m_new, l * np.exp(m - m_new) + float(np.exp(block - m_new).sum())


def online_softmax(x, block_size):
    x = np.asarray(x, dtype=np.float64)
    rows = np.atleast_2d(x)
    R = rows.shape[0]
    m = np.full(8, -np.inf)  # WRONG: a fixed tile of 8 rows; row r shares stats with row r % 8
    l = np.zeros(8)
    for start in range(0, rows.shape[1], block_size):
        for r in range(min(R, 8)):
            m[r], l[r] = online_softmax_update(m[r], l[r], rows[r, start:start + block_size])
    idx = np.arange(R) % 8
    with np.errstate(invalid="ignore", divide="ignore"):
        p = np.exp(rows - m[idx][:, None]) / l[idx][:, None]
    return p.reshape(x.shape)
