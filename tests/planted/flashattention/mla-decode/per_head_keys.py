# drill: flashattention/mla-decode
# planted: naive MLA: every head's keys and values [H, S, d] are built from the latent cache
# expect-fail: Peak memory on a long latent cache
"""Planted mistake: naive MLA, every head's keys and values [H, S, d] built from the latent cache."""

import math

import numpy as np


def mla_decode(q_nope, q_rope, c_kv, k_rope, W_uk, W_uv, seq_len, block=256, scale=None):
    """One decode step of MLA over the first seq_len rows of the latent cache: returns o [H, d_v]."""
    H, d_nope = q_nope.shape
    d_rope = q_rope.shape[1]
    scale = 1.0 / math.sqrt(d_nope + d_rope) if scale is None else scale
    c, r = c_kv[:seq_len], k_rope[:seq_len]
    K = np.einsum("tc,hcn->htn", c, W_uk)  # [H, S, d_nope]
    V = np.einsum("tc,hcv->htv", c, W_uv)  # [H, S, d_v]
    m = np.full(H, -np.inf)
    l = np.zeros(H)
    acc = np.zeros((H, V.shape[2]))
    for start in range(0, seq_len, block):  # streamed, but over keys that were all built up front
        stop = min(start + block, seq_len)
        s = (np.einsum("hn,htn->ht", q_nope, K[:, start:stop]) + q_rope @ r[start:stop].T) * scale
        m_new = np.maximum(m, s.max(axis=1))
        alpha = np.exp(m - m_new)
        p = np.exp(s - m_new[:, None])
        l = alpha * l + p.sum(axis=1)
        acc = alpha[:, None] * acc + np.einsum("ht,htv->hv", p, V[:, start:stop])
        m = m_new
    return acc / l[:, None]
