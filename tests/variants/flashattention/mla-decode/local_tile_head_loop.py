# drill: flashattention/mla-decode
# variant: each block loaded once into a local .copy() (like SRAM), then an explicit Python loop over heads with scalar running max/sum; absorbed query built per head with W_uk[h] @ q_nope[h]
"""MLA decode: one load per block, heads handled one by one on the loaded tile."""

import math

import numpy as np


def mla_decode(q_nope, q_rope, c_kv, k_rope, W_uk, W_uv, seq_len, block=256, scale=None):
    H = q_nope.shape[0]
    d_c = c_kv.shape[1]
    if scale is None:
        scale = 1.0 / math.sqrt(q_nope.shape[1] + q_rope.shape[1])
    q_lat = [W_uk[h] @ q_nope[h] for h in range(H)]
    m = [-math.inf] * H
    l = [0.0] * H
    acc = [np.zeros(d_c) for _ in range(H)]
    lo = 0
    while lo < seq_len:
        hi = min(lo + block, seq_len)
        c = c_kv[lo:hi].copy()      # the block's single load, shared by all heads
        r = k_rope[lo:hi].copy()
        for h in range(H):
            s = (c @ q_lat[h] + r @ q_rope[h]) * scale
            m_new = max(m[h], float(s.max()))
            alpha = math.exp(m[h] - m_new)
            p = np.exp(s - m_new)
            l[h] = l[h] * alpha + p.sum()
            acc[h] = acc[h] * alpha + p @ c
            m[h] = m_new
        lo = hi
    return np.stack([(acc[h] / l[h]) @ W_uv[h] for h in range(H)])
