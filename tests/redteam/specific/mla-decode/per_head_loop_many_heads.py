# drill: flashattention/mla-decode
"""Attack: with 8 or more heads, each head streams the whole cache on its own (one
single-head reference call per head), so the cache is read H times; with fewer heads the
reference. Values are right and memory stays small.

Slipped past, before the checks were changed: test_reads_cache_once, the only check that
counts reads, used H = 6 alone; the memory checks cannot see re-reads.
"""

import math

import numpy as np


def mla_decode(q_nope, q_rope, c_kv, k_rope, W_uk, W_uv, seq_len, block=256, scale=None):
    """One decode step of MLA over the first seq_len rows of the latent cache: returns o [H, d_v]."""
    H, d_nope = q_nope.shape
    d_rope = q_rope.shape[1]
    d_c = c_kv.shape[1]
    scale = 1.0 / math.sqrt(d_nope + d_rope) if scale is None else scale
    if H >= 8:
        return np.concatenate([_one(q_nope[h:h + 1], q_rope[h:h + 1], c_kv, k_rope, W_uk[h:h + 1], W_uv[h:h + 1],
                                    seq_len, block, scale) for h in range(H)])
    return _one(q_nope, q_rope, c_kv, k_rope, W_uk, W_uv, seq_len, block, scale)


def _one(q_nope, q_rope, c_kv, k_rope, W_uk, W_uv, seq_len, block, scale):
    H = q_nope.shape[0]
    d_c = c_kv.shape[1]
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
