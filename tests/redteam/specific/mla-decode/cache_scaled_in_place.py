# drill: flashattention/mla-decode
"""Attack: the reference, except that the scale of the RoPE part is folded into the cache itself,
block by block, in place (r = k_rope[a:b]; r *= scale). o is right, but the caller's cache, read
again at every later decode step, now holds scaled rows (all zeros after a call with scale 0).

Slipped past test_inputs_untouched, which compared q_nope, q_rope, W_uk and W_uv only: c_kv and
k_rope are recording arrays in every call, and the arguments sent back after the call held their
placeholders, not their values. The subject now sends back a recorded input's values, and the
check compares all six inputs.
"""

import math

import numpy as np


def mla_decode(q_nope, q_rope, c_kv, k_rope, W_uk, W_uv, seq_len, block=256, scale=None):
    H, d_nope = q_nope.shape
    scale = 1.0 / math.sqrt(d_nope + q_rope.shape[1]) if scale is None else scale
    q_lat = np.einsum("hcn,hn->hc", W_uk, q_nope)
    m = np.full(H, -np.inf); l = np.zeros(H); acc = np.zeros((H, c_kv.shape[1]))
    for a in range(0, seq_len, block):
        b = min(a + block, seq_len)
        c, r = c_kv[a:b], k_rope[a:b]
        r *= scale                        # written into the caller's cache
        s = q_lat @ c.T * scale + q_rope @ r.T
        m_new = np.maximum(m, s.max(axis=1))
        alpha = np.exp(m - m_new)
        p = np.exp(s - m_new[:, None])
        l = alpha * l + p.sum(axis=1)
        acc = alpha[:, None] * acc + p @ c
        m = m_new
    return np.einsum("hc,hcv->hv", acc / l[:, None], W_uv)
