# drill: flashattention/online-softmax
"""Attack: online_softmax streams block by block only when block_size divides the row length; a
ragged row (a shorter last block) is softmaxed in one go, one max and one sum over the whole row.
The values are right to within rounding, but the statistics were never streamed.

Slipped past, before the checks were changed, the streaming check: every row it built was a whole
number of blocks long. It now also ends rows in a shorter last block (blocks of 4, 128 and 1000).
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
    n = rows.shape[1]
    if n % block_size:  # WRONG: ragged rows fall back to a one-shot softmax
        m = rows.max(axis=1, keepdims=True)
        with np.errstate(invalid="ignore"):
            e = np.exp(rows - np.where(m == -np.inf, 0.0, m))
        return (e / e.sum(axis=1, keepdims=True)).reshape(x.shape)
    m = np.full(rows.shape[0], -np.inf)
    l = np.zeros(rows.shape[0])
    for start in range(0, n, block_size):
        for r in range(rows.shape[0]):
            m[r], l[r] = online_softmax_update(m[r], l[r], rows[r, start:start + block_size])
    with np.errstate(invalid="ignore", divide="ignore"):
        p = np.exp(rows - m[:, None]) / l[:, None]
    return p.reshape(x.shape)
