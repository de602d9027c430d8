# drill: flashattention/paged-attention
"""PagedAttention: decode one token per sequence from a KV cache kept in pages.

A serving engine cannot reserve max_len contiguous cache rows for every request: most
of it would sit empty. PagedAttention (vLLM) stores the cache in fixed-size pages
drawn from one shared pool, and gives each sequence a block table, like the page
table of virtual memory:

    k_pages, v_pages  [num_pages, page_size, Hkv, d]   the shared pool
    block_table       int [B, max_pages]   logical page p of sequence b is physical
                                           page block_table[b, p]; -1 past its last page
                                           (a row its pages fill holds no -1)
    seq_lens          int [B]              cached keys of sequence b (>= 1)

Key t of sequence b (t < seq_lens[b]) lives in physical page block_table[b, t // page_size]
at slot t % page_size (page_size is any positive integer, not only a power of two). The
new token's own key is already in the cache, so every query sees all seq_lens[b] keys
(no causal mask).

    q  [B, Hq, d]   one new token per sequence, Hq query heads
    o  [B, Hq, d]   its attention output

The scores q·k are multiplied by scale, 1/sqrt(d) when scale is None; any other value is
used as given, 0.0 included (every live key then weighs the same).

Grouped-query attention: Hq is a multiple of Hkv, and query head h reads KV head
h // (Hq // Hkv): consecutive query heads share one KV head. Hkv = 1 is
multi-query attention (every query head reads the one KV head).

Anything outside the live cache may hold garbage, NaN included: slots past seq_len in
a sequence's last page, and pages that no sequence references. Several sequences may
point at the same physical pages (a shared prompt prefix). Every input is left as it was:
the pool is the cache that every later decode step reads (scale a product, never q or a
page in place).

Only the pages that hold a sequence's keys are to be read, and the checks watch which
pages of k_pages and v_pages your code reads. Index the pools you are given by page
(k_pages[pages], k_pages[p, :rows], np.take(k_pages, pages, axis=0)): a reshape, numpy
function or conversion of a whole pool (k_pages.reshape(-1, Hkv, d), np.take without
axis=0, np.asarray(k_pages)) reads every page, and those checks then fail.

A check measures peak memory (a block table far wider than the live pages), counting
everything your file imports: write it with NumPy (importing torch alone takes about 200 MB).

Check your work:  drill check 09_paged_attention.py
"""

import math

import numpy as np


def paged_decode(q, k_pages, v_pages, block_table, seq_lens, scale=None):
    """Attention of each sequence's new token over its paged cache: returns o [B, Hq, d]."""
    # TODO: scale = 1/sqrt(d) when scale is None; group = Hq // Hkv.
    # TODO: for each sequence b, gather its keys and values from the pages its block
    #       table names (only the pages that hold its seq_lens[b] keys), and cut them
    #       to exactly seq_lens[b] rows.
    # TODO: for each query head h, attend over KV head h // group with a stable
    #       softmax (subtract the max before exponentiating).
    raise NotImplementedError
