# drill: flashattention/online-softmax
# planted: a 2-D input shares one running max across all rows (block.max() without an axis)
# expect-fail: Rows at wildly different scales each keep their own running max and sum
import numpy as np


def online_softmax_update(m, l, block):
    block = np.asarray(block, dtype=np.float64)
    m_new = max(m, float(block.max())) if block.size else m
    if m_new == -np.inf:
        return m, l
    return m_new, l * np.exp(m - m_new) + float(np.exp(block - m_new).sum())


def online_softmax(x, block_size):
    x = np.asarray(x, dtype=np.float64)
    rows = np.atleast_2d(x)
    m, l = -np.inf, np.zeros(rows.shape[0])
    for start in range(0, rows.shape[-1], block_size):
        block = rows[:, start:start + block_size]
        m_new = max(m, float(block.max()))  # one max for every row: the mistake
        if m_new == -np.inf:
            continue
        l = l * np.exp(m - m_new) + np.exp(block - m_new).sum(axis=1)
        m = m_new
    with np.errstate(invalid="ignore", divide="ignore"):
        p = np.exp(rows - m) / l[:, None]
    return p.reshape(x.shape)
