# drill: flashattention/paged-attention
"""Attack: query head h reads KV head h >> (group - 1).bit_length() (KV head 0 when Hkv = 1),
a division by the group rounded up to a power of two: right for groups of 1, 2, 4 and 8, wrong
for a group of 3 (Hq = 6, Hkv = 2: head 3 reads KV head 0, not 1). Slipped past, before the
checks were changed, every check because the GQA groups tried were 2, 4 and 8, and the only
other group (6) had Hkv = 1, where every head reads KV head 0 anyway. Now test_gqa_groups also
tries (Hq, Hkv) = (6, 2) and (15, 5), groups of 3, and (4, 4), MHA.
"""
import math
import numpy as np


def paged_decode(q, k_pages, v_pages, block_table, seq_lens, scale=None):
    B, Hq, d = q.shape
    ps, Hkv = k_pages.shape[1], k_pages.shape[2]
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    shift = (Hq // Hkv - 1).bit_length()
    o = np.zeros((B, Hq, v_pages.shape[3]))
    for b in range(B):
        n = int(seq_lens[b])
        pages = block_table[b, : -(-n // ps)]
        K = k_pages[pages].reshape(-1, Hkv, d)[:n]
        V = v_pages[pages].reshape(-1, Hkv, v_pages.shape[3])[:n]
        for h in range(Hq):
            kv = 0 if Hkv == 1 else h >> shift
            s = (K[:, kv] @ q[b, h]) * scale
            p = np.exp(s - s.max())
            o[b, h] = (p @ V[:, kv]) / p.sum()
    return o
