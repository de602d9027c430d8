# drill: flashattention/online-softmax
# planted: the input is shifted by its max in place
# expect-fail: The input array is not modified
import numpy as np

def online_softmax_update(m, l, block):
    m_new = max(m, float(np.max(block)))
    if m_new == -np.inf:
        return m_new, l
    return m_new, l * np.exp(m - m_new) + float(np.exp(block - m_new).sum())

def online_softmax(x, block_size):
    x -= np.max(x, axis=-1, keepdims=True)
    e = np.exp(x)
    return e / e.sum(axis=-1, keepdims=True)

