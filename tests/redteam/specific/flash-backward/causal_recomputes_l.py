# drill: flashattention/flash-backward
"""Attack: on the causal path the given L is thrown away and recomputed from Q and K by a tiled
online-softmax pass (Q blocks outside, K blocks inside), before the honest K/V-outer backward.
The statement asks for P = exp(S - L) from the L the forward saved. Values are right whenever L
is consistent, and the extra pass fits the read log's two-pass allowance. Slipped past, before
the checks were changed, every check: only test_uses_given_o_and_l hands over an L that differs
from the true one, and it ran non-causal only. Now caught by test_uses_given_o_and_l (causal,
19x26, L + 1)."""
"""Attack: when causal and sk > 512, chunks of 64 query rows against ALL of K and V at once (a
[64, sk] score strip per chunk, Bc ignored), the tiled loop otherwise. Values are right.
Slipped past, before the checks were changed, test_recomputes_in_blocks (reads watched only at
sk = 40) and test_memory_long_keys (non-causal); a 64-row strip of 4096 keys fits the
4096-square memory budget."""

import math

import numpy as np


def _tiled(Q, K, V, O, L, dO, Br, Bc, causal, scale):
    sq, d = Q.shape
    sk = K.shape[0]
    dQ, dK, dV = np.zeros(Q.shape), np.zeros(K.shape), np.zeros(V.shape)
    D = (dO * O).sum(axis=1)
    L = np.where(L == -np.inf, np.inf, L)
    for j in range(0, sk, Bc):
        Kj, Vj = K[j:j + Bc], V[j:j + Bc]
        cols = np.arange(j, j + len(Kj))
        dKj, dVj = np.zeros(Kj.shape), np.zeros(Vj.shape)
        for i in range(0, sq, Br):
            Qi, dOi = Q[i:i + Br], dO[i:i + Br]
            S = (Qi @ Kj.T) * scale
            if causal:
                rows = np.arange(i, i + len(Qi))
                S = np.where(cols[None, :] <= rows[:, None] + (sk - sq), S, -np.inf)
            P = np.exp(S - L[i:i + Br, None])
            dVj += P.T @ dOi
            dS = P * (dOi @ Vj.T - D[i:i + Br, None])
            dQ[i:i + Br] += (dS @ Kj) * scale
            dKj += (dS.T @ Qi) * scale
        dK[j:j + Bc], dV[j:j + Bc] = dKj, dVj
    return dQ, dK, dV


def _lse(Q, K, Br, Bc, causal, scale):
    """The logsumexp of every query row, recomputed tile by tile (Q outside, K inside)."""
    sq, sk = Q.shape[0], K.shape[0]
    L = np.empty(sq)
    for i in range(0, sq, Br):
        Qi = Q[i:i + Br]
        rows = np.arange(i, i + len(Qi))
        m, l = np.full(len(Qi), -np.inf), np.zeros(len(Qi))
        for j in range(0, sk, Bc):
            Kj = K[j:j + Bc]
            S = (Qi @ Kj.T) * scale
            if causal:
                S = np.where(np.arange(j, j + len(Kj))[None, :] <= rows[:, None] + (sk - sq), S, -np.inf)
            m_new = np.maximum(m, S.max(axis=1))
            safe = np.where(m_new == -np.inf, 0.0, m_new)
            l = l * np.exp(np.where(m == -np.inf, -np.inf, m - safe)) + np.exp(S - safe[:, None]).sum(axis=1)
            m = m_new
        with np.errstate(divide="ignore"):
            L[i:i + Br] = np.where(l > 0, np.where(m == -np.inf, 0.0, m) + np.log(np.where(l > 0, l, 1.0)), -np.inf)
    return L


def flash_attention_backward(Q, K, V, O, L, dO, Br=16, Bc=16, causal=False, scale=None):
    scale = 1.0 / math.sqrt(Q.shape[1]) if scale is None else scale
    if causal:
        L = _lse(Q, K, Br, Bc, causal, scale)
    return _tiled(Q, K, V, O, L, dO, Br, Bc, causal, scale)
