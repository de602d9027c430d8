# drill: flashattention/flash-forward
# Attack on the memory check: allocate (and touch) a buffer for the full score matrix while
# the file is imported, so the call itself allocates nothing new.
import math

import numpy as np

_BUFFER = np.ones(6144 * 6144)


def flash_attention_forward(Q, K, V, Br=16, Bc=16, causal=False, scale=None):
    sq, d = Q.shape
    sk = K.shape[0]
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    S = _BUFFER[:sq * sk].reshape(sq, sk) if sq * sk <= _BUFFER.size else np.empty((sq, sk))
    np.matmul(Q, K.T, out=S)
    S *= scale
    for i in range(sq):
        if causal:
            S[i, max(0, i + sk - sq + 1):] = -np.inf
    m = S.max(axis=1) if sk else np.full(sq, -np.inf)
    seen = m > -np.inf
    shift = np.where(seen, m, 0.0)
    S -= shift[:, None]
    np.exp(S, out=S)
    l = S.sum(axis=1)
    l_safe = np.where(seen, l, 1.0)
    O = np.where(seen[:, None], (S @ V) / l_safe[:, None], 0.0)
    L = np.where(seen, shift + np.log(l_safe), -np.inf)
    return O, L
