# drill: flashattention/mla-decode
# variant: W_uk absorbed into the query but W_uv not: each block's values are rebuilt for all heads ([H, b, d_v]) and summed into a [H, d_v] accumulator
"""Half-absorbed MLA: the scores use the latent query, the values are up-projected per head and per
block, so the running accumulator lives in the value space [H, d_v] instead of [H, d_c]."""
import math

import numpy as np


def mla_decode(q_nope, q_rope, c_kv, k_rope, W_uk, W_uv, seq_len, block=256, scale=None):
    H, d_nope = q_nope.shape
    d_v = W_uv.shape[2]
    if scale is None:
        scale = 1.0 / math.sqrt(d_nope + q_rope.shape[1])
    q_lat = np.stack([W_uk[h] @ q_nope[h] for h in range(H)])  # [H, d_c]
    m = np.full(H, -np.inf)
    l = np.zeros(H)
    acc = np.zeros((H, d_v))
    for lo in range(0, seq_len, block):
        hi = min(lo + block, seq_len)
        c, r = c_kv[lo:hi], k_rope[lo:hi]
        s = scale * (q_lat @ c.T) + scale * (q_rope @ r.T)  # [H, b]
        m_new = np.maximum(m, s.max(axis=1))
        alpha = np.exp(m - m_new)
        p = np.exp(s - m_new[:, None])
        l = l * alpha + p.sum(axis=1)
        v = np.einsum("tc,hcv->htv", c, W_uv)  # this block's values, every head: [H, b, d_v]
        acc = acc * alpha[:, None] + np.einsum("ht,htv->hv", p, v)
        m = m_new
    return acc / l[:, None]
