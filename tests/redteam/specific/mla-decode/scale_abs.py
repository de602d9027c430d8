# drill: flashattention/mla-decode
"""Attack: the reference, but an explicit scale is replaced by its absolute value, so a negative
scale (weights that favour the lowest scores) acts as a positive one.

Slipped past, before the checks were changed: every scale the checks passed was 0.0 or positive
(0.37, 2.0, 0.0 and draws from 0.2 .. 0.5), where abs changes nothing. test_explicit_scale now
also passes scale = -0.6, and names the mistake.
"""

import math
import numpy as np


def mla_decode(q_nope, q_rope, c_kv, k_rope, W_uk, W_uv, seq_len, block=256, scale=None):
    H, d_nope = q_nope.shape
    scale = 1.0 / math.sqrt(d_nope + q_rope.shape[1]) if scale is None else scale
    scale = abs(scale)                # a negative scale is never tried
    q_lat = np.einsum("hcn,hn->hc", W_uk, q_nope)
    m = np.full(H, -np.inf); l = np.zeros(H); acc = np.zeros((H, c_kv.shape[1]))
    for a in range(0, seq_len, block):
        b = min(a + block, seq_len)
        c, r = c_kv[a:b], k_rope[a:b]
        s = (q_lat @ c.T + q_rope @ r.T) * scale
        m_new = np.maximum(m, s.max(axis=1))
        alpha = np.exp(m - m_new)
        p = np.exp(s - m_new[:, None])
        l = alpha * l + p.sum(axis=1)
        acc = alpha[:, None] * acc + p @ c
        m = m_new
    return np.einsum("hc,hcv->hv", acc / l[:, None], W_uv)
