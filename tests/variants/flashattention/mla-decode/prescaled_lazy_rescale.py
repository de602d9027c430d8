# drill: flashattention/mla-decode
# variant: scale folded into the latent and RoPE queries once, in-place updates of the accumulator (np.exp(out=), *=, +=), lazy rescaling (the max only moves when a block's max exceeds it by more than 8), matmul/tensordot
"""MLA decode with prescaled queries and FA-3 style lazy rescaling."""

import math

import numpy as np

THRESHOLD = 8.0  # exp(8) ~ 3e3: no overflow risk, far fewer rescales


def mla_decode(q_nope, q_rope, c_kv, k_rope, W_uk, W_uv, seq_len, block=256, scale=None):
    H, d_nope = q_nope.shape
    if scale is None:
        scale = (d_nope + q_rope.shape[1]) ** -0.5
    q_lat = np.matmul(W_uk, q_nope[:, :, None])[:, :, 0] * scale   # [H, d_c], scale absorbed too
    q_r = q_rope * scale
    m = np.full(H, -np.inf)
    l = np.zeros(H)
    acc = np.zeros((H, c_kv.shape[1]))
    for lo in range(0, seq_len, block):
        c = c_kv[lo:min(lo + block, seq_len)]
        r = k_rope[lo:min(lo + block, seq_len)]
        s = np.tensordot(q_lat, c, axes=([1], [1]))
        s += np.tensordot(q_r, r, axes=([1], [1]))
        bm = s.max(axis=1)
        grow = bm > m + THRESHOLD
        if grow.any():
            m_new = np.where(grow, bm, m)
            alpha = np.exp(m - m_new)       # 1 where the max stays; 0 on the first block
            l *= alpha
            acc *= alpha[:, None]
            m = m_new
        s -= m[:, None]
        np.exp(s, out=s)
        l += s.sum(axis=1)
        acc += s @ c
    acc /= l[:, None]
    return np.einsum("hc,hcv->hv", acc, W_uv)
