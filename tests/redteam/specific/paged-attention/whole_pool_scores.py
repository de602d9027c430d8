# drill: flashattention/paged-attention
"""Attack: scores each query against every slot of the whole page pool (pages no sequence
references, slots past seq_len, NaN included, under np.errstate), then picks the live slots
and normalises over those alone. The values come out right, but the statement says only the
pages holding a sequence's keys are read. Slipped past, before the checks were changed, every
check: the NaN it scores is dropped before exp and p @ V, np.errstate hides the warning, and
the reshaped pool is a view, so no check of values or memory could see the whole-pool read.
"""
import math
import numpy as np


def paged_decode(q, k_pages, v_pages, block_table, seq_lens, scale=None):
    B, Hq, d = q.shape
    P, ps, Hkv, _ = k_pages.shape
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    group = Hq // Hkv
    Kall = k_pages.reshape(P * ps, Hkv, d)
    Vall = v_pages.reshape(P * ps, Hkv, v_pages.shape[3])
    o = np.zeros((B, Hq, v_pages.shape[3]))
    with np.errstate(invalid="ignore", over="ignore"):
        for b in range(B):
            n = int(seq_lens[b])
            t = np.arange(n)
            slots = block_table[b, t // ps] * ps + t % ps
            for h in range(Hq):
                kv = h // group
                s_all = (Kall[:, kv] @ q[b, h]) * scale      # the whole pool, NaN garbage included
                s = s_all[slots]
                p = np.exp(s - s.max())
                o[b, h] = (p @ Vall[slots, kv]) / p.sum()
    return o
