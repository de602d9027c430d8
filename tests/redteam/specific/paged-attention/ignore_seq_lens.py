# drill: flashattention/paged-attention
"""Attack: seq_lens is never read. Each sequence takes every page its block-table row names
(entries >= 0), every slot of them, and keeps the slots that "look live": finite, not all
zero, and no bigger than 1e5 in magnitude.

Fakes: cutting the gathered keys to exactly seq_lens[b] rows. Slipped past, before the checks were changed, every check because
the dead slots only ever hold recognisable poison: NaN (most checks), 0.0
(test_one_sequence: poison=0.0) or the 1e6 SENTINEL (test_unused_slots_hold_finite_sentinels).
Live keys are N(0, 1) draws, never exactly 0 nor 1e5. The finite garbage that would expose it
(_paged_reference.probe: N(0, 3) draws) is used only to name mistakes, never to grade.
"""
import math

import numpy as np


def paged_decode(q, k_pages, v_pages, block_table, seq_lens, scale=None):
    B, Hq, d = q.shape
    Hkv = k_pages.shape[2]
    group = Hq // Hkv
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    o = np.zeros((B, Hq, v_pages.shape[3]))
    for b in range(B):
        row = block_table[b]
        pages = row[row >= 0]                                  # every mapped page, seq_lens unused
        K = k_pages[pages].reshape(-1, Hkv, d)
        V = v_pages[pages].reshape(-1, Hkv, v_pages.shape[3])
        with np.errstate(invalid="ignore"):
            live = (np.isfinite(K).all(axis=(1, 2)) & np.isfinite(V).all(axis=(1, 2))
                    & (np.abs(np.nan_to_num(K)).max(axis=(1, 2)) < 1e5)
                    & (np.abs(np.nan_to_num(V)).max(axis=(1, 2)) < 1e5)
                    & (np.abs(np.nan_to_num(K)).max(axis=(1, 2)) > 0))
        K, V = K[live], V[live]
        for h in range(Hq):
            s = K[:, h // group] @ q[b, h] * scale
            p = np.exp(s - s.max())
            o[b, h] = p @ V[:, h // group] / p.sum()
    return o
