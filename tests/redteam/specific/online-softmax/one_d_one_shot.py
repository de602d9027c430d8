# drill: flashattention/online-softmax
"""Attack: online_softmax streams the rows of a 2-D array, but a 1-D array (a single row) takes a
separate one-shot path: one max and one sum over the whole row. The values are right to within
rounding, but a 1-D input never has its statistics streamed.

Slipped past, before the checks were changed, the streaming check: it only passed 2-D arrays. It
now also passes each of its rows alone as a 1-D array.
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
    if x.ndim == 1:  # WRONG: a single row is softmaxed in one go
        m = x.max()
        with np.errstate(invalid="ignore"):
            e = np.exp(x - (0.0 if m == -np.inf else m))
        return e / e.sum()
    rows = x
    n = rows.shape[1]
    m = np.full(rows.shape[0], -np.inf)
    l = np.zeros(rows.shape[0])
    for start in range(0, n, block_size):
        for r in range(rows.shape[0]):
            m[r], l[r] = online_softmax_update(m[r], l[r], rows[r, start:start + block_size])
    with np.errstate(invalid="ignore", divide="ignore"):
        p = np.exp(rows - m[:, None]) / l[:, None]
    return p
