# drill: flashattention/paged-attention
# variant: split-K over pages: each page gives per-head partial (max, sum, acc) memoised by physical page for shared prefixes, merged with a log-sum-exp
"""PagedAttention decode as flash-decoding over pages, with a per-call cache of page tensors."""

import numpy as np


def _page_partial(qg, Kp, Vp, scale):
    # qg [Hkv, group, d], Kp [rows, Hkv, d] -> per-head max, sum, unnormalised output
    s = np.einsum("hgd,thd->hgt", qg, Kp) * scale
    m = s.max(axis=-1)
    p = np.exp(s - m[..., None])
    return m, p.sum(axis=-1), np.einsum("hgt,thv->hgv", p, Vp)


def paged_decode(q, k_pages, v_pages, block_table, seq_lens, scale=None):
    B, Hq, d = q.shape
    ps, Hkv = k_pages.shape[1], k_pages.shape[2]
    dv = v_pages.shape[-1]
    scale = d ** -0.5 if scale is None else float(scale)
    g = Hq // Hkv
    loaded = {}  # (physical page, rows) -> (K, V), shared prefix pages are loaded once

    def load(p, rows):
        key = (p, rows)
        if key not in loaded:
            loaded[key] = (k_pages[p, :rows], v_pages[p, :rows])
        return loaded[key]

    out = np.zeros((B, Hq, dv))
    for b in range(B):
        n = int(seq_lens[b])
        qg = q[b].reshape(Hkv, g, d)
        ms, ls, accs = [], [], []
        for lp in range((n + ps - 1) // ps):
            rows = min(ps, n - lp * ps)
            Kp, Vp = load(int(block_table[b, lp]), rows)
            m, l, a = _page_partial(qg, Kp, Vp, scale)
            ms.append(m); ls.append(l); accs.append(a)
        M = np.max(ms, axis=0)
        w = np.exp(np.array(ms) - M)                 # [pages, Hkv, g]
        total = (w * np.array(ls)).sum(axis=0)
        acc = (w[..., None] * np.array(accs)).sum(axis=0)
        out[b] = (acc / total[..., None]).reshape(Hq, dv)
    return out
