# drill: flashattention/online-softmax
"""Attack: online_softmax starts each row's running max at the finite stand-in -1e303 instead of -inf
(the finite_start_max trick, moved below every logit the checks then used). A row near -1e308, such
as [-1e308, -1.2e308], never lifts m above -1e303, underflows to l = 0 and comes out NaN; the
statement promises any magnitude.

Slipped past, before the checks were changed, every check: the lowest finite logit any of them used
was -1e300. The extreme-logits check now also softmaxes a row at -1e308, which leaves no room for a
finite stand-in above the logits.
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
    m = np.full(rows.shape[0], -1e303)  # WRONG: a finite stand-in for -inf
    l = np.zeros(rows.shape[0])
    for start in range(0, rows.shape[1], block_size):
        for r in range(rows.shape[0]):
            m[r], l[r] = online_softmax_update(m[r], l[r], rows[r, start:start + block_size])
    with np.errstate(invalid="ignore", divide="ignore"):
        p = np.exp(rows - m[:, None]) / l[:, None]
    return p.reshape(x.shape)
