# drill: flashattention/online-softmax
# variant: lazy rescaling (FlashAttention-4 style): l stays on a stale reference max until the max grows by more than 8
"""Online softmax that rescales the running sum only when the max has moved far (a threshold of 8 nats).

Until then l is kept relative to an older reference max r <= m, so every term exp(x - r) stays <= e^8.
The update function still returns the exact (m, l) the contract asks for."""

import math

import numpy as np

THRESHOLD = 8.0


def online_softmax_update(m, l, block):
    block = np.asarray(block, dtype=np.float64)
    m_new = max(m, float(np.max(block))) if block.size else m
    if m_new == -math.inf:
        return m_new, l
    return m_new, l * math.exp(m - m_new) + float(np.sum(np.exp(block - m_new)))


def online_softmax(x, block_size):
    x = np.asarray(x, dtype=np.float64)
    rows = x.reshape(-1, x.shape[-1])
    out = np.empty_like(rows)
    for r in range(rows.shape[0]):
        ref, l = -math.inf, 0.0  # l = sum of exp(x - ref) so far
        for start in range(0, rows.shape[1], block_size):
            block = rows[r, start:start + block_size]
            top = float(block.max())
            if top == -math.inf:
                continue  # an all -inf block adds nothing
            if top > ref + THRESHOLD:  # only now move l onto a new reference
                l = l * math.exp(ref - top) if ref > -math.inf else 0.0
                ref = top
            l += float(np.exp(block - ref).sum())
        with np.errstate(invalid="ignore", divide="ignore"):
            out[r] = np.exp(rows[r] - ref) / l
    return out.reshape(x.shape)
