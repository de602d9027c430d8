# drill: flashattention/mla-decode
"""Attack: the `block` argument is ignored. The cache is walked in chunks of max(block, 2048) rows,
so every cache the value checks use (700 rows at most) is one chunk: one plain softmax over an
[H, seq_len] score array, no online softmax at all. Each chunk is copied once (c_kv[a:b].copy():
one logged use) and the copy used as often as needed. Values are right; on the long cache the
[H, 2048] tiles stay under the memory limit (16.7 MiB of 20).

Slipped past, before the checks were changed: only test_reads_cache_once watched reads, and it
bounded the rows read, never the rows read at once, so one copied read of 150 rows with
block = 32 passed. Every call is watched now, and a read of more than `block` rows of c_kv or
k_rope fails (test_small is the first to see it).
"""

import math
import numpy as np


def mla_decode(q_nope, q_rope, c_kv, k_rope, W_uk, W_uv, seq_len, block=256, scale=None):
    H, d_nope = q_nope.shape
    scale = 1.0 / math.sqrt(d_nope + q_rope.shape[1]) if scale is None else scale
    block = max(block, 2048)          # the block argument is ignored: small caches go in one piece
    q_lat = np.einsum("hcn,hn->hc", W_uk, q_nope)
    m = np.full(H, -np.inf); l = np.zeros(H); acc = np.zeros((H, c_kv.shape[1]))
    for a in range(0, seq_len, block):
        b = min(a + block, seq_len)
        c, r = c_kv[a:b].copy(), k_rope[a:b].copy()   # one logged use each
        s = (q_lat @ c.T + q_rope @ r.T) * scale
        m_new = np.maximum(m, s.max(axis=1))
        alpha = np.exp(m - m_new)
        p = np.exp(s - m_new[:, None])
        l = alpha * l + p.sum(axis=1)
        acc = alpha[:, None] * acc + p @ c
        m = m_new
    return np.einsum("hc,hcv->hv", acc / l[:, None], W_uv)
