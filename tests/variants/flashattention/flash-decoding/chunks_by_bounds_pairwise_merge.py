# drill: flashattention/flash-decoding
# variant: chunk bounds listed first, causal mask as a key limit per row, partials merged two at a time
"""Split-KV decoding: each chunk's keys limited per query row, then a pairwise LSE merge."""

import numpy as np


def split_kv_partials(q, K, V, num_splits, causal=False, scale=None):
    sq, d = q.shape
    sk, dv = K.shape[0], V.shape[1]
    if scale is None:
        scale = d ** -0.5
    size = (sk + num_splits - 1) // num_splits
    bounds = [(min(c * size, sk), min((c + 1) * size, sk)) for c in range(num_splits)]
    # Query i sees keys below limit[i] (all of them without a mask; bottom-right when causal).
    limit = np.arange(sq) + (sk - sq) + 1 if causal else np.full(sq, sk)
    O_parts = np.zeros((num_splits, sq, dv))
    L_parts = np.full((num_splits, sq), -np.inf)
    for c, (lo, hi) in enumerate(bounds):
        for i in range(sq):
            top = min(hi, int(limit[i]))
            if top <= lo:
                continue  # this row sees no key of the chunk
            s = K[lo:top] @ q[i] * scale
            m = s.max()
            e = np.exp(s - m)
            total = e.sum()
            O_parts[c, i] = e @ V[lo:top] / total
            L_parts[c, i] = m + np.log(total)
    return O_parts, L_parts


def _pair(O1, L1, O2, L2):
    big = np.maximum(L1, L2)
    ref = np.where(np.isfinite(big), big, 0.0)
    a, b = np.exp(L1 - ref), np.exp(L2 - ref)
    total = a + b
    ok = total > 0
    safe = np.where(ok, total, 1.0)
    return (a[:, None] * O1 + b[:, None] * O2) / safe[:, None], np.where(ok, ref + np.log(safe), -np.inf)


def flash_decode(q, K, V, num_splits, causal=False, scale=None):
    O_parts, L_parts = split_kv_partials(q, K, V, num_splits, causal, scale)
    o, lse = O_parts[0], L_parts[0]
    for c in range(1, num_splits):
        o, lse = _pair(o, lse, O_parts[c], L_parts[c])
    return o, lse
