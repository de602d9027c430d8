# drill: flashattention/mla-decode
"""Multi-head latent attention (MLA, DeepSeek-V2 §2.1) at decode time.

A decode step attends one new token's H query heads over every cached token. Plain
multi-head attention caches a key and a value per head per token: 2·H·d_h numbers.
MLA caches one latent vector per token instead, c_kv[t] of width d_c (512 in
DeepSeek-V2/V3, against 2·128·128 = 32768 for their MHA equivalent), and rebuilds each
head's key and value from it with up-projections:

    key of head h at position t    k_h[t] = c_kv[t] @ W_uk[h]        [d_nope]
    value of head h at position t  v_h[t] = c_kv[t] @ W_uv[h]        [d_v]

RoPE cannot pass through W_uk (the rotation depends on the position, the matrix does
not), so MLA adds a small decoupled RoPE key k_rope[t] of width d_rope, ONE for all
heads, cached beside c_kv. The score of head h at position t is

    s[h, t] = (q_nope[h] · k_h[t]  +  q_rope[h] · k_rope[t]) · scale
    scale   = 1/sqrt(d_nope + d_rope) when scale is None; any other scale is used
              as given, 0.0 and negative values included

and o[h] = Σ_t softmax_t(s[h])[t] · v_h[t].

Inputs (float64):
    q_nope  [H, d_nope]        q_rope [H, d_rope]  (RoPE already applied)
    c_kv    [S, d_c]           k_rope [S, d_rope]  (the cache; rows at or past seq_len
                                                    may hold anything, NaN included)
    W_uk    [H, d_c, d_nope]   W_uv   [H, d_c, d_v]
    seq_len int, 1 <= seq_len <= S: the number of cached tokens to attend over
Returns o [H, d_v]. Every input is left as it was: the query is the caller's, the weights
are the model's and the cache is read again at every later step (scale a product, never an
input in place).

What makes it fast is never building k_h or v_h at all:

  * absorb W_uk into the query: q_nope[h] · (c_kv[t] @ W_uk[h]) = (W_uk[h] @ q_nope[h]) · c_kv[t],
    so each head gets a latent query of width d_c and scores against c_kv directly;
  * absorb W_uv after the softmax: Σ_t p[t] (c_kv[t] @ W_uv[h]) = (Σ_t p[t] c_kv[t]) @ W_uv[h],
    so the weighted sum runs over the latent rows and each head up-projects once.

Then stream the cache in blocks of `block` rows with the online softmax (exercise 03):
per block an [H, block] score tile, a running max and sum per head, an [H, d_c]
accumulator. Never hold per-head keys or values [H, S, ·], nor an [H, S] score array:
the checks measure your peak memory on a long cache, counting everything your file
imports: write it with NumPy (importing torch alone takes about 200 MB).

Every check watches which rows of c_kv and k_rope your code reads: rows 0 .. seq_len - 1,
each once for all heads together, at most `block` rows at a time. Slice the arrays you
are given (c_kv[lo:hi], or c_kv[lo:hi].copy() for a local tile): a conversion such as
np.asarray(c_kv) or np.array(c_kv[lo:hi]), of the whole array or of a slice, hides the
reads, and the checks then fail; so does filling a buffer of your own with buf[:n] = c_kv[lo:hi]
(np.copyto(buf[:n], c_kv[lo:hi]) is fine).

Check your work:  drill check 13_mla_decode.py
"""

import math

import numpy as np


def mla_decode(q_nope, q_rope, c_kv, k_rope, W_uk, W_uv, seq_len, block=256, scale=None):
    """One decode step of MLA over the first seq_len rows of the latent cache: returns o [H, d_v]."""
    # TODO: scale = 1/sqrt(d_nope + d_rope) when scale is None.
    # TODO: absorb W_uk into the query: one latent query of width d_c per head.
    # TODO: walk rows 0 .. seq_len - 1 of c_kv and k_rope in blocks of `block` rows (never
    #       past seq_len): the [H, b] scores of the block (latent part plus the shared RoPE
    #       part), then the online softmax update of a running max, sum and [H, d_c]
    #       accumulator per head.
    # TODO: divide by the sum once at the end, then up-project with each head's W_uv[h].
    raise NotImplementedError
