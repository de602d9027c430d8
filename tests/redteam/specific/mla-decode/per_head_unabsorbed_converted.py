# drill: flashattention/mla-decode
"""Attack: no absorption, no streaming, no online softmax, and the cache converted with np.asarray
first so that none of its reads is logged (caught: every live row must be read through the array).

Fakes: the absorbed, streamed MLA decode. For every head it BUILDS that head's keys and
values k_h = c @ W_uk[h], v_h = c @ W_uv[h] over the whole cache ([S, d_nope], [S, d_v]) and
does a plain two-pass softmax over an [S] score row, i.e. exactly what the statement says
"never" to do, and it walks the whole cache once per head (H times).

Slipped past, before the checks were changed (tests/redteam/README.md says how):
  * test_reads_cache_once: the cache is sliced once, c_kv[:seq_len], and that slice is a
    plain ndarray, so the H further passes over it are never logged (the check only
    bounds rows read from above; it never asks how the rows were used afterwards);
  * test_memory: one head at a time holds [S, d_nope] + [S, d_v] + [S] floats, ~4.5 MiB at
    S = 32768, far below the 20 MiB limit that only an all-heads [H, S] array crosses.
"""
import math

import numpy as np


def mla_decode(q_nope, q_rope, c_kv, k_rope, W_uk, W_uv, seq_len, block=256, scale=None):
    H, d_nope = q_nope.shape
    d_rope = q_rope.shape[1]
    scale = 1.0 / math.sqrt(d_nope + d_rope) if scale is None else scale
    c = np.asarray(c_kv)[:seq_len]   # converted first: no read is logged at all
    r = np.asarray(k_rope)[:seq_len]
    o = np.empty((H, W_uv.shape[2]))
    for h in range(H):
        k_h = c @ W_uk[h]                      # [S, d_nope]: the per-head keys, built
        v_h = c @ W_uv[h]                      # [S, d_v]: the per-head values, built
        s = (k_h @ q_nope[h] + r @ q_rope[h]) * scale   # [S] scores over the whole cache
        p = np.exp(s - s.max())
        o[h] = (p @ v_h) / p.sum()
    return o
