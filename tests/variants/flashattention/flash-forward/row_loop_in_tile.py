# drill: flashattention/flash-forward
# variant: explicit Python loop over the rows of each tile with scalar m, l; causal mask by slicing each row's visible keys
import math

import numpy as np


def flash_attention_forward(Q, K, V, Br=16, Bc=16, causal=False, scale=None):
    sq, d = Q.shape
    sk = K.shape[0]
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    O = np.zeros((sq, V.shape[1]))
    L = np.full(sq, -np.inf)
    for i0 in range(0, sq, Br):
        Qi = Q[i0:i0 + Br]
        br = Qi.shape[0]
        m = [-math.inf] * br
        l = [0.0] * br
        acc = np.zeros((br, V.shape[1]))
        for j0 in range(0, sk, Bc):
            Kj, Vj = K[j0:j0 + Bc], V[j0:j0 + Bc]
            S = np.dot(Qi, Kj.T) * scale  # the [br, bc] tile
            for r in range(br):
                n = len(Kj) if not causal else min(len(Kj), i0 + r + (sk - sq) - j0 + 1)
                if n <= 0:
                    continue  # this row sees no key of the block
                row = S[r, :n]
                m_new = max(m[r], float(row.max()))
                p = np.exp(row - m_new)
                a = math.exp(m[r] - m_new) if m[r] > -math.inf else 0.0
                l[r] = a * l[r] + float(p.sum())
                acc[r] = a * acc[r] + p @ Vj[:n]
                m[r] = m_new
        for r in range(br):
            if l[r] > 0:
                O[i0 + r] = acc[r] / l[r]
                L[i0 + r] = m[r] + math.log(l[r])
    return O, L
