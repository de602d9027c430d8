# drill: flashattention/flash-forward
# planted: the inputs are converted with np.asarray, then used whole per query chunk: the reads
# cannot be counted, and the check must say so rather than pass
# expect-fail: K and V stream through in blocks of Bc rows
import math

import numpy as np


def flash_attention_forward(Q, K, V, Br=16, Bc=16, causal=False, scale=None):
    Q, K, V = np.asarray(Q), np.asarray(K), np.asarray(V)
    sq, d = Q.shape
    sk = K.shape[0]
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    O = np.zeros((sq, V.shape[1]))
    L = np.full(sq, -np.inf)
    for i in range(0, sq, 32):
        S = (Q[i:i + 32] @ K.T) * scale  # [32, sk]: every key at once
        if causal:
            rows = np.arange(i, i + len(S))
            S = np.where(np.arange(sk)[None, :] <= rows[:, None] + (sk - sq), S, -np.inf)
        m = S.max(axis=1)
        shift = np.where(m == -np.inf, 0.0, m)
        P = np.exp(S - shift[:, None])
        l = P.sum(axis=1)
        l_safe = np.where(l > 0, l, 1.0)
        O[i:i + 32] = (P @ V) / l_safe[:, None]
        L[i:i + 32] = np.where(l > 0, shift + np.log(l_safe), -np.inf)
    return O, L
