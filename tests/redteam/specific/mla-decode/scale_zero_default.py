# drill: flashattention/mla-decode
"""Attack: `scale = scale or default`, so an explicit scale=0.0 (every score 0, uniform weights)
falls back to 1/sqrt(d_nope + d_rope); o is off by up to 0.89 there. Otherwise the reference.

Slipped past, before the checks were changed: test_explicit_scale tried only the nonzero
scales 0.37 and 2.0, for which `or` keeps the given value; no check passed scale=0.0.
"""

import math

import numpy as np


def mla_decode(q_nope, q_rope, c_kv, k_rope, W_uk, W_uv, seq_len, block=256, scale=None):
    """One decode step of MLA over the first seq_len rows of the latent cache: returns o [H, d_v]."""
    H, d_nope = q_nope.shape
    d_rope = q_rope.shape[1]
    d_c = c_kv.shape[1]
    scale = scale or 1.0 / math.sqrt(d_nope + d_rope)  # scale=0.0 falls back to the default
    # Absorb W_uk into the query: q_nope[h] · (c W_uk[h]) = (W_uk[h] q_nope[h]) · c.
    q_lat = np.einsum("hcn,hn->hc", W_uk, q_nope)  # [H, d_c]
    m = np.full(H, -np.inf)
    l = np.zeros(H)
    acc = np.zeros((H, d_c))  # unnormalised weighted sum of latent rows, per head
    for start in range(0, seq_len, block):
        stop = min(start + block, seq_len)  # rows at or past seq_len are never touched
        c = c_kv[start:stop]  # [b, d_c]
        r = k_rope[start:stop]  # [b, d_rope], one RoPE key shared by every head
        s = (q_lat @ c.T + q_rope @ r.T) * scale  # [H, b]
        m_new = np.maximum(m, s.max(axis=1))
        alpha = np.exp(m - m_new)  # 0 on the first block (m = -inf, m_new finite)
        p = np.exp(s - m_new[:, None])
        l = alpha * l + p.sum(axis=1)
        acc = alpha[:, None] * acc + p @ c
        m = m_new
    # Normalise in the latent space, then up-project with each head's own W_uv.
    return np.einsum("hc,hcv->hv", acc / l[:, None], W_uv)
