# drill: flashattention/online-softmax
# variant: every row streamed at once (vectorised over rows), a while loop over the blocks
"""Online softmax with all rows updated together, one block of columns per step."""

import numpy as np

def online_softmax_update(m, l, block):
    block = np.asarray(block, dtype=np.float64)
    if block.size == 0:
        return m, l
    top = max(m, float(np.max(block)))
    if top == -np.inf:  # only -inf so far: the sum stays 0
        return top, l
    grown = np.exp(m - top)  # <= 1: the old sum moved onto the new max
    return top, l * grown + float(np.exp(block - top).sum())


def online_softmax(x, block_size):
    x = np.asarray(x, dtype=np.float64)
    flat = x.reshape(-1, x.shape[-1])
    count, n = flat.shape
    m = np.full(count, -np.inf)
    l = np.zeros(count)
    start = 0
    while start < n:
        tile = flat[:, start:start + block_size]
        top = np.maximum(m, tile.max(axis=1))
        finite = top > -np.inf
        safe = np.where(finite, top, 0.0)
        with np.errstate(invalid="ignore"):
            l = np.where(finite, l * np.exp(m - safe)
                         + np.exp(tile - safe[:, None]).sum(axis=1), 0.0)
        m = top
        start += block_size
    with np.errstate(invalid="ignore", divide="ignore"):
        p = np.exp(flat - m[:, None]) / l[:, None]
    return p.reshape(x.shape)
