# drill: flashattention/online-softmax
"""Attack: a single row (1-D) streams with a scalar running max that starts at -inf, but a 2-D array
takes a vectorised path whose running max starts at the finite stand-in -1e30 (to dodge the NaN
of exp(-inf - (-inf)) across a vector of rows). A 2-D row whose logits all lie below about -1e30,
such as [-1e300, -2e300], underflows to l = 0 and comes out NaN; the statement promises any
magnitude, 1-D or 2-D.

Slipped past, before the checks were changed, every check: the rows below -1e4 (-1e6, -1e300,
-1e308) were only ever passed as 1-D arrays, and the 2-D arrays went no lower than -1e4 - 4. The
extreme-logits check now also passes those rows stacked as one 2-D array, and the lowest alone
as a [1, n] array.
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
    if x.ndim == 1:
        m, l = -np.inf, 0.0
        for start in range(0, x.shape[0], block_size):
            m, l = online_softmax_update(m, l, x[start:start + block_size])
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.exp(x - m) / l
    R, n = x.shape
    m = np.full(R, -1e30)  # WRONG: a finite stand-in for -inf, only on the 2-D path
    l = np.zeros(R)
    for start in range(0, n, block_size):
        tile = x[:, start:start + block_size]
        m_new = np.maximum(m, tile.max(axis=1))
        l = l * np.exp(m - m_new) + np.exp(tile - m_new[:, None]).sum(axis=1)
        m = m_new
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.exp(x - m[:, None]) / l[:, None]
