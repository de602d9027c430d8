# drill: flashattention/paged-attention
"""Attack: takes one slice of the pool, k_pages[lo:hi], from the smallest physical page any
sequence references to the largest, scores every slot of that slab (unreferenced pages and
NaN garbage included, under np.errstate) and keeps each sequence's live slots. The values are
right, but the pages between the live ones are read. Slipped past, before the checks were
changed, test_reads_only_referenced_pages: it judged an access by its first and last page, and
both ends of the slab are live; its own pools kept every referenced page in one run between
spare pages, so the slab was exactly the allowed span. Now it also runs pools where referenced
and unreferenced pages alternate, and check_no_slabs fails an access that took a run of
consecutive pages with an unreferenced one inside.
"""
import math
import numpy as np


def paged_decode(q, k_pages, v_pages, block_table, seq_lens, scale=None):
    B, Hq, d = q.shape
    ps, Hkv = k_pages.shape[1], k_pages.shape[2]
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    group = Hq // Hkv
    counts = [-(-int(n) // ps) for n in seq_lens]
    live = np.concatenate([np.asarray(block_table[b, :c]) for b, c in enumerate(counts)])
    lo, hi = int(live.min()), int(live.max()) + 1
    K = k_pages[lo:hi].reshape(-1, Hkv, d)               # the slab, unreferenced pages included
    V = v_pages[lo:hi].reshape(-1, Hkv, v_pages.shape[3])
    o = np.zeros((B, Hq, v_pages.shape[3]))
    with np.errstate(invalid="ignore", over="ignore"):
        for b in range(B):
            n = int(seq_lens[b])
            t = np.arange(n)
            slots = (block_table[b, t // ps] - lo) * ps + t % ps
            for h in range(Hq):
                kv = h // group
                s = (K[:, kv] @ q[b, h] * scale)[slots]
                p = np.exp(s - s.max())
                o[b, h] = p @ V[slots, kv] / p.sum()
    return o
