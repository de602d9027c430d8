# drill: flashattention/online-softmax
# Attack on the streaming check: a one-shot softmax whose sum is np.cumsum (sequential, like a
# running sum added term by term) instead of np.sum (pairwise). On rows whose max comes first
# it rounds as a term-by-term fold does; a row whose max comes last must still tell it apart,
# because the sum was never rescaled.
import math

import numpy as np


def online_softmax_update(m, l, block):
    m_new = max(m, float(np.max(block)))
    if m_new == -math.inf:
        return m_new, l
    return m_new, l * math.exp(m - m_new) + float(np.exp(block - m_new).sum())


def online_softmax(x, block_size):
    x = np.asarray(x, dtype=np.float64)
    m = np.max(x, axis=-1, keepdims=True)
    with np.errstate(invalid="ignore"):
        e = np.exp(x - np.where(m == -np.inf, 0.0, m))
        return e / np.cumsum(e, axis=-1)[..., -1:]
