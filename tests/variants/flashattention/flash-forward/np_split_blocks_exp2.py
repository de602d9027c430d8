# drill: flashattention/flash-forward
# variant: K and V cut once into lists of Bc-row views with np.split (Q likewise with Br), zipped together; base-2 exponentials with the log2(e) folded into the scale
"""Q, K and V cut once with np.split (the row blocks a slice loop would take) and zipped; base 2,
with log2(e) folded into the scale. np.split once read as one whole read of K and V."""
import math

import numpy as np


def flash_attention_forward(Q, K, V, Br=16, Bc=16, causal=False, scale=None):
    sq, d = Q.shape
    sk = K.shape[0]
    c = (1.0 / math.sqrt(d) if scale is None else scale) * math.log2(math.e)
    q_blocks = np.split(Q, range(Br, sq, Br))
    k_blocks = np.split(K, range(Bc, sk, Bc))
    v_blocks = np.split(V, range(Bc, sk, Bc))
    outs, lses = [], []
    for bi, Qi in enumerate(q_blocks):
        r = np.arange(bi * Br, bi * Br + len(Qi))[:, None]
        m = np.full(len(Qi), -np.inf)
        l = np.zeros(len(Qi))
        acc = np.zeros((len(Qi), V.shape[1]))
        for bj, (Kj, Vj) in enumerate(zip(k_blocks, v_blocks)):
            S2 = (Qi @ Kj.T) * c  # scores in base-2 units
            if causal:
                col = np.arange(bj * Bc, bj * Bc + len(Kj))[None, :]
                S2 = np.where(col - r <= sk - sq, S2, -np.inf)
            m2 = np.maximum(m, S2.max(axis=1))
            base = np.where(np.isfinite(m2), m2, 0.0)
            P = np.exp2(S2 - base[:, None])
            a = np.exp2(m - base)
            l = a * l + P.sum(axis=1)
            acc = a[:, None] * acc + P @ Vj
            m = m2
        seen = l > 0
        safe = np.where(seen, l, 1.0)
        outs.append(acc / safe[:, None])
        lses.append(np.where(seen, (m + np.log2(safe)) * math.log(2.0), -np.inf))
    return np.concatenate(outs), np.concatenate(lses)
