# drill: flashattention/online-softmax
"""Attack: online_softmax_update only looks at the first 8 logits of a block (an unrolled 8-wide
step), so a longer block loses the rest; online_softmax, with its own right update, is correct.

Slipped past, before the checks were changed, the update checks: every block they handed
online_softmax_update held at most 7 logits.
"""

import numpy as np


def online_softmax_update(m, l, block):
    block = np.asarray(block, dtype=np.float64)[:8]  # WRONG: the rest of the block is dropped
    m_new = max(m, float(block.max()))
    if m_new == -np.inf:
        return m_new, l
    return m_new, l * np.exp(m - m_new) + float(np.exp(block - m_new).sum())


def _update(m, l, block):
    m_new = max(m, float(block.max()))
    if m_new == -np.inf:
        return m_new, l
    return m_new, l * np.exp(m - m_new) + float(np.exp(block - m_new).sum())


def online_softmax(x, block_size):
    x = np.asarray(x, dtype=np.float64)
    rows = np.atleast_2d(x)
    m = np.full(rows.shape[0], -np.inf)
    l = np.zeros(rows.shape[0])
    for start in range(0, rows.shape[1], block_size):
        for r in range(rows.shape[0]):
            m[r], l[r] = _update(m[r], l[r], rows[r, start:start + block_size])
    with np.errstate(invalid="ignore", divide="ignore"):
        p = np.exp(rows - m[:, None]) / l[:, None]
    return p.reshape(x.shape)
