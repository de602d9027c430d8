# drill: flashattention/flash-decoding
"""Attack: split_kv_partials is right, but flash_decode cuts the cache on its own with chunks of
sk // num_splits + 1 keys (an off-by-one ceil) and merges those. The merge is exact whatever the
chunking, so the values are right; the chunks are not the contract's when num_splits divides sk.

Slipped past, before the checks were changed, test_reads_a_chunk_at_a_time: it watched sk = 91
with num_splits = 5 only, where 91 // 5 + 1 = 19 = ceil(91 / 5), so every read sat inside a
contract chunk. Now a watched call at sk = 95 (chunks of 19, against this code's 20) is added.
"""

import math

import numpy as np


def split_kv_partials(q, K, V, num_splits, causal=False, scale=None):
    """Each chunk's own (O, L): returns O_parts [num_splits, sq, d], L_parts [num_splits, sq]."""
    sq, d = q.shape
    sk = K.shape[0]
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    chunk = -(-sk // num_splits)  # ceil: every chunk but the last is full
    O_parts = np.zeros((num_splits, sq, V.shape[1]))
    L_parts = np.full((num_splits, sq), -np.inf)
    rows = np.arange(sq)[:, None]
    for c in range(num_splits):
        start, stop = c * chunk, min((c + 1) * chunk, sk)
        if start >= stop:
            continue  # an empty chunk keeps O = 0, L = -inf
        S = (q @ K[start:stop].T) * scale  # [sq, chunk]
        if causal:
            keys = np.arange(start, stop)[None, :]
            S = np.where(keys <= rows + (sk - sq), S, -np.inf)
        # This chunk's own max: a GPU block only ever sees its own keys.
        m = S.max(axis=1)
        seen = m > -np.inf
        m_safe = np.where(seen, m, 0.0)  # no -inf - (-inf) on rows that see nothing here
        P = np.exp(S - m_safe[:, None])  # [sq, chunk], masked entries give 0
        l = P.sum(axis=1)
        l_safe = np.where(seen, l, 1.0)
        O_parts[c] = (P @ V[start:stop]) / l_safe[:, None]
        L_parts[c] = np.where(seen, m_safe + np.log(l_safe), -np.inf)
    return O_parts, L_parts


def flash_decode(q, K, V, num_splits, causal=False, scale=None):
    """Its own split (chunk = sk // num_splits + 1), each chunk's (O, L), merged at once."""
    sq, d = q.shape
    sk = K.shape[0]
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    chunk = sk // num_splits + 1  # "ceil": off by one when num_splits divides sk
    Os, Ls = [], []
    rows = np.arange(sq)[:, None]
    for c in range(num_splits):
        start, stop = c * chunk, min((c + 1) * chunk, sk)
        if start >= stop:
            continue
        S = (q @ K[start:stop].T) * scale
        if causal:
            S = np.where(np.arange(start, stop)[None, :] <= rows + (sk - sq), S, -np.inf)
        m = S.max(axis=1)
        seen = m > -np.inf
        m_safe = np.where(seen, m, 0.0)
        P = np.exp(S - m_safe[:, None])
        l = np.where(seen, P.sum(axis=1), 1.0)
        Os.append((P @ V[start:stop]) / l[:, None])
        Ls.append(np.where(seen, m_safe + np.log(l), -np.inf))
    O_parts, L_parts = np.array(Os), np.array(Ls)
    m = L_parts.max(axis=0)
    shift = np.where(m > -np.inf, m, 0.0)
    w = np.exp(L_parts - shift)
    total = w.sum(axis=0)
    seen = total > 0
    total_safe = np.where(seen, total, 1.0)
    o = (w[:, :, None] * O_parts).sum(axis=0) / total_safe[:, None]
    return o, np.where(seen, shift + np.log(total_safe), -np.inf)
