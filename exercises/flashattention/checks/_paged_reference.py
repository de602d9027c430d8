"""Paged KV caches for the paged-attention checks: building pools and the float64 reference.

Not collected by pytest (leading underscore).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ._attention_reference import default_scale


@dataclass
class Pool:
    """One paged cache: the page pool, the block table and the true keys of each sequence."""

    k_pages: np.ndarray  # [num_pages, page_size, Hkv, d]
    v_pages: np.ndarray
    block_table: np.ndarray  # int64 [B, max_pages], -1 past each sequence's last page
    seq_lens: np.ndarray  # int64 [B]
    keys: list  # per sequence: K [n, Hkv, d]
    values: list

    @property
    def page_size(self) -> int:
        return self.k_pages.shape[1]

    def describe(self) -> str:
        num_pages, ps, hkv, d = self.k_pages.shape
        lens = self.seq_lens.tolist()
        lens_text = str(lens) if len(lens) <= 6 else f"[{', '.join(map(str, lens[:6]))}, …]"
        return (f"k_pages, v_pages [{num_pages}x{ps}x{hkv}x{d}], block_table [{self.block_table.shape[0]}x"
                f"{self.block_table.shape[1]}], seq_lens={lens_text}")


def build_pool(rng, seq_lens, page_size, Hkv, d, *, spare=3, shuffle=True, shared_prefix_pages=0,
               poison=np.nan) -> Pool:
    """A pool holding each sequence's keys in its own pages (in random physical order).

    Slots past seq_len and `spare` unreferenced pages are filled with `poison` ("draws": normal
    draws like the live keys, which no test of the values can tell from them). With
    shared_prefix_pages = P, every sequence's first P logical pages are the same physical
    pages, holding the same keys (all sequences must then be longer than P pages).
    """
    seq_lens = np.asarray(seq_lens, dtype=np.int64)
    counts = [-(-int(n) // page_size) for n in seq_lens]
    own = [c - shared_prefix_pages for c in counts]
    assert min(own) >= 0
    num_pages = shared_prefix_pages + sum(own) + spare
    physical = rng.permutation(num_pages) if shuffle else np.arange(num_pages)
    if poison == "draws":  # every slot starts as one; the live ones are drawn over below
        k_pages, v_pages = (rng.normal(size=(num_pages, page_size, Hkv, d)) for _ in "kv")
    else:
        k_pages = np.full((num_pages, page_size, Hkv, d), poison)
        v_pages = np.full((num_pages, page_size, Hkv, d), poison)
    table = np.full((len(seq_lens), max(counts) + 1), -1, dtype=np.int64)  # one -1 column at least
    prefix = physical[:shared_prefix_pages]
    next_page = shared_prefix_pages
    for page in prefix:
        k_pages[page] = rng.normal(size=(page_size, Hkv, d))
        v_pages[page] = rng.normal(size=(page_size, Hkv, d))
    keys, values = [], []
    for b, n in enumerate(seq_lens):
        pages = list(prefix) + list(physical[next_page:next_page + own[b]])
        next_page += own[b]
        table[b, :len(pages)] = pages
        for p, page in enumerate(pages[shared_prefix_pages:], start=shared_prefix_pages):
            live = min(page_size, int(n) - p * page_size)
            k_pages[page, :live] = rng.normal(size=(live, Hkv, d))
            v_pages[page, :live] = rng.normal(size=(live, Hkv, d))
        keys.append(k_pages[pages].reshape(-1, Hkv, d)[:n].copy())
        values.append(v_pages[pages].reshape(-1, Hkv, d)[:n].copy())
    return Pool(k_pages, v_pages, table, seq_lens, keys, values)


def reference(q, pool: Pool, scale=None, *, head_map="div", keys=None, values=None) -> np.ndarray:
    """o [B, Hq, d] in float64. head_map: "div" (the contract, h // group) or "mod" (h % Hkv).

    keys/values replace each sequence's true keys (to model reading the wrong rows).
    """
    B, Hq, d = q.shape
    s = default_scale(d, scale)
    keys = pool.keys if keys is None else keys
    values = pool.values if values is None else values
    Hkv = pool.k_pages.shape[2]
    group = Hq // Hkv
    o = np.zeros((B, Hq, pool.v_pages.shape[3]))
    with np.errstate(all="ignore"):
        for b in range(B):
            for h in range(Hq):
                kv = h // group if head_map == "div" else h % Hkv
                S = keys[b][:, kv] @ q[b, h] * s
                p = np.exp(S - S.max())
                o[b, h] = p @ values[b][:, kv] / p.sum()
    return o


def gathered(pool: Pool, rule: str):
    """Each sequence's keys and values as a mistaken rule reads them, or None where it reads nothing.

    "identity": logical page p read as physical page p (the block table ignored);
    "floor": only the seq_len // page_size full pages (the partial last page dropped);
    "whole-pages": every slot of the live pages (read past seq_len);
    "whole-table": every entry of the table row, -1 read as the pool's last page.
    """
    ks, vs = [], []
    ps = pool.page_size
    for b, n in enumerate(pool.seq_lens):
        n = int(n)
        count = -(-n // ps)
        upto = n
        if rule == "identity":
            pages = np.arange(count)
            if pages.max() >= pool.k_pages.shape[0]:
                return None
        elif rule == "floor":
            pages = pool.block_table[b, : n // ps]
            upto = (n // ps) * ps
            if upto == 0:
                return None
        elif rule == "whole-pages":
            pages, upto = pool.block_table[b, :count], count * ps
        else:
            pages = pool.block_table[b]
            upto = len(pages) * ps
        ks.append(pool.k_pages[pages].reshape(-1, *pool.k_pages.shape[2:])[:upto])
        vs.append(pool.v_pages[pages].reshape(-1, *pool.v_pages.shape[2:])[:upto])
    return ks, vs


def probe(pool: Pool, rng) -> Pool:
    """The same pool with its NaN poison replaced by finite garbage, to see which rows were read."""
    k, v = pool.k_pages.copy(), pool.v_pages.copy()
    bad = np.isnan(k)
    k[bad] = rng.normal(size=int(bad.sum())) * 3.0
    v[bad] = rng.normal(size=int(bad.sum())) * 3.0 + 5.0
    return Pool(k, v, pool.block_table, pool.seq_lens, pool.keys, pool.values)
