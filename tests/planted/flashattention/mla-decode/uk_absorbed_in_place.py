# drill: flashattention/mla-decode
# planted: the absorbed query is built in the caller's W_uk (W_uk *= q_nope[:, None, :]), changing the weights
# expect-fail: q_nope, q_rope, the cache (c_kv, k_rope), W_uk and W_uv are not modified
"""Planted mistake: W_uk is multiplied by the query in place to absorb it, changing the model's weights."""
import math

import numpy as np


def mla_decode(q_nope, q_rope, c_kv, k_rope, W_uk, W_uv, seq_len, block=256, scale=None):
    """One decode step of MLA over the first seq_len rows of the latent cache: returns o [H, d_v]."""
    H, d_nope = q_nope.shape
    d_rope = q_rope.shape[1]
    d_c = c_kv.shape[1]
    scale = 1.0 / math.sqrt(d_nope + d_rope) if scale is None else scale
    # Absorb W_uk into the query: q_nope[h] · (c W_uk[h]) = (W_uk[h] q_nope[h]) · c.
    W_uk *= q_nope[:, None, :]  # in place: the weights now hold the product
    q_lat = W_uk.sum(axis=2)  # [H, d_c]
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
