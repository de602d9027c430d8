# drill: flashattention/mla-decode
# variant: a fast path when the live cache fits one block (a plain softmax over [H, seq_len]); otherwise the stream, with prescaled query copies and keyword calls into a helper
"""A whole-block softmax when seq_len <= block, the streamed loop otherwise; scale folded into query copies; W_uv applied head by head."""
import math

import numpy as np


def _scores(*, q_lat, q_rope, c, r):
    return q_lat @ c.T + q_rope @ r.T


def mla_decode(q_nope, q_rope, c_kv, k_rope, W_uk, W_uv, seq_len, block=256, scale=None):
    d_nope, d_rope = q_nope.shape[1], q_rope.shape[1]
    if scale is None:
        scale = (d_nope + d_rope) ** -0.5
    q_lat = np.einsum("hcn,hn->hc", W_uk, q_nope) * scale
    q_r = q_rope * scale  # a scaled copy, the caller's q_rope stays as it was
    if seq_len <= block:
        c = c_kv[:seq_len]
        s = _scores(q_lat=q_lat, q_rope=q_r, c=c, r=k_rope[:seq_len])
        p = np.exp(s - s.max(axis=1, keepdims=True))
        o_lat = (p @ c) / p.sum(axis=1, keepdims=True)
    else:
        H = q_nope.shape[0]
        m, l, acc = np.full(H, -np.inf), np.zeros(H), np.zeros((H, c_kv.shape[1]))
        for lo in range(0, seq_len, block):
            c = c_kv[lo:min(lo + block, seq_len)]
            s = _scores(q_lat=q_lat, q_rope=q_r, c=c, r=k_rope[lo:lo + len(c)])
            m_new = np.fmax(m, s.max(axis=1))
            alpha = np.exp(m - m_new)
            p = np.exp(s - m_new[:, None])
            l = alpha * l + p.sum(axis=1)
            acc = alpha[:, None] * acc + p @ c
            m = m_new
        o_lat = acc / l[:, None]
    return np.stack([o_lat[h] @ W_uv[h] for h in range(len(o_lat))])
