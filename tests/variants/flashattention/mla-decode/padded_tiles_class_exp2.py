# drill: flashattention/mla-decode
# variant: a small streaming class in base 2 (exp2, log2(e) folded into the scale), every tile a fixed [block]-row local buffer filled with np.copyto whose rows past seq_len are zero-padded and scored -inf
"""Fixed-size local tiles loaded with np.copyto, zero-padded past seq_len and scored -inf there; base-2 online softmax in a small class."""
import math

import numpy as np


class _Softmax2:
    def __init__(self, H, d_c):
        self.m = np.full(H, -np.inf)
        self.l = np.zeros(H)
        self.acc = np.zeros((H, d_c))

    def update(self, s2, rows):
        m_new = np.maximum(self.m, s2.max(axis=1))
        a = np.exp2(self.m - m_new)
        p = np.exp2(s2 - m_new[:, None])
        self.l = a * self.l + p.sum(axis=1)
        self.acc = a[:, None] * self.acc + p @ rows
        self.m = m_new


def mla_decode(q_nope, q_rope, c_kv, k_rope, W_uk, W_uv, seq_len, block=256, scale=None):
    H, d_nope = q_nope.shape
    d_rope = q_rope.shape[1]
    d_c = c_kv.shape[1]
    sc = (1.0 / math.sqrt(d_nope + d_rope) if scale is None else scale) * math.log2(math.e)
    q_lat = np.einsum("hn,hcn->hc", q_nope, W_uk)
    state = _Softmax2(H, d_c)
    c_tile = np.zeros((block, d_c))
    r_tile = np.zeros((block, d_rope))
    for lo in range(0, seq_len, block):
        n = min(block, seq_len - lo)
        np.copyto(c_tile[:n], c_kv[lo:lo + n])  # load the block into the local tile
        np.copyto(r_tile[:n], k_rope[lo:lo + n])
        c_tile[n:] = 0.0
        r_tile[n:] = 0.0
        s2 = (q_lat @ c_tile.T + q_rope @ r_tile.T) * sc  # [H, block]
        s2[:, n:] = -np.inf  # padding rows are not tokens
        state.update(s2, c_tile)
    o_lat = state.acc / state.l[:, None]
    return np.einsum("hc,hcv->hv", o_lat, W_uv)
