# drill: flashattention/mla-decode
# variant: FA1-style normalised running output (o kept divided by l at every step), rope and latent scores with einsum, block bounds from np.arange, the up-projection through one batched matmul
"""MLA decode keeping a normalised running latent output, as FlashAttention-1 does."""

import numpy as np


def mla_decode(q_nope, q_rope, c_kv, k_rope, W_uk, W_uv, seq_len, block=256, scale=None):
    H, d_nope = q_nope.shape
    d_rope = q_rope.shape[1]
    scale = 1 / np.sqrt(d_nope + d_rope) if scale is None else scale
    q_lat = np.einsum("hn,hcn->hc", q_nope, W_uk)
    m = np.full(H, -np.inf)
    l = np.zeros(H)
    o_lat = np.zeros((H, c_kv.shape[1]))     # always normalised: sum_t p_t c_t / l
    for lo in np.arange(0, seq_len, block):
        hi = min(int(lo) + block, seq_len)
        c, r = c_kv[int(lo):hi], k_rope[int(lo):hi]
        s = scale * (np.einsum("hc,tc->ht", q_lat, c) + np.einsum("hr,tr->ht", q_rope, r))
        mb = s.max(axis=1)
        pb = np.exp(s - mb[:, None])
        lb = pb.sum(axis=1)
        m_new = np.maximum(m, mb)
        a_old = l * np.exp(m - m_new)
        a_new = lb * np.exp(mb - m_new)
        l_new = a_old + a_new
        o_lat = (a_old[:, None] * o_lat + np.exp(mb - m_new)[:, None] * (pb @ c)) / l_new[:, None]
        m, l = m_new, l_new
    return (o_lat[:, None, :] @ W_uv)[:, 0, :]
