# drill: flashattention/block-mask
"""Attack: takes each document id to be one contiguous run of keys: a row of document g sees the
keys from g's first to its last position in kv_doc (then the causal bound and window), so kinds
and tile masks come from one interval per row. Wrong when one id labels two separate runs of
keys (kv_doc = [5]*8 + [-2]*8 + [5]*8 + ...: rows of 5 would see the keys of -2).

Slipped past, before the checks were changed: every check packed documents with distinct ids
(test_kinds_any_document_ids shuffles the labels but keeps one run per id).
"""

import math

import numpy as np


def _doc_ranges(kv_doc):
    """{id: (first position, one past the last)} from the runs of kv_doc."""
    starts = np.concatenate([[0], np.flatnonzero(kv_doc[1:] != kv_doc[:-1]) + 1])
    ends = np.concatenate([starts[1:], [len(kv_doc)]])
    ranges = {}
    for a, b in zip(starts.tolist(), ends.tolist()):
        g = int(kv_doc[a])
        lo, hi = ranges.get(g, (a, b))
        ranges[g] = (min(lo, a), max(hi, b))
    return ranges


def _intervals(q_doc, kv_doc, window, causal, rows, ranges=None):
    """[lo, hi) of the keys each row sees, assuming every document is one run of kv_doc."""
    sq, sk = len(q_doc), len(kv_doc)
    ranges = _doc_ranges(kv_doc) if ranges is None else ranges
    pairs = np.array([ranges.get(int(g), (0, 0)) for g in q_doc[rows]], dtype=np.int64).reshape(-1, 2)
    lo, hi = pairs[:, 0], pairs[:, 1]
    if causal or window is not None:
        ip = rows + sk - sq
        hi = np.minimum(hi, ip + 1)
        if window is not None:
            lo = np.maximum(lo, ip - window + 1)
    return lo, np.maximum(hi, lo)


def _tile_visible(lo, hi, c0, c1):
    cols = np.arange(c0, c1)
    return (cols[None, :] >= lo[:, None]) & (cols[None, :] < hi[:, None])


def block_kinds(q_doc, kv_doc, window, causal, Br, Bc):
    sq, sk = len(q_doc), len(kv_doc)
    Tr, Tc = -(-sq // Br), -(-sk // Bc)
    kinds = np.zeros((Tr, Tc), dtype=np.int64)
    ranges = _doc_ranges(kv_doc)
    for i in range(Tr):
        lo, hi = _intervals(q_doc, kv_doc, window, causal, np.arange(i * Br, min((i + 1) * Br, sq)), ranges)
        for j in range(Tc):
            c0, c1 = j * Bc, min((j + 1) * Bc, sk)
            a, b = np.maximum(lo, c0), np.minimum(hi, c1)
            if (b > a).any():
                kinds[i, j] = 2 if ((lo <= c0) & (hi >= c1)).all() else 1
    return kinds


def masked_flash_forward(Q, K, V, q_doc, kv_doc, window=None, causal=False, Br=16, Bc=16, scale=None):
    sq, d = Q.shape
    sk = K.shape[0]
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    kinds = block_kinds(q_doc, kv_doc, window, causal, Br, Bc)
    O = np.zeros((sq, V.shape[1]))
    L = np.full(sq, -np.inf)
    ranges = _doc_ranges(kv_doc)
    for i in range(kinds.shape[0]):
        r0, r1 = i * Br, min((i + 1) * Br, sq)
        lo, hi = _intervals(q_doc, kv_doc, window, causal, np.arange(r0, r1), ranges)
        q = Q[r0:r1]
        m = np.full(r1 - r0, -np.inf)
        l = np.zeros(r1 - r0)
        acc = np.zeros((r1 - r0, V.shape[1]))
        for j in np.flatnonzero(kinds[i]):
            c0, c1 = j * Bc, min((j + 1) * Bc, sk)
            s = (q @ K[c0:c1].T) * scale
            if kinds[i, j] == 1:
                s = np.where(_tile_visible(lo, hi, c0, c1), s, -np.inf)
            m_new = np.maximum(m, s.max(axis=1))
            shift = np.where(m_new == -np.inf, 0.0, m_new)
            alpha = np.exp(m - shift)
            p = np.exp(s - shift[:, None])
            l = alpha * l + p.sum(axis=1)
            acc = alpha[:, None] * acc + p @ V[c0:c1]
            m = m_new
        seen = l > 0
        l_safe = np.where(seen, l, 1.0)
        O[r0:r1] = acc / l_safe[:, None]
        L[r0:r1] = np.where(seen, np.where(seen, m, 0.0) + np.log(l_safe), -np.inf)
    return O, L
