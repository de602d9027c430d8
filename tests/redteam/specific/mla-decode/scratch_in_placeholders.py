# drill: flashattention/mla-decode
"""Attack: a loop over heads (each head walks the whole cache, the mistake the read check names)
hidden behind a local copy of the cache, kept where it costs no memory. Every call of 13 is
watched, and a watched float input's own memory holds placeholders, which the memory check counts
as the grader's, not the code's. The file copies c_kv and k_rope block by block (each row read
once, in blocks) into that placeholder memory (c_kv.view(np.ndarray)), then runs one plain
softmax per head over the copy: H passes over the cache that no log sees, and a copy of the live
cache that no measurement counts.

Slipped past test_reads_cache_once (one read of each row) and test_memory (the copy lies in memory
subtracted as the watching's own). Caught now: the placeholders are read-only memory that cannot be
made writable, so writing into them raises.
"""

import math

import numpy as np


def mla_decode(q_nope, q_rope, c_kv, k_rope, W_uk, W_uv, seq_len, block=256, scale=None):
    H, d_nope = q_nope.shape
    scale = 1.0 / math.sqrt(d_nope + q_rope.shape[1]) if scale is None else scale
    c_buf, r_buf = c_kv.view(np.ndarray), k_rope.view(np.ndarray)  # the placeholders' own memory
    for a in range(0, seq_len, block):
        b = min(a + block, seq_len)
        np.copyto(c_buf[a:b], c_kv[a:b])
        np.copyto(r_buf[a:b], k_rope[a:b])
    c, r = c_buf[:seq_len], r_buf[:seq_len]
    o = np.zeros((H, W_uv.shape[2]))
    for h in range(H):  # a pass over the whole cache per head
        s = (c @ (W_uk[h] @ q_nope[h]) + r @ q_rope[h]) * scale
        p = np.exp(s - s.max())
        o[h] = ((p @ c) / p.sum()) @ W_uv[h]
    return o
