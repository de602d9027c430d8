# drill: flashattention/paged-attention
"""Attack: when the pool's first and last pages both belong to some sequence, it reshapes the
whole pool (k_pages.reshape(-1, Hkv, d)), scores every slot (unreferenced pages and NaN
garbage included, under np.errstate) and keeps each sequence's live slots; otherwise it gathers
page by page like the reference. Slipped past, before the checks were changed, every check: the
calls of the value checks were judged only by the first and last page of each access, both live
here, and the pools of test_reads_only_referenced_pages always had unreferenced pages at both
ends, so it never read the whole pool there. Now that check also runs a pool whose first and
last pages are live with an unreferenced page between every two live ones, and check_no_slabs
fails the whole-pool read.
"""
import math
import numpy as np


def paged_decode(q, k_pages, v_pages, block_table, seq_lens, scale=None):
    B, Hq, d = q.shape
    P, ps, Hkv, _ = k_pages.shape
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    group = Hq // Hkv
    counts = [-(-int(n) // ps) for n in seq_lens]
    live = {int(p) for b, c in enumerate(counts) for p in block_table[b, :c]}
    o = np.zeros((B, Hq, v_pages.shape[3]))
    if 0 in live and P - 1 in live:
        K = k_pages.reshape(-1, Hkv, d)
        V = v_pages.reshape(-1, Hkv, v_pages.shape[3])
        with np.errstate(invalid="ignore", over="ignore"):
            for b in range(B):
                n = int(seq_lens[b])
                t = np.arange(n)
                slots = block_table[b, t // ps] * ps + t % ps
                for h in range(Hq):
                    s = (K[:, h // group] @ q[b, h] * scale)[slots]
                    p = np.exp(s - s.max())
                    o[b, h] = p @ V[slots, h // group] / p.sum()
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
