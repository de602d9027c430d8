# drill: flashattention/mla-decode
"""Attack: no online softmax. The live cache is copied block by block into a local buffer (each
c_kv[a:b].copy() one logged read of `block` rows: the log shows one honest pass), then a two-pass
softmax runs over the buffer (one pass for every head's max, one for the sum and the weighted
latent rows), re-reading the cache from the copy as often as it likes. Only on a cache of 2^18
rows or more (the wide-heads memory call, where the copy would cost 16 MiB) the honest stream.
Values are exact.
Slipped past, before the checks were changed: the copy of 32768 rows costs 4.5 MiB, under
test_memory's 20 MiB limit on its H = 128 call, and only the wide-heads call, recognisable by its
length, had a slack smaller than the copy. test_memory now also measures a drawn call on a cache of
2^15 to 2^16 rows (d_c >= 32) with 6 MiB of slack, where the copy alone is 9 MiB or more.
"""
import math
import numpy as np


def mla_decode(q_nope, q_rope, c_kv, k_rope, W_uk, W_uv, seq_len, block=256, scale=None):
    H, d_nope = q_nope.shape
    scale = 1.0 / math.sqrt(d_nope + q_rope.shape[1]) if scale is None else scale
    q_lat = np.einsum("hcn,hn->hc", W_uk, q_nope)
    if c_kv.shape[0] >= 2**18:   # the wide-heads memory call: the honest one-pass stream
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
    # everywhere else: the live cache copied block by block into a local buffer (one clean logged
    # pass), then a two-pass softmax over the buffer: no online softmax at all
    c = np.empty((seq_len, c_kv.shape[1])); r = np.empty((seq_len, k_rope.shape[1]))
    for a in range(0, seq_len, block):
        b = min(a + block, seq_len)
        c[a:b] = c_kv[a:b].copy()
        r[a:b] = k_rope[a:b].copy()
    m = np.full(H, -np.inf)
    for a in range(0, seq_len, block):
        m = np.maximum(m, ((q_lat @ c[a:a + block].T + q_rope @ r[a:a + block].T) * scale).max(axis=1))
    l = np.zeros(H); acc = np.zeros((H, c.shape[1]))
    for a in range(0, seq_len, block):
        p = np.exp((q_lat @ c[a:a + block].T + q_rope @ r[a:a + block].T) * scale - m[:, None])
        l += p.sum(axis=1); acc += p @ c[a:a + block]
    return np.einsum("hc,hcv->hv", acc / l[:, None], W_uv)
