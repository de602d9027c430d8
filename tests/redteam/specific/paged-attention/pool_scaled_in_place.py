# drill: flashattention/paged-attention
"""Attack: the reference, except that the scale is folded into the shared pool itself: every
page some sequence holds is multiplied by scale in place, once (k_pages[pages] *= scale), so the
scores need no multiply. o is right, but the pool is the KV cache every later decode step reads
(shared prefix pages included), and it now holds scaled keys; q is scaled in place too.

Slipped past every check: none looked at the inputs after a call, and the statement did not say
they must stay as they were (k_pages and v_pages are recording arrays in every call, whose memory
holds placeholders). The statement now says so, and test_inputs_untouched compares all five
inputs, the pools by the values the subject sends back.
"""

import math

import numpy as np


def paged_decode(q, k_pages, v_pages, block_table, seq_lens, scale=None):
    B, Hq, d = q.shape
    page_size, Hkv = k_pages.shape[1], k_pages.shape[2]
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    group = Hq // Hkv
    held = [block_table[b, : -(-int(seq_lens[b]) // page_size)] for b in range(B)]
    pages = np.unique(np.concatenate(held))
    k_pages[pages] *= math.sqrt(abs(scale))  # written into the caller's pool
    q *= math.copysign(math.sqrt(abs(scale)), scale)  # and into the caller's queries
    o = np.zeros((B, Hq, v_pages.shape[3]))
    for b in range(B):
        n = int(seq_lens[b])
        K = k_pages[held[b]].reshape(-1, Hkv, d)[:n]
        V = v_pages[held[b]].reshape(-1, Hkv, v_pages.shape[3])[:n]
        for h in range(Hq):
            s = K[:, h // group] @ q[b, h]
            p = np.exp(s - s.max())
            o[b, h] = (p @ V[:, h // group]) / p.sum()
    return o
