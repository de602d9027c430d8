# drill: flashattention/mla-decode
# variant: no absorption; each block's per-head keys and values are built from its latent rows ([H, b, d] only)
"""Honest variant: the up-projections are applied block by block on the cache side.

Each block of latent rows is turned into that block's per-head keys [H, b, d_nope] and
values [H, b, d_v]; the weighted sum runs in the value space. Nothing of size S per head
is ever held, so it is right and within the memory limit, only slower than absorbing.
"""

import math

import numpy as np


def mla_decode(q_nope, q_rope, c_kv, k_rope, W_uk, W_uv, seq_len, block=256, scale=None):
    H, d_nope = q_nope.shape
    d_rope = q_rope.shape[1]
    scale = 1.0 / math.sqrt(d_nope + d_rope) if scale is None else scale
    m = np.full(H, -np.inf)
    l = np.zeros(H)
    acc = np.zeros((H, W_uv.shape[2]))
    for start in range(0, seq_len, block):
        stop = min(start + block, seq_len)
        c = c_kv[start:stop]
        keys = np.einsum("tc,hcn->htn", c, W_uk)  # [H, b, d_nope], this block only
        values = np.einsum("tc,hcv->htv", c, W_uv)  # [H, b, d_v]
        s = (np.einsum("hn,htn->ht", q_nope, keys) + q_rope @ k_rope[start:stop].T) * scale
        m_new = np.maximum(m, s.max(axis=1))
        alpha = np.exp(m - m_new)
        p = np.exp(s - m_new[:, None])
        l = alpha * l + p.sum(axis=1)
        acc = alpha[:, None] * acc + np.einsum("ht,htv->hv", p, values)
        m = m_new
    return acc / l[:, None]
