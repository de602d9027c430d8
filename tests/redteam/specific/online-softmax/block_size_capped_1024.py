# drill: flashattention/online-softmax
"""Attack: online_softmax caps block_size at 1024 columns (a larger fixed tile than
block_size_capped's 64): asked for blocks of 4096 it reads 1024 at a time, so its running sum rounds
like blocks of 1024, not of block_size. The softmax values are right to within rounding.

Slipped past, before the checks were changed, the streaming check: the largest block it asked for
was 1000, below the cap. It now also streams rows of 300 blocks of 4096 (and a shorter last one).
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
    m = np.full(rows.shape[0], -np.inf)
    l = np.zeros(rows.shape[0])
    block_size = min(block_size, 1024)  # WRONG: block_size > 1024 is ignored
    for start in range(0, rows.shape[1], block_size):
        for r in range(rows.shape[0]):
            m[r], l[r] = online_softmax_update(m[r], l[r], rows[r, start:start + block_size])
    with np.errstate(invalid="ignore", divide="ignore"):
        p = np.exp(rows - m[:, None]) / l[:, None]
    return p.reshape(x.shape)
