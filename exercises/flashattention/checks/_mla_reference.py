"""Naive multi-head latent attention in float64, for the mla-decode checks.

Not collected by pytest (leading underscore). The naive form builds every head's keys and
values explicitly, [H, S, d], the very arrays the exercise must never hold: it is the
yardstick. The switches model the mistakes a learner makes, so a failure can be named.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass
class Mla:
    """One decode step's inputs: the new token's query heads, the latent cache, the weights."""

    q_nope: np.ndarray  # [H, d_nope]
    q_rope: np.ndarray  # [H, d_rope]
    c_kv: np.ndarray  # [S, d_c]
    k_rope: np.ndarray  # [S, d_rope]
    W_uk: np.ndarray  # [H, d_c, d_nope]
    W_uv: np.ndarray  # [H, d_c, d_v]
    seq_len: int

    @property
    def shape(self) -> tuple[int, int, int, int, int, int]:
        """(H, d_c, d_nope, d_rope, d_v, S)."""
        H, d_nope = self.q_nope.shape
        return H, self.c_kv.shape[1], d_nope, self.q_rope.shape[1], self.W_uv.shape[2], self.c_kv.shape[0]

    def args(self) -> tuple:
        """Fresh copies, in the contract's order."""
        return (self.q_nope.copy(), self.q_rope.copy(), self.c_kv.copy(), self.k_rope.copy(),
                self.W_uk.copy(), self.W_uv.copy(), int(self.seq_len))

    def describe(self) -> str:
        H, d_c, d_nope, d_rope, d_v, S = self.shape
        return (f"q_nope[{H}x{d_nope}], q_rope[{H}x{d_rope}], c_kv[{S}x{d_c}], k_rope[{S}x{d_rope}], "
                f"W_uk[{H}x{d_c}x{d_nope}], W_uv[{H}x{d_c}x{d_v}], seq_len={self.seq_len}")


def draw(rng, H, d_c, d_nope, d_rope, d_v, S, seq_len=None, *, spread=1.0, poison=np.nan) -> Mla:
    """Random inputs; rows of the cache at or past seq_len hold `poison`.

    The weights are scaled by 1/sqrt(d_c) so per-head keys and values have unit size.
    """
    seq_len = S if seq_len is None else seq_len
    c_kv = rng.normal(size=(S, d_c))
    k_rope = rng.normal(size=(S, d_rope))
    c_kv[seq_len:] = poison
    k_rope[seq_len:] = poison
    return Mla(q_nope=rng.normal(scale=spread, size=(H, d_nope)),
               q_rope=rng.normal(scale=spread, size=(H, d_rope)),
               c_kv=c_kv, k_rope=k_rope,
               W_uk=rng.normal(size=(H, d_c, d_nope)) / math.sqrt(d_c),
               W_uv=rng.normal(size=(H, d_c, d_v)) / math.sqrt(d_c),
               seq_len=seq_len)


def default_scale(x: Mla, scale) -> float:
    H, d_c, d_nope, d_rope, d_v, S = x.shape
    return 1.0 / math.sqrt(d_nope + d_rope) if scale is None else float(scale)


def naive(x: Mla, scale=None, *, rows=None, nope=True, rope=True, uk="per-head", uv="per-head") -> np.ndarray:
    """o [H, d_v]: every head's keys and values built explicitly from the first `rows` cache rows.

    rows: how many rows to attend over (default seq_len). nope / rope: keep that part of the
    score. uk / uv: "per-head" (the contract), "head0" (head 0's matrix for every head),
    "transposed" (W_uk[h].T, only when d_c == d_nope).
    """
    n = x.seq_len if rows is None else rows
    c, r = x.c_kv[:n], x.k_rope[:n]
    s = default_scale(x, scale)
    W_uk = {"per-head": x.W_uk, "head0": np.broadcast_to(x.W_uk[:1], x.W_uk.shape),
            "transposed": np.swapaxes(x.W_uk, 1, 2)}[uk]
    W_uv = {"per-head": x.W_uv, "head0": np.broadcast_to(x.W_uv[:1], x.W_uv.shape)}[uv]
    K = np.einsum("tc,hcn->htn", c, W_uk)  # [H, n, d_nope]: per-head keys
    V = np.einsum("tc,hcv->htv", c, W_uv)  # [H, n, d_v]: per-head values
    S = np.zeros((x.q_nope.shape[0], n))
    if nope:
        S = S + np.einsum("hn,htn->ht", x.q_nope, K)
    if rope:
        S = S + x.q_rope @ r.T  # one RoPE key per position, shared by every head
    S = S * s
    P = np.exp(S - S.max(axis=1, keepdims=True))
    P /= P.sum(axis=1, keepdims=True)
    return np.einsum("ht,htv->hv", P, V)


def streamed(x: Mla, block: int, scale=None, *, rescale_acc=True, rescale_l=True, drop_ragged=False,
             per_block=False) -> np.ndarray:
    """The absorbed, streamed loop with switchable mistakes (to name what went wrong).

    per_block=True normalises each block on its own and averages the blocks.
    """
    n = x.seq_len
    end = (n // block) * block if drop_ragged else n
    s = default_scale(x, scale)
    q_lat = np.einsum("hcn,hn->hc", x.W_uk, x.q_nope)
    H, d_c = q_lat.shape
    m, l, acc = np.full(H, -np.inf), np.zeros(H), np.zeros((H, d_c))
    parts = []
    for a in range(0, end, block):
        b = min(a + block, end)
        S = (q_lat @ x.c_kv[a:b].T + x.q_rope @ x.k_rope[a:b].T) * s
        if per_block:
            P = np.exp(S - S.max(axis=1, keepdims=True))
            parts.append((P / P.sum(axis=1, keepdims=True)) @ x.c_kv[a:b])
            continue
        m_new = np.maximum(m, S.max(axis=1))
        alpha = np.exp(m - m_new)
        P = np.exp(S - m_new[:, None])
        l = (alpha * l if rescale_l else l) + P.sum(axis=1)
        acc = (alpha[:, None] * acc if rescale_acc else acc) + P @ x.c_kv[a:b]
        m = m_new
    lat = np.mean(parts, axis=0) if per_block else acc / l[:, None]
    return np.einsum("hc,hcv->hv", lat, x.W_uv)
