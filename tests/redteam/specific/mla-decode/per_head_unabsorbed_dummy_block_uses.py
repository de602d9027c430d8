# drill: flashattention/mla-decode
"""Attack: no absorption, no streaming, no online softmax. A dummy loop first USES every block
of the live cache once (c_kv[a:b] * 1.0, k_rope[a:b] * 1.0: a ufunc on each recorded view logs
exactly rows a..b once), so the read log shows one clean block-by-block pass over rows
0 .. seq_len - 1. Then np.asarray(c_kv)[:seq_len] (a plain view: nothing more is logged) and,
head by head, the per-head keys and values k_h = c @ W_uk[h], v_h = c @ W_uv[h] are BUILT over the
whole cache with a plain two-pass softmax over an [S] score row: what the statement says never to do.

Slipped past, before the wide-heads memory case, test_reads_cache_once (every live row is seen once, in blocks, through the arrays; the
H further passes happen on an unlogged view) and test_memory (one head at a time: [S, d_nope] +
[S, d_v] + [S] ~ 4.5 MiB at S = 32768, under the 20 MiB limit). Values are exact.
"""
import math

import numpy as np


def mla_decode(q_nope, q_rope, c_kv, k_rope, W_uk, W_uv, seq_len, block=256, scale=None):
    H, d_nope = q_nope.shape
    d_rope = q_rope.shape[1]
    scale = 1.0 / math.sqrt(d_nope + d_rope) if scale is None else scale
    for a in range(0, seq_len, block):          # what the read log sees: one pass, block by block
        b = min(a + block, seq_len)
        c_kv[a:b] * 1.0
        k_rope[a:b] * 1.0
    c = np.asarray(c_kv)[:seq_len]
    r = np.asarray(k_rope)[:seq_len]
    o = np.empty((H, W_uv.shape[2]))
    for h in range(H):
        k_h = c @ W_uk[h]                       # per-head keys, built
        s = (k_h @ q_nope[h] + r @ q_rope[h]) * scale
        p = np.exp(s - s.max())
        o[h] = (p @ (c @ W_uv[h])) / p.sum()    # per-head values, built
    return o
