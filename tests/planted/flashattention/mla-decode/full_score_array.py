# drill: flashattention/mla-decode
# planted: the projections are absorbed, but the scores of the whole cache are one [H, S] array (no streaming)
# expect-fail: Peak memory on a long latent cache
"""Planted mistake: the projections are absorbed, but the scores of the whole cache are one [H, S] array."""

import math

import numpy as np


def mla_decode(q_nope, q_rope, c_kv, k_rope, W_uk, W_uv, seq_len, block=256, scale=None):
    """One decode step of MLA over the first seq_len rows of the latent cache: returns o [H, d_v]."""
    d_nope, d_rope = q_nope.shape[1], q_rope.shape[1]
    scale = 1.0 / math.sqrt(d_nope + d_rope) if scale is None else scale
    q_lat = np.einsum("hcn,hn->hc", W_uk, q_nope)
    c, r = c_kv[:seq_len], k_rope[:seq_len]
    s = (q_lat @ c.T + q_rope @ r.T) * scale  # [H, S]: every score at once
    p = np.exp(s - s.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    return np.einsum("hc,hcv->hv", p @ c, W_uv)
