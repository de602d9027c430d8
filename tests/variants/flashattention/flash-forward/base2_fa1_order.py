# drill: flashattention/flash-forward
# variant: FA1 loop order (K/V blocks outside, Q blocks inside) in base 2 (exp2 of log2(e)-scaled scores)
import math

import numpy as np

LOG2E = 1.0 / math.log(2.0)


def flash_attention_forward(Q, K, V, Br=16, Bc=16, causal=False, scale=None):
    sq, d = Q.shape
    sk = K.shape[0]
    scale = (1.0 / math.sqrt(d) if scale is None else scale) * LOG2E
    m = np.full(sq, -np.inf)  # running max, in base-2 units
    l = np.zeros(sq)
    acc = np.zeros((sq, V.shape[1]))
    for j0 in range(0, sk, Bc):
        j1 = min(j0 + Bc, sk)
        k, v = K[j0:j1], V[j0:j1]
        for i0 in range(0, sq, Br):
            i1 = min(i0 + Br, sq)
            S = (Q[i0:i1] @ k.T) * scale
            if causal:
                S = np.where(np.arange(j0, j1)[None, :] <= np.arange(i0, i1)[:, None] + (sk - sq), S, -np.inf)
            m_old = m[i0:i1]
            m_new = np.maximum(m_old, S.max(axis=1))
            shift = np.where(m_new == -np.inf, 0.0, m_new)
            P = np.exp2(S - shift[:, None])
            alpha = np.exp2(np.where(m_old == -np.inf, -np.inf, m_old - shift))
            l[i0:i1] = alpha * l[i0:i1] + P.sum(axis=1)
            acc[i0:i1] = alpha[:, None] * acc[i0:i1] + P @ v
            m[i0:i1] = m_new
    seen = l > 0
    O = np.where(seen[:, None], acc / np.where(seen, l, 1.0)[:, None], 0.0)
    L = np.where(seen, (m + np.log2(np.where(seen, l, 1.0))) / LOG2E, -np.inf)
    return O, L
