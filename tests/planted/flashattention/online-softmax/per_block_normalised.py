# drill: flashattention/online-softmax
# planted: each block is softmaxed on its own
# expect-fail: Rows of many lengths
# expect-fail: A 2-D array
import numpy as np

def online_softmax_update(m, l, block):
    m_new = max(m, float(np.max(block)))
    if m_new == -np.inf:
        return m_new, l
    return m_new, l * np.exp(m - m_new) + float(np.exp(block - m_new).sum())

def online_softmax(x, block_size):
    x = np.asarray(x, dtype=np.float64)
    rows = np.atleast_2d(x)
    parts = []
    for start in range(0, rows.shape[1], block_size):
        b = rows[:, start:start + block_size]
        e = np.exp(b - b.max(axis=1, keepdims=True))
        parts.append(e / e.sum(axis=1, keepdims=True))
    return np.concatenate(parts, axis=1).reshape(x.shape)

