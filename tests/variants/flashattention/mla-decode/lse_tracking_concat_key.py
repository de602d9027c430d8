# drill: flashattention/mla-decode
# variant: absorbed query and RoPE query concatenated into one [H, d_c + d_rope] query against [c_kv | k_rope] block rows; running state is a per-head logsumexp and a normalised latent output
"""MLA decode that tracks each head's logsumexp instead of a running max and sum."""

import math

import numpy as np


def mla_decode(q_nope, q_rope, c_kv, k_rope, W_uk, W_uv, seq_len, block=256, scale=None):
    H, d_nope = q_nope.shape
    d_rope = q_rope.shape[1]
    d_c = c_kv.shape[1]
    if scale is None:
        scale = 1.0 / math.sqrt(d_nope + d_rope)

    # Absorb W_uk head by head: the latent query W_uk[h] q_nope[h], width d_c.
    q_lat = np.stack([W_uk[h] @ q_nope[h] for h in range(H)])
    # One query of width d_c + d_rope per head, already scaled, against rows [c_kv[t] | k_rope[t]].
    q_cat = np.concatenate([q_lat, q_rope], axis=1) * scale

    lse = np.full(H, -np.inf)       # log Σ exp(s) over the rows seen so far, per head
    o_lat = np.zeros((H, d_c))      # softmax-weighted mean of the latent rows seen so far
    for lo in range(0, seq_len, block):
        hi = min(lo + block, seq_len)
        c = c_kv[lo:hi]
        key = np.concatenate([c, k_rope[lo:hi]], axis=1)  # [b, d_c + d_rope]
        s = q_cat @ key.T                                   # [H, b]
        top = s.max(axis=1)
        e = np.exp(s - top[:, None])
        blk_lse = top + np.log(e.sum(axis=1))
        blk_o = (e @ c) / e.sum(axis=1)[:, None]
        new_lse = np.logaddexp(lse, blk_lse)
        o_lat = np.exp(lse - new_lse)[:, None] * o_lat + np.exp(blk_lse - new_lse)[:, None] * blk_o
        lse = new_lse
    # Up-project the normalised latent output with each head's W_uv.
    return np.einsum("hc,hcv->hv", o_lat, W_uv)
