# drill: flashattention/online-softmax
# variant: the update sums a block exactly with math.fsum; online_softmax loops blocks outer, rows inner, and writes exp/divide in place into one output buffer
"""Online softmax whose block sums are exact (math.fsum), with the normalisation done in place."""

import math

import numpy as np


def online_softmax_update(m, l, block):
    terms = np.asarray(block, dtype=np.float64).ravel()
    if terms.size == 0:
        return m, l
    m_new = max(m, float(terms.max()))
    if m_new == -math.inf:  # nothing finite yet
        return m, l
    alpha = math.exp(m - m_new)  # 0 when m is still -inf
    return m_new, l * alpha + math.fsum(np.exp(terms - m_new))


def online_softmax(x, block_size):
    x = np.asarray(x, dtype=np.float64)
    two_d = np.atleast_2d(x)
    count, n = two_d.shape
    stats = [(-math.inf, 0.0)] * count
    for start in range(0, n, block_size):  # blocks outer, rows inner
        stop = min(start + block_size, n)
        for r in range(count):
            stats[r] = online_softmax_update(*stats[r], two_d[r, start:stop])
    m = np.array([s[0] for s in stats])[:, None]
    l = np.array([s[1] for s in stats])[:, None]
    out = two_d - m  # a fresh array: x itself is never written
    np.exp(out, out=out)
    with np.errstate(invalid="ignore", divide="ignore"):
        out /= l
    return out.reshape(x.shape)
