# drill: flashattention/mla-decode
# variant: each block's latent rows read in column chunks of 64 (scores and accumulator built chunk by chunk, as a kernel tiles d_c); batched matmul for the final up-projection
"""The latent dimension d_c is walked in 64-column chunks for both the scores and the accumulator, re-slicing each block's rows per chunk."""
import math

import numpy as np

CHUNK = 64


def mla_decode(q_nope, q_rope, c_kv, k_rope, W_uk, W_uv, seq_len, block=256, scale=None):
    H = q_nope.shape[0]
    d_c = c_kv.shape[1]
    scale = 1.0 / math.sqrt(q_nope.shape[1] + q_rope.shape[1]) if scale is None else scale
    q_lat = np.matmul(W_uk, q_nope[:, :, None])[:, :, 0]  # [H, d_c]
    m = np.full(H, -np.inf)
    l = np.zeros(H)
    acc = np.zeros((H, d_c))
    for lo in range(0, seq_len, block):
        hi = min(lo + block, seq_len)
        s = np.einsum("hr,tr->ht", q_rope, k_rope[lo:hi])
        for a in range(0, d_c, CHUNK):
            s += q_lat[:, a:a + CHUNK] @ c_kv[lo:hi, a:a + CHUNK].T
        s *= scale
        m_new = np.maximum(m, s.max(axis=1))
        alpha = np.exp(m - m_new)
        p = np.exp(s - m_new[:, None])
        l = alpha * l + p.sum(axis=1)
        acc *= alpha[:, None]
        for a in range(0, d_c, CHUNK):
            acc[:, a:a + CHUNK] += p @ c_kv[lo:hi, a:a + CHUNK]
        m = m_new
    o_lat = acc / l[:, None]
    return np.matmul(o_lat[:, None, :], W_uv)[:, 0, :]
