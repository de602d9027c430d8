# drill: flashattention/block-mask
# variant: kinds by a fast path (a tile whose rows and keys each carry one document id is judged from its corner lags alone, else a small tile mask); the forward normalises every tile on its own and merges it into (O, L) with np.logaddexp, FA1-style
"""Block-mask FlashAttention: corner rules where a tile holds one document, log-sum-exp merging of tiles."""

import math

import numpy as np


def _tile_visible(q_doc, kv_doc, window, causal, r0, r1, c0, c1):
    off = len(kv_doc) - len(q_doc)
    vis = q_doc[r0:r1][:, None] == kv_doc[c0:c1][None, :]
    if causal or window is not None:
        lag = (np.arange(r0, r1)[:, None] + off) - np.arange(c0, c1)[None, :]
        vis &= lag >= 0
        if window is not None:
            vis &= lag < window
    return vis


def _kind(q_doc, kv_doc, window, causal, r0, r1, c0, c1):
    qd, kd = q_doc[r0:r1], kv_doc[c0:c1]
    if (qd == qd[0]).all() and (kd == kd[0]).all():     # one document on each side
        if qd[0] != kd[0]:
            return 0
        if not causal and window is None:
            return 2
        off = len(kv_doc) - len(q_doc)
        lo, hi = r0 + off - (c1 - 1), (r1 - 1) + off - c0   # smallest and largest lag i' - j
        w = math.inf if window is None else window
        if max(lo, 0) > min(hi, w - 1):           # no lag of the tile in [0, window)
            return 0
        if lo >= 0 and hi <= w - 1:
            return 2
        return 1
    vis = _tile_visible(q_doc, kv_doc, window, causal, r0, r1, c0, c1)
    return 2 if vis.all() else int(vis.any())


def block_kinds(q_doc, kv_doc, window, causal, Br, Bc):
    sq, sk = len(q_doc), len(kv_doc)
    Tr, Tc = (sq + Br - 1) // Br, (sk + Bc - 1) // Bc
    out = np.zeros((Tr, Tc), dtype=np.int32)
    for i in range(Tr):
        for j in range(Tc):
            out[i, j] = _kind(q_doc, kv_doc, window, causal, i * Br, min(sq, i * Br + Br), j * Bc, min(sk, j * Bc + Bc))
    return out


def masked_flash_forward(Q, K, V, q_doc, kv_doc, window=None, causal=False, Br=16, Bc=16, scale=None):
    sq, d = Q.shape
    sk = K.shape[0]
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    kinds = block_kinds(q_doc, kv_doc, window, causal, Br, Bc)
    O = np.zeros((sq, V.shape[1]))
    L = np.full(sq, -np.inf)
    for i, row in enumerate(kinds):
        r0, r1 = i * Br, min(sq, i * Br + Br)
        q = Q[r0:r1]
        o, lse = O[r0:r1], L[r0:r1]                # views of our own outputs, updated in place
        for j in np.nonzero(row)[0]:
            c0, c1 = j * Bc, min(sk, j * Bc + Bc)
            s = np.einsum("id,jd->ij", q, K[c0:c1]) * scale
            if row[j] == 1:
                s = np.where(_tile_visible(q_doc, kv_doc, window, causal, r0, r1, c0, c1), s, -np.inf)
            mt = s.max(axis=1)
            live = mt > -np.inf
            if not live.any():
                continue
            p = np.exp(s[live] - mt[live, None])
            lt = p.sum(axis=1)
            lse_t = mt[live] + np.log(lt)
            new = np.logaddexp(lse[live], lse_t)
            w_old = np.exp(lse[live] - new)        # 0 where the row had seen nothing (lse = -inf)
            o[live] = o[live] * w_old[:, None] + (p @ V[c0:c1]) / lt[:, None] * np.exp(lse_t - new)[:, None]
            lse[live] = new
    return O, L
