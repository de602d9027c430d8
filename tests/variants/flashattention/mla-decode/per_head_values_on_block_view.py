# drill: flashattention/mla-decode
# variant: each block's values made head by head from the block's own view, c @ W_uv[h], inside the stream
"""The block of the latent cache is kept as the slice it is (no copy) and used once per head to make
that head's values, so a long cache is used tens of thousands of times. Every use is recorded; the
record once cost this file megabytes of "its" memory after the call, and the drawn long cache failed."""
import math

import numpy as np


def mla_decode(q_nope, q_rope, c_kv, k_rope, W_uk, W_uv, seq_len, block=256, scale=None):
    H, d_nope = q_nope.shape
    if scale is None:
        scale = 1.0 / math.sqrt(d_nope + q_rope.shape[1])
    q_lat = np.stack([W_uk[h] @ q_nope[h] for h in range(H)])
    m = np.full(H, -np.inf)
    l = np.zeros(H)
    acc = np.zeros((H, W_uv.shape[2]))
    for lo in range(0, seq_len, block):
        hi = min(lo + block, seq_len)
        c, r = c_kv[lo:hi], k_rope[lo:hi]
        s = scale * (q_lat @ c.T) + scale * (q_rope @ r.T)
        m_new = np.maximum(m, s.max(axis=1))
        alpha = np.exp(m - m_new)
        p = np.exp(s - m_new[:, None])
        l = l * alpha + p.sum(axis=1)
        for h in range(H):
            acc[h] = acc[h] * alpha[h] + p[h] @ (c @ W_uv[h])
        m = m_new
    return acc / l[:, None]
