# drill: flashattention/flash-decoding
"""Split-KV decoding (FlashDecoding): one new token against a long KV cache.

At decode time a few query rows (usually one) meet a cache of sk keys. Tiling the
queries gives almost no parallel work, so FlashDecoding tiles the keys instead: cut
K and V into num_splits contiguous chunks, let each chunk (one thread block on a
GPU) compute attention over its own keys, then merge the chunks by their logsumexp,
exactly as exercise 04 merges partial results.

    q  [sq, d]   the new query rows (sq <= sk)
    K  [sk, d]   the cache; with causal=True its last sq keys are the queries' own
    V  [sk, d]

Chunks hold ceil(sk / num_splits) keys each, the last one shorter. With more splits
than that covers, the chunks that start past sk are empty.

split_kv_partials returns, for every chunk c:

    O_parts[c]  [sq, d]  softmax over chunk c's keys ALONE, times its values
    L_parts[c]  [sq]     natural-log logsumexp of chunk c's scaled scores

Each chunk is normalised by its own max and sum: a GPU thread block cannot see the
other chunks. An empty chunk, or a row that sees no key of the chunk (causal), gives
O = 0 and L = -inf, with no NaN and no numpy warning.

flash_decode merges the partials into (o [sq, d], lse [sq]): full attention. It splits
K and V into the same num_splits chunks as split_kv_partials (calling it is the simple way).

Causal is aligned bottom-right as in exercise 03: query i sees keys j <= i + (sk - sq).
A score is (q_i · k_j) * scale, scale = 1/sqrt(d) when None; a given scale is used as
it is (0.0 and negative values included), and a hidden key stays hidden whatever its score
and however large or small the visible scores are.
q, K and V are left unchanged: K and V are the cache, read again at every later step.

Work one chunk at a time, as one thread block does: hold the scores of a single chunk,
never those of the whole cache (nor every chunk's scores stacked in one array). The
checks measure peak memory over a long cache, counting everything your file imports:
write it with NumPy (importing torch alone takes about 200 MB).

Example: sk = 10, num_splits = 4 gives chunks [0:3], [3:6], [6:9], [9:10];
         sk = 3,  num_splits = 5 gives [0:1], [1:2], [2:3] and two empty chunks.

Some checks watch which rows of K and V your code reads, block by block: every read must
lie inside one chunk (reading a chunk in smaller pieces is fine). Slice the arrays you
are given (K[lo:hi]): a whole-array copy or conversion such as np.asarray(K) hides the
reads, and those checks then fail.

Check your work:  drill check 08_flash_decoding.py
"""

import math

import numpy as np


def split_kv_partials(q, K, V, num_splits, causal=False, scale=None):
    """Each chunk's own (O, L): returns O_parts [num_splits, sq, d], L_parts [num_splits, sq]."""
    # TODO: scale = 1/sqrt(d) when scale is None; chunk = ceil(sk / num_splits).
    # TODO: for each chunk c (keys c*chunk .. min((c+1)*chunk, sk)), compute the scaled
    #       scores, mask them (causal: key j visible to row i when j <= i + sk - sq),
    #       and the chunk's own softmax statistics: its max, its sum, O and L.
    # TODO: empty chunks and rows with no visible key: O = 0, L = -inf, without
    #       ever computing -inf - (-inf).
    raise NotImplementedError


def flash_decode(q, K, V, num_splits, causal=False, scale=None):
    """Attention of q over the whole cache from the split-KV partials: returns (o [sq, d], lse [sq])."""
    # TODO: merge the partials by their logsumexp (shift by the largest L per row;
    #       rows where every L is -inf get o = 0, lse = -inf).
    raise NotImplementedError
