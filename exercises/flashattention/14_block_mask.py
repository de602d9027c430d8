# drill: flashattention/block-mask
"""Block masks (FlexAttention): skip empty tiles, mask partial ones, leave full ones alone.

Real training and serving rarely use plain causal attention. Several documents are packed
into one sequence (query i sees key j only inside its own document), decoders add the
causal bound, and long-context models add a sliding window. The mask is given by value:

    q_doc   int [sq]   document id of each query row     (ids are labels: any int64 values)
    kv_doc  int [sk]   document id of each key row
    causal  bool       key j visible only if j <= i'           (i' = i + sk - sq, bottom-right)
    window  int|None   sliding window: 0 <= i' - j < window  (a window implies causal; 0: no key)

Query i sees key j when q_doc[i] == kv_doc[j] and the position rules above hold (an id may
label several separate runs of keys: equal ids match, wherever they stand).

A FlashAttention kernel works on [Br, Bc] tiles (exercise 03), so FlexAttention first
sorts every tile into one of three kinds, the block mask:

    0  empty:   no pair of the tile is visible   -> skip it: no load, no matmul
    1  partial: some pairs are visible           -> compute the scores, apply the mask
    2  full:    every pair is visible            -> compute the scores, no mask at all

Tile (i, j) holds rows i*Br .. min((i+1)*Br, sq) - 1 and keys j*Bc .. min((j+1)*Bc, sk) - 1;
the ragged last tiles are simply smaller (judge only the pairs they really hold).

block_kinds(q_doc, kv_doc, window, causal, Br, Bc) returns kinds, int [Tr, Tc] (an integer
dtype, not float) with Tr = ceil(sq / Br), Tc = ceil(sk / Bc). Never build an sq×sk mask: judge
each tile from its own rows and keys (the checks measure your peak memory at sq = sk = 8192).

masked_flash_forward(...) is exercise 03's forward under that mask, returning (O, L):
scores only for tiles of kind 1 and 2, the mask only on kind 1 (no np.where over a full
tile's scores or probabilities, not even a guard such as np.where(np.isfinite(s), ...): a
full tile has no masked score, so such a guard does nothing there). A row that sees no key
gets O = 0 and L = -inf, with no NaN and no numpy warning. It never holds an sq×sk array,
nor the scores of a query block against all its visible keys at once: one [Br, Bc] tile of
scores at a time, combined by the online softmax. Neither function writes into its inputs
(Q[lo:hi] is a view: scale a copy, never the caller's arrays).
The scores are scaled by 1/sqrt(d) when scale is None; any other scale is used as given,
0.0 included.

Example: documents of lengths 5 and 3 (q_doc = kv_doc = [0,0,0,0,0,1,1,1]), causal, Br = Bc = 4:
    kinds = [[1, 0],     tile (0,0): rows 0-3, keys 0-3, causal triangle: partial
             [1, 1]]     tile (0,1): document 0 never sees keys 4-7:     empty
                         tiles (1,0) and (1,1): rows 4-7 straddle the boundary: partial

Some checks watch which rows of Q, K and V your code reads, block by block. Slice the
arrays you are given (K[lo:hi]): a whole-array copy or conversion such as np.asarray(K)
hides the reads, and those checks then fail. A slice counts as a load: cut a block of the
inner loop out when one of its tiles is computed, not all of them ahead of the loops (a
block that only empty tiles use must never be read).

Check your work:  drill check 14_block_mask.py
"""

import math

import numpy as np


def block_kinds(q_doc, kv_doc, window, causal, Br, Bc):
    """Per [Br, Bc] tile: 0 nothing visible (skip), 1 some visible (mask), 2 all visible (no mask)."""
    # TODO: Tr = ceil(sq / Br), Tc = ceil(sk / Bc); for each tile take its rows and keys
    #       (the last ones shorter), decide which of its pairs are visible (same document,
    #       and with causal or a window 0 <= i' - j (< window), i' = i + sk - sq), and give
    #       it 0, 1 or 2. Never a mask of the whole sequence.
    raise NotImplementedError


def masked_flash_forward(Q, K, V, q_doc, kv_doc, window=None, causal=False, Br=16, Bc=16, scale=None):
    """Exercise 03's tiled forward under the block mask: returns (O [sq, d], L [sq])."""
    # TODO: scale = 1/sqrt(d) when scale is None; kinds = block_kinds(...).
    # TODO: for each query block, loop only over the key blocks of kind 1 and 2: compute
    #       the [br, bc] scores, mask them (to -inf) only when the kind is 1, and run the
    #       online softmax update (running max, sum and accumulator per row).
    # TODO: rows that have seen no key yet must never compute exp(-inf - (-inf)); at the end
    #       rows with l = 0 get O = 0 and L = -inf.
    raise NotImplementedError
