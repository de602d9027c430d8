"""Dense masks, block kinds and masked attention in float64, for the block-mask checks.

Not collected by pytest (leading underscore). The dense [sq, sk] mask is the yardstick the
exercise must never build; the switches model the mistakes a learner makes, so a failure
can be named.
"""

from __future__ import annotations

import numpy as np

from ._attention_reference import default_scale, masked_attention


def dense_mask(q_doc, kv_doc, window=None, causal=False, *, align="bottom-right", window_slack=0,
               two_sided=False, docs=True) -> np.ndarray:
    """[sq, sk] bool: may query i see key j?

    The contract: same document, and with causal or a window, 0 <= i' - j (< window), i' = i + sk - sq.
    align="top-left" uses i' = i; window_slack=1 lets i' - j == window through; two_sided applies
    the window as |i' - j| < window without the causal bound; docs=False ignores the documents.
    """
    q_doc, kv_doc = np.asarray(q_doc), np.asarray(kv_doc)
    sq, sk = len(q_doc), len(kv_doc)
    visible = (q_doc[:, None] == kv_doc[None, :]) if docs else np.ones((sq, sk), dtype=bool)
    if causal or window is not None:
        offset = sk - sq if align == "bottom-right" else 0
        lag = (np.arange(sq)[:, None] + offset) - np.arange(sk)[None, :]
        if not (two_sided and window is not None):
            visible &= lag >= 0
        if window is not None:
            visible &= (np.abs(lag) if two_sided else lag) < window + window_slack
    return visible


def kinds_of(mask: np.ndarray, Br: int, Bc: int, *, padded=False) -> np.ndarray:
    """[Tr, Tc] int: 0 empty, 1 partial, 2 full, tile by tile. padded=True counts the pairs a ragged
    last tile lacks as invisible (a learner who pads tiles to Br×Bc)."""
    sq, sk = mask.shape
    Tr, Tc = -(-sq // Br), -(-sk // Bc)
    kinds = np.zeros((Tr, Tc), dtype=np.int64)
    for i in range(Tr):
        for j in range(Tc):
            tile = mask[i * Br:(i + 1) * Br, j * Bc:(j + 1) * Bc]
            full = tile.all() and (not padded or tile.shape == (Br, Bc))
            kinds[i, j] = 2 if full else 1 if tile.any() else 0
    return kinds


def attention(Q, K, V, mask, scale=None):
    """(O, L) under an explicit mask; rows that see no key give O = 0, L = -inf."""
    return masked_attention(Q, K, V, default_scale(Q.shape[1], scale), mask)


def tile_mask(mask, kinds, Br, Bc, *, partial_as=1, full_as=2) -> np.ndarray:
    """The mask a tiled loop effectively applies if it treats partial tiles as `partial_as` and
    full tiles as `full_as` (0: skipped, 1: masked, 2: used unmasked)."""
    out = np.zeros_like(mask)
    for i in range(kinds.shape[0]):
        for j in range(kinds.shape[1]):
            rows, cols = slice(i * Br, (i + 1) * Br), slice(j * Bc, (j + 1) * Bc)
            kind = {0: 0, 1: partial_as, 2: full_as}[int(kinds[i, j])]
            out[rows, cols] = mask[rows, cols] if kind == 1 else (kind == 2)
    return out


def packed(lengths, *, rng=None, shuffle_ids=False) -> np.ndarray:
    """Document ids of a packed sequence: document k repeated lengths[k] times."""
    ids = np.arange(len(lengths))
    if shuffle_ids and rng is not None:
        # ids need not be 0, 1, 2, ... nor sorted: random labels, in falling order so that code
        # assuming sorted ids fails on every run (a random permutation is sometimes sorted)
        ids = np.sort(rng.choice(1000, size=len(lengths), replace=False))[::-1] * 7 + 3
    return np.repeat(ids, lengths).astype(np.int64)
