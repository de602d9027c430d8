# drill: flashattention/flash-decoding
# variant: explicit Python loops over the query rows of each chunk (each row's visible keys sliced off the chunk), and a two-pass merge loop (max over chunks, then weighted sums)
import math

import numpy as np


def split_kv_partials(q, K, V, num_splits, causal=False, scale=None):
    sq, d = q.shape
    sk = K.shape[0]
    if scale is None:
        scale = 1.0 / math.sqrt(d)
    size = -(-sk // num_splits)
    O_parts = np.zeros((num_splits, sq, V.shape[1]))
    L_parts = np.full((num_splits, sq), -np.inf)
    for c in range(num_splits):
        a = c * size
        b = min(a + size, sk)
        if b <= a:
            continue
        Kc, Vc = K[a:b], V[a:b]
        for i in range(sq):
            n = b - a
            if causal:
                n = min(n, i + (sk - sq) + 1 - a)  # keys a .. a+n-1 are visible to row i
            if n <= 0:
                continue
            s = (Kc[:n] @ q[i]) * scale
            mx = s.max()
            p = np.exp(s - mx)
            tot = p.sum()
            O_parts[c, i] = p @ Vc[:n] / tot
            L_parts[c, i] = mx + math.log(tot)
    return O_parts, L_parts


def flash_decode(q, K, V, num_splits, causal=False, scale=None):
    O_parts, L_parts = split_kv_partials(q, K, V, num_splits, causal, scale)
    sq = q.shape[0]
    o = np.zeros((sq, O_parts.shape[2]))
    lse = np.full(sq, -np.inf)
    for i in range(sq):
        top = -math.inf
        for c in range(num_splits):
            top = max(top, L_parts[c, i])
        if top == -math.inf:
            continue  # the row sees no key at all
        tot = 0.0
        for c in range(num_splits):
            if L_parts[c, i] > -math.inf:
                w = math.exp(L_parts[c, i] - top)
                tot += w
                o[i] += w * O_parts[c, i]
        o[i] /= tot
        lse[i] = top + math.log(tot)
    return o, lse
