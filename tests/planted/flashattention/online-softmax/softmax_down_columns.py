# drill: flashattention/online-softmax
# planted: a 2-D input is normalised along the first axis
# expect-fail: A 2-D array
import numpy as np

def online_softmax_update(m, l, block):
    m_new = max(m, float(np.max(block)))
    if m_new == -np.inf:
        return m_new, l
    return m_new, l * np.exp(m - m_new) + float(np.exp(block - m_new).sum())

def online_softmax(x, block_size):
    x = np.asarray(x, dtype=np.float64)
    if x.ndim == 2:
        e = np.exp(x - x.max(axis=0, keepdims=True))
        return e / e.sum(axis=0, keepdims=True)
    e = np.exp(x - x.max())
    return e / e.sum()

