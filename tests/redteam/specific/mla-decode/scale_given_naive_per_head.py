# drill: flashattention/mla-decode
"""Attack: with an explicit scale, naive MLA: every head's keys and values [H, seq_len, d]
built from the live cache and an [H, seq_len] score array, which the statement forbids (and
which reads the cache once per head). With scale=None, the streamed reference. Values are right.

Slipped past, before the checks were changed: test_memory and test_reads_cache_once, the
only checks that look at memory or reads, called with scale=None only, so they never ran the
naive branch; the value checks with a scale accept it (its values are right).
"""

import math

import numpy as np


def mla_decode(q_nope, q_rope, c_kv, k_rope, W_uk, W_uv, seq_len, block=256, scale=None):
    """One decode step of MLA over the first seq_len rows of the latent cache: returns o [H, d_v]."""
    H, d_nope = q_nope.shape
    d_rope = q_rope.shape[1]
    d_c = c_kv.shape[1]
    given = scale
    scale = 1.0 / math.sqrt(d_nope + d_rope) if scale is None else scale
    if given is not None:
        c, r = c_kv[:seq_len], k_rope[:seq_len]
        Kh = np.einsum("tc,hcn->htn", c, W_uk)  # per-head keys [H, n, d_nope]
        Vh = np.einsum("tc,hcv->htv", c, W_uv)  # per-head values [H, n, d_v]
        s = (np.einsum("hn,htn->ht", q_nope, Kh) + q_rope @ r.T) * scale  # [H, n]
        p = np.exp(s - s.max(axis=1, keepdims=True))
        p /= p.sum(axis=1, keepdims=True)
        return np.einsum("ht,htv->hv", p, Vh)
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
