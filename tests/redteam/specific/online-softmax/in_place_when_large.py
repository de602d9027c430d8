# drill: flashattention/online-softmax
"""Attack: the softmax values are right and streamed, but on inputs of 4096 elements or more
online_softmax saves a copy by writing exp(x - m) / l into x itself (np.asarray does not copy a
float64 array): the caller's logits come back overwritten. The statement says to leave x
unchanged.

Slipped past, before the checks were changed, the input check: it watched a 3x9 array and a row
of 13 only, and every other check hands the function a copy. It now also watches a [12, 128077]
array and a row of 200501, as large as the streaming check's.
"""

import numpy as np

IN_PLACE_FROM = 4096  # elements


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
    for start in range(0, rows.shape[1], block_size):
        for r in range(rows.shape[0]):
            m[r], l[r] = online_softmax_update(m[r], l[r], rows[r, start:start + block_size])
    out = rows if x.size >= IN_PLACE_FROM else np.empty_like(rows)  # WRONG: x itself for large inputs
    with np.errstate(invalid="ignore", divide="ignore"):
        np.subtract(rows, m[:, None], out=out)
        np.exp(out, out=out)
        np.divide(out, l[:, None], out=out)
    return out.reshape(x.shape)
