# drill: flashattention/mla-decode
"""Attack: with more than 32 heads, each head streams the whole cache on its own (the absorbed
online softmax run once per head), so the cache is read H times; with 32 heads or fewer, the
reference. Values are right and memory stays small.

Slipped past, before the checks were changed: test_reads_cache_once drew H from 2 .. 32, and the
only call with more heads (test_memory, H = 128) measured memory, which a per-head stream does not
raise. Every call is watched now, the memory calls included, so test_memory counts 128 reads of
each row.
"""

import math
import numpy as np


def _stream(q_lat, q_rope, c_kv, k_rope, seq_len, block, scale):
    H = q_lat.shape[0]
    m = np.full(H, -np.inf); l = np.zeros(H); acc = np.zeros((H, c_kv.shape[1]))
    for a in range(0, seq_len, block):
        b = min(a + block, seq_len)
        c = c_kv[a:b]
        s = (q_lat @ c.T + q_rope @ k_rope[a:b].T) * scale
        m_new = np.maximum(m, s.max(axis=1))
        alpha = np.exp(m - m_new)
        p = np.exp(s - m_new[:, None])
        l = alpha * l + p.sum(axis=1)
        acc = alpha[:, None] * acc + p @ c
        m = m_new
    return acc / l[:, None]


def mla_decode(q_nope, q_rope, c_kv, k_rope, W_uk, W_uv, seq_len, block=256, scale=None):
    H, d_nope = q_nope.shape
    scale = 1.0 / math.sqrt(d_nope + q_rope.shape[1]) if scale is None else scale
    q_lat = np.einsum("hcn,hn->hc", W_uk, q_nope)
    if H <= 32:   # the most heads the read check draws
        lat = _stream(q_lat, q_rope, c_kv, k_rope, seq_len, block, scale)
    else:         # one head at a time: the cache is read H times
        lat = np.concatenate([_stream(q_lat[h:h+1], q_rope[h:h+1], c_kv, k_rope, seq_len, block, scale) for h in range(H)])
    return np.einsum("hc,hcv->hv", lat, W_uv)
