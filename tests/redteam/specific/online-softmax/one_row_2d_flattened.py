# drill: flashattention/online-softmax
"""Attack: online_softmax lifts x to 2-D with np.atleast_2d and then decides whether x was 1-D by
counting rows: a 2-D array of one row, [1, n], comes back as [n]. The statement asks for the
shape of x, 1-D or 2-D, however many rows.

Slipped past, before the checks were changed, every check: no 2-D array had fewer than 3 rows. The
2-D check now also passes a [1, n] array (and an [R, 1] one), and the extreme-logits check a
[1, n] row.
"""

import numpy as np


def online_softmax_update(m, l, block):
    block = np.asarray(block, dtype=np.float64)
    m_new = max(m, float(block.max()))
    if m_new == -np.inf:
        return m_new, l
    return m_new, l * np.exp(m - m_new) + float(np.exp(block - m_new).sum())


def online_softmax(x, block_size):
    rows = np.atleast_2d(np.asarray(x, dtype=np.float64))
    m = np.full(rows.shape[0], -np.inf)
    l = np.zeros(rows.shape[0])
    for start in range(0, rows.shape[1], block_size):
        for r in range(rows.shape[0]):
            m[r], l[r] = online_softmax_update(m[r], l[r], rows[r, start:start + block_size])
    with np.errstate(invalid="ignore", divide="ignore"):
        p = np.exp(rows - m[:, None]) / l[:, None]
    return p[0] if rows.shape[0] == 1 else p  # WRONG: a [1, n] input was 2-D too
