# drill: flashattention/mla-decode
# planted: one head at a time, each head walking the whole cache (the cache is read H times)
# expect-fail: The latent cache is read once
"""Planted mistake: one head at a time, each head walking the whole cache (the cache is read H times)."""

import math

import numpy as np


def mla_decode(q_nope, q_rope, c_kv, k_rope, W_uk, W_uv, seq_len, block=256, scale=None):
    """One decode step of MLA over the first seq_len rows of the latent cache: returns o [H, d_v]."""
    H, d_nope = q_nope.shape
    d_rope = q_rope.shape[1]
    scale = 1.0 / math.sqrt(d_nope + d_rope) if scale is None else scale
    o = np.zeros((H, W_uv.shape[2]))
    for h in range(H):
        q_lat = W_uk[h] @ q_nope[h]  # [d_c]
        s = (c_kv[:seq_len] @ q_lat + k_rope[:seq_len] @ q_rope[h]) * scale  # [S] for this head
        p = np.exp(s - s.max())
        o[h] = (p @ c_kv[:seq_len]) / p.sum() @ W_uv[h]
    return o
