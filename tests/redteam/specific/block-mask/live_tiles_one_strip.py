# drill: flashattention/block-mask
"""Attack: for each query block, the K and V blocks of its non-empty tiles are sliced one by
one (the read log looks like a block-skipping FA2 loop), concatenated, and a single dense masked
softmax runs over the [Br, live keys] strip: no online softmax, no per-tile scores, and full
tiles masked with the rest (by boolean assignment, on a strip wider than Bc the probe ignores).
Values are right.

Slipped past, before the checks were changed: test_forward_memory's strips are at most a
document wide (8.8 MiB with in-place exp, under 12 MiB); test_forward_memory_long_keys has a
window, so a strip is two tiles; the observed checks see clean block reads. Caught by
test_forward_memory_long_keys_all_live: 16 rows against 2^21 keys, nearly every tile full, where
a strip over the live keys is 256 MiB and the slack 8 MiB.
"""

import math

import numpy as np


def _mask(q_doc, kv_doc, window, causal, rows, cols, offset):
    visible = q_doc[rows][:, None] == kv_doc[cols][None, :]
    if causal or window is not None:
        lag = (rows[:, None] + offset) - cols[None, :]
        visible &= lag >= 0
        if window is not None:
            visible &= lag < window
    return visible


def block_kinds(q_doc, kv_doc, window, causal, Br, Bc):
    sq, sk = len(q_doc), len(kv_doc)
    Tr, Tc = -(-sq // Br), -(-sk // Bc)
    kinds = np.zeros((Tr, Tc), dtype=np.int64)
    for i in range(Tr):
        rows = np.arange(i * Br, min((i + 1) * Br, sq))
        for j in range(Tc):
            cols = np.arange(j * Bc, min((j + 1) * Bc, sk))
            v = _mask(q_doc, kv_doc, window, causal, rows, cols, sk - sq)
            kinds[i, j] = 2 if v.all() else 1 if v.any() else 0
    return kinds


def masked_flash_forward(Q, K, V, q_doc, kv_doc, window=None, causal=False, Br=16, Bc=16, scale=None):
    sq, d = Q.shape
    sk = K.shape[0]
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    kinds = block_kinds(q_doc, kv_doc, window, causal, Br, Bc)
    O = np.zeros((sq, V.shape[1]))
    L = np.full(sq, -np.inf)
    for i in range(kinds.shape[0]):
        r0, r1 = i * Br, min((i + 1) * Br, sq)
        live = np.flatnonzero(kinds[i])
        if live.size == 0:
            continue
        q = Q[r0:r1]
        ks, vs, cols = [], [], []
        for j in live:
            c0, c1 = j * Bc, min((j + 1) * Bc, sk)
            ks.append(K[c0:c1])
            vs.append(V[c0:c1])
            cols.append(np.arange(c0, c1))
        Ks, Vs, cols = np.concatenate(ks), np.concatenate(vs), np.concatenate(cols)
        s = q @ Ks.T
        s *= scale
        vis = _mask(q_doc, kv_doc, window, causal, np.arange(r0, r1), cols, sk - sq)
        s[~vis] = -np.inf
        m = s.max(axis=1)
        seen = m > -np.inf
        m0 = np.where(seen, m, 0.0)
        s -= m0[:, None]
        p = np.exp(s, out=s)
        del vis
        l = p.sum(axis=1)
        l_safe = np.where(seen, l, 1.0)
        O[r0:r1] = (p @ Vs) / l_safe[:, None]
        L[r0:r1] = np.where(seen, m0 + np.log(l_safe), -np.inf)
    return O, L
