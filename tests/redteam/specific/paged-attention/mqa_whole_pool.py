# drill: flashattention/paged-attention
"""Attack: for MQA (Hkv = 1) it scores every query head against every slot of the whole pool
in one matmul (k_pages.reshape(-1, d)), NaN garbage and unreferenced pages included, and then
picks each sequence's live slots; for Hkv > 1 it gathers page by page like the reference. The
values are right, but the statement allows reading only the pages that hold keys. Slipped
past, before the checks were changed, every check: only test_reads_only_referenced_pages
watched the reads, and it made one call, with Hkv = 2. Now every call hands over pools that
record their reads, and test_reads_only_referenced_pages (observed) runs an MQA configuration
of its own and also fails any access, in the calls of the checks before it, whose first or
last page no sequence holds.
"""
import math
import numpy as np


def paged_decode(q, k_pages, v_pages, block_table, seq_lens, scale=None):
    B, Hq, d = q.shape
    P, ps, Hkv, _ = k_pages.shape
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    group = Hq // Hkv
    o = np.zeros((B, Hq, v_pages.shape[3]))
    if Hkv == 1:
        Kall = k_pages.reshape(P * ps, d)
        Vall = v_pages.reshape(P * ps, v_pages.shape[3])
        with np.errstate(invalid="ignore", over="ignore"):
            S = (Kall @ q.reshape(B * Hq, d).T).T.reshape(B, Hq, P * ps) * scale
            for b in range(B):
                n = int(seq_lens[b])
                t = np.arange(n)
                slots = block_table[b, t // ps] * ps + t % ps
                s = S[b][:, slots]
                p = np.exp(s - s.max(axis=1, keepdims=True))
                o[b] = (p @ Vall[slots]) / p.sum(axis=1, keepdims=True)
        return o
    for b in range(B):
        n = int(seq_lens[b])
        pages = block_table[b, : -(-n // ps)]
        K = k_pages[pages].reshape(-1, Hkv, d)[:n]
        V = v_pages[pages].reshape(-1, Hkv, v_pages.shape[3])[:n]
        for h in range(Hq):
            s = (K[:, h // group] @ q[b, h]) * scale
            p = np.exp(s - s.max())
            o[b, h] = (p @ V[:, h // group]) / p.sum()
    return o
