# drill: flashattention/online-softmax
# planted: the old l is not rescaled when the max grows
# expect-fail: The worked example
# expect-fail: Random rows streamed
# expect-fail: Rows of many lengths
import numpy as np

def online_softmax_update(m, l, block):
    m_new = max(m, float(np.max(block)))
    if m_new == -np.inf:
        return m_new, l
    return m_new, l + float(np.exp(block - m_new).sum())

def online_softmax(x, block_size):
    x = np.asarray(x, dtype=np.float64)
    rows = np.atleast_2d(x)
    m = np.full(rows.shape[0], -np.inf)
    l = np.zeros(rows.shape[0])
    for start in range(0, rows.shape[1], block_size):
        for r in range(rows.shape[0]):
            m[r], l[r] = online_softmax_update(m[r], l[r], rows[r, start:start + block_size])
    with np.errstate(invalid="ignore", divide="ignore"):
        return (np.exp(rows - m[:, None]) / l[:, None]).reshape(x.shape)

