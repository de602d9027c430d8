# drill: flashattention/flash-forward
# variant: a dataclass holds each Q block's state; exp written into the score tile in place (out=), only the rows whose max grew are rescaled, fully masked tiles skipped with continue
"""State in a dataclass; P overwrites the score tile (np.exp(out=)); only rows whose max grew are rescaled; hidden causal tiles skipped."""
from dataclasses import dataclass, field
import math

import numpy as np


@dataclass
class RowState:
    n: int
    dv: int
    m: np.ndarray = field(init=False)
    l: np.ndarray = field(init=False)
    acc: np.ndarray = field(init=False)

    def __post_init__(self):
        self.m = np.full(self.n, -np.inf)
        self.l = np.zeros(self.n)
        self.acc = np.zeros((self.n, self.dv))


def _visible(rows, cols, offset):
    return cols[None, :] <= rows[:, None] + offset


def flash_attention_forward(Q, K, V, Br=16, Bc=16, causal=False, scale=None):
    sq, d = Q.shape
    sk, dv = K.shape[0], V.shape[1]
    scale = 1.0 / math.sqrt(d) if scale is None else float(scale)
    O = np.zeros((sq, dv))
    L = np.full(sq, -np.inf)
    for i0 in range(0, sq, Br):
        i1 = min(i0 + Br, sq)
        st = RowState(n=i1 - i0, dv=dv)
        rows = np.arange(i0, i1)
        for j0 in range(0, sk, Bc):
            j1 = min(j0 + Bc, sk)
            cols = np.arange(j0, j1)
            if causal:
                vis = _visible(rows, cols, sk - sq)
                if not vis.any():
                    continue  # no row of this block sees any of these keys
            S = np.dot(Q[i0:i1], K[j0:j1].T)
            S *= scale
            if causal:
                S[~vis] = -np.inf
            bmax = S.max(axis=1)
            grew = bmax > st.m
            if grew.any():
                old = st.m[grew]
                alpha = np.where(np.isneginf(old), 0.0, np.exp(old - bmax[grew]))
                st.l[grew] *= alpha
                st.acc[grew] *= alpha[:, None]
                st.m[grew] = bmax[grew]
            live = ~np.isneginf(st.m)
            S[~live] = -np.inf
            S -= np.where(live, st.m, 0.0)[:, None]
            np.exp(S, out=S)  # S now holds P
            st.l += S.sum(axis=1)
            st.acc += np.dot(S, V[j0:j1])
        ok = st.l > 0
        O[i0:i1][ok] = st.acc[ok] / st.l[ok][:, None]
        L[i0:i1][ok] = st.m[ok] + np.log(st.l[ok])
    return O, L
