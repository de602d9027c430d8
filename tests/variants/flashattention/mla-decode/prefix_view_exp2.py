# drill: flashattention/mla-decode
# variant: the live prefix sliced once up front, base-2 exponentials, W_uv applied per head in a loop
"""Honest variant: c_kv[:seq_len] sliced once, exp2 with log2(e)-scaled scores, per-head W_uv loop."""

import math

import numpy as np

LOG2E = 1.0 / math.log(2.0)


def mla_decode(q_nope, q_rope, c_kv, k_rope, W_uk, W_uv, seq_len, block=256, scale=None):
    H, d_nope = q_nope.shape
    d_rope = q_rope.shape[1]
    scale = 1.0 / math.sqrt(d_nope + d_rope) if scale is None else scale
    cache, rope = c_kv[:seq_len], k_rope[:seq_len]  # views: nothing copied
    q_lat = np.stack([W_uk[h] @ q_nope[h] for h in range(H)]) * (scale * LOG2E)
    q_r = q_rope * (scale * LOG2E)
    m = np.full(H, -np.inf)
    l = np.zeros(H)
    acc = np.zeros((H, c_kv.shape[1]))
    for start in range(0, seq_len, block):
        c, r = cache[start:start + block], rope[start:start + block]
        s2 = q_lat @ c.T + q_r @ r.T  # scores in base 2
        m_new = np.maximum(m, s2.max(axis=1))
        alpha = np.exp2(m - m_new)
        p = np.exp2(s2 - m_new[:, None])
        l = alpha * l + p.sum(axis=1)
        acc = alpha[:, None] * acc + p @ c
        m = m_new
    lat = acc / l[:, None]
    return np.stack([lat[h] @ W_uv[h] for h in range(H)])
