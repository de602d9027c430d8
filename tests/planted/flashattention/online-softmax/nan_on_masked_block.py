# drill: flashattention/online-softmax
# planted: no guard for a block of only -inf: exp(-inf - (-inf)) is NaN
# expect-fail: Blocks of ±1e4 and of -inf
# expect-fail: -inf logits get probability 0
import numpy as np

def online_softmax_update(m, l, block):
    m_new = max(m, float(np.max(block)))
    with np.errstate(invalid='ignore'):
        return m_new, l * np.exp(m - m_new) + float(np.exp(block - m_new).sum())

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

