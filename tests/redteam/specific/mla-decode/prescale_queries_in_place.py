# drill: flashattention/mla-decode
"""Attack: the reference, except that the scale is folded into the caller's queries in place
(q_nope *= scale, q_rope *= scale), so the scores need no multiply. Values are exact, but the
caller's query now holds scaled numbers (a negative scale even flips its sign).
Slipped past, before the checks were changed: every call passed fresh copies of the inputs and no
check looked at them after the call. test_inputs_untouched now compares q_nope, q_rope, W_uk and
W_uv with what was passed, after watched calls under the default and a given scale.
"""

import math

import numpy as np


def mla_decode(q_nope, q_rope, c_kv, k_rope, W_uk, W_uv, seq_len, block=256, scale=None):
    H, d_nope = q_nope.shape
    scale = 1.0 / math.sqrt(d_nope + q_rope.shape[1]) if scale is None else scale
    q_nope *= scale                       # written into the caller's arrays
    q_rope *= scale
    q_lat = np.einsum("hcn,hn->hc", W_uk, q_nope)
    m = np.full(H, -np.inf); l = np.zeros(H); acc = np.zeros((H, c_kv.shape[1]))
    for a in range(0, seq_len, block):
        b = min(a + block, seq_len)
        c, r = c_kv[a:b], k_rope[a:b]
        s = q_lat @ c.T + q_rope @ r.T
        m_new = np.maximum(m, s.max(axis=1))
        alpha = np.exp(m - m_new)
        p = np.exp(s - m_new[:, None])
        l = alpha * l + p.sum(axis=1)
        acc = alpha[:, None] * acc + p @ c
        m = m_new
    return np.einsum("hc,hcv->hv", acc / l[:, None], W_uv)
