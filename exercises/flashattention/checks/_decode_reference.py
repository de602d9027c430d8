"""Float64 references for the split-KV decoding checks, with switchable mistakes.

Not collected by pytest (leading underscore). The references build full score rows on
purpose: they are the yardstick, not an answer to copy.
"""

from __future__ import annotations

import numpy as np

from ._attention_reference import default_scale, masked_attention, visible


def chunk_bounds(sk: int, num_splits: int, rule: str = "ceil") -> list[tuple[int, int]]:
    """(start, stop) of each chunk. rule="ceil" is the contract; the others are mistakes.

    "floor": chunks of sk // num_splits keys, the last one taking the rest;
    "floor-drop": chunks of sk // num_splits keys, the rest never read.
    """
    if rule == "ceil":
        size = -(-sk // num_splits)
        return [(min(c * size, sk), min((c + 1) * size, sk)) for c in range(num_splits)]
    size = max(sk // num_splits, 1)
    bounds = [(min(c * size, sk), min((c + 1) * size, sk)) for c in range(num_splits)]
    if rule == "floor":
        bounds[-1] = (bounds[-1][0], sk)
    return bounds


def partials(q, K, V, num_splits, causal=False, scale=None, *, rule="ceil", normalise="own",
             align="bottom-right"):
    """(O_parts, L_parts) of each chunk.

    normalise="own" is the contract; "global" divides every chunk by the global sum and
    reports the global logsumexp (a slice of the full softmax, the classic mistake).
    """
    sq, sk = q.shape[0], K.shape[0]
    s = default_scale(q.shape[1], scale)
    mask = visible(sq, sk, causal, align)
    O_full, L_full = masked_attention(q, K, V, s, mask)
    O_parts = np.zeros((num_splits, sq, V.shape[1]))
    L_parts = np.full((num_splits, sq), -np.inf)
    for c, (a, b) in enumerate(chunk_bounds(sk, num_splits, rule)):
        if a >= b:
            continue
        if normalise == "global":
            S = np.where(mask[:, a:b], (q @ K[a:b].T) * s, -np.inf)
            Lg = np.where(L_full == -np.inf, np.inf, L_full)
            O_parts[c] = np.exp(S - Lg[:, None]) @ V[a:b]
            L_parts[c] = L_full
        else:
            O_parts[c], L_parts[c] = masked_attention(q, K[a:b], V[a:b], s, mask[:, a:b])
    return O_parts, L_parts


def merge(O_parts, L_parts, how="lse"):
    """Merge partials by logsumexp (the contract) or by a mistaken rule: "mean", "sum", "max-lse"."""
    with np.errstate(all="ignore"):
        m = L_parts.max(axis=0)
        shift = np.where(m == -np.inf, 0.0, m)
        w = np.exp(L_parts - shift)
        total = w.sum(axis=0)
        seen = total > 0
        safe = np.where(seen, total, 1.0)
        O = (w[:, :, None] * O_parts).sum(axis=0) / safe[:, None]
        L = np.where(seen, shift + np.log(safe), -np.inf)
        if how == "mean":
            return O_parts.mean(axis=0), L
        if how == "sum":
            return O_parts.sum(axis=0), L
        if how == "max-lse":
            return O, m
        if how == "unnormalised":
            return (w[:, :, None] * O_parts).sum(axis=0), L
        if how == "stale":  # a pairwise fold that never updates the running L
            o, run = O_parts[0], L_parts[0]
            for O_c, L_c in zip(O_parts[1:], L_parts[1:]):
                mm = np.maximum(run, L_c)
                sh = np.where(mm == -np.inf, 0.0, mm)
                w1, w2 = np.exp(run - sh), np.exp(L_c - sh)
                tot = np.where(w1 + w2 > 0, w1 + w2, 1.0)
                o = (w1[:, None] * o + w2[:, None] * O_c) / tot[:, None]
            return o, L
    return O, L
