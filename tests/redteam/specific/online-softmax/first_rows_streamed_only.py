# drill: flashattention/online-softmax
"""Attack: online_softmax streams the first four rows of a 2-D array block by block, and softmaxes
every later row in one go (one max, one sum over the whole row). The values are right to within
rounding, but most rows never have their statistics streamed.

Slipped past, before the checks were changed, the streaming check: its 2-D arrays had only three
rows. At blocks of 128 it now passes twelve rows (the three kinds of signature row, four times
over), and every one must round like a block-by-block fold.
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
    out = np.empty_like(rows)
    for r in range(R):
        if r >= 4:  # WRONG: rows past the fourth are softmaxed in one go
            mm = rows[r].max()
            with np.errstate(invalid="ignore"):
                e = np.exp(rows[r] - (0.0 if mm == -np.inf else mm))
            out[r] = e / e.sum()
            continue
        m, l = -np.inf, 0.0
        for start in range(0, rows.shape[1], block_size):
            m, l = online_softmax_update(m, l, rows[r, start:start + block_size])
        with np.errstate(invalid="ignore", divide="ignore"):
            out[r] = np.exp(rows[r] - m) / l
    return out.reshape(x.shape)
