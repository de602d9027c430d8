# drill: flashattention/online-softmax
# variant: every row at once with -inf-safe np.where, block sums as a matmul with a ones vector, exp2 for the final normalisation
"""Online softmax vectorised over rows: per block, one max per row and a row sum by `tile @ ones`."""

import math

import numpy as np

LOG2E = math.log2(math.e)


def online_softmax_update(m, l, block):
    block = np.asarray(block, dtype=np.float64)
    m_new = np.maximum(m, block.max(initial=-np.inf))
    if np.isneginf(m_new):
        return float(m_new), float(l)
    scale = np.exp(m - m_new)
    return float(m_new), float(l * scale + np.exp(block - m_new) @ np.ones(block.shape[0]))


def online_softmax(x, block_size):
    x = np.asarray(x, dtype=np.float64)
    rows = x.reshape(-1, x.shape[-1])
    m = np.full(rows.shape[0], -np.inf)
    l = np.zeros(rows.shape[0])
    for lo in range(0, rows.shape[1], block_size):
        tile = rows[:, lo:lo + block_size]
        m_new = np.maximum(m, tile.max(axis=1))
        live = ~np.isneginf(m_new)  # rows with something finite so far
        shift = np.where(live, m_new, 0.0)[:, None]
        with np.errstate(invalid="ignore"):
            alpha = np.where(live, np.exp(m - np.where(live, m_new, 0.0)), 0.0)
            terms = np.where(np.isneginf(tile), 0.0, np.exp(tile - shift))
        l = l * alpha + terms @ np.ones(tile.shape[1])
        m = m_new
    with np.errstate(invalid="ignore", divide="ignore"):
        p = np.exp2((rows - m[:, None]) * LOG2E) / l[:, None]
    return p.reshape(x.shape)
