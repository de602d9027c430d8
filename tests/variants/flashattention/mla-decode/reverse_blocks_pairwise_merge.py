# drill: flashattention/mla-decode
# variant: blocks walked from the end of the live cache back to row 0; each block's normalised (o, lse) folded into the running pair with max-shifted weights; batched matmul for the absorption
"""MLA decode over the cache back to front, merging normalised block partials."""

import math

import numpy as np


def _block_partial(q_lat, q_rope, c, r, scale):
    """Normalised latent output and logsumexp of one block, per head."""
    s = (np.matmul(q_lat, c.T) + np.matmul(q_rope, r.T)) * scale  # [H, b]
    m = s.max(axis=1, keepdims=True)
    w = np.exp(s - m)
    tot = w.sum(axis=1, keepdims=True)
    return (w / tot) @ c, (m + np.log(tot))[:, 0]


def mla_decode(q_nope, q_rope, c_kv, k_rope, W_uk, W_uv, seq_len, block=256, scale=None):
    d_nope, d_rope = q_nope.shape[1], q_rope.shape[1]
    scale = (d_nope + d_rope) ** -0.5 if scale is None else scale
    q_lat = np.matmul(W_uk, q_nope[:, :, None])[:, :, 0]  # [H, d_c, d_nope] @ [H, d_nope, 1]

    o_run, l_run = None, None
    # Block boundaries measured from seq_len backwards: the short block (if any) is at the front.
    hi = seq_len
    while hi > 0:
        lo = max(0, hi - block)
        o_b, l_b = _block_partial(q_lat, q_rope, c_kv[lo:hi], k_rope[lo:hi], scale)
        if o_run is None:
            o_run, l_run = o_b, l_b
        else:
            top = np.maximum(l_run, l_b)
            a, b = np.exp(l_run - top), np.exp(l_b - top)  # the larger is exactly 1
            o_run = (a[:, None] * o_run + b[:, None] * o_b) / (a + b)[:, None]
            l_run = top + np.log(a + b)
        hi = lo
    return np.matmul(o_run[:, None, :], W_uv)[:, 0, :]  # [H, 1, d_c] @ [H, d_c, d_v]
