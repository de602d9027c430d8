# drill: flashattention/online-softmax
# planted: the loop stops before the last, shorter block
# expect-fail: Rows of many lengths
import numpy as np

def online_softmax_update(m, l, block):
    m_new = max(m, float(np.max(block)))
    if m_new == -np.inf:
        return m_new, l
    return m_new, l * np.exp(m - m_new) + float(np.exp(block - m_new).sum())

def online_softmax(x, block_size):
    x = np.asarray(x, dtype=np.float64)
    rows = np.atleast_2d(x)
    n = rows.shape[1]
    full = max(block_size, (n // block_size) * block_size)
    m = np.full(rows.shape[0], -np.inf)
    l = np.zeros(rows.shape[0])
    for start in range(0, full, block_size):
        for r in range(rows.shape[0]):
            m[r], l[r] = online_softmax_update(m[r], l[r], rows[r, start:start + block_size])
    return (np.exp(rows - m[:, None]) / l[:, None]).reshape(x.shape)

