"""Hidden checks for 14_block_mask.py."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from drill import iocount
from drill.grader.expect import Call, array, close, fail, matches, note, show

from ._attention_reference import (
    WATCHED_VALUES_HINT,
    PEAK_LIMIT_BYTES,
    long_attention,
    check_block_reads,
    check_reads_seen,
    near_ties,
    observed_call,
    pair,
    peak_bytes,
    quiet_call,
)
from ._block_mask_reference import attention, dense_mask, kinds_of, packed, tile_mask

O_ATOL, O_RTOL = 1e-9, 1e-9
L_ATOL, L_RTOL = 1e-9, 1e-12
PROBE = Path(__file__).with_name("_block_mask_probe.py")
# block_kinds' memory is measured at a length drawn from this range (a dense boolean mask is 16 to
# 64 MiB there, against a 12 MiB limit) and a drawn tile size, so no one size marks the measured call.
KINDS_MEMORY_SIZES, KINDS_MEMORY_TILES = (4096, 8192), (128, 136, 144)
KIND_WORDS = {0: "0 (empty: skip)", 1: "1 (partial: mask)", 2: "2 (full: no mask)"}


def _mask_words(window, causal) -> str:
    if window is not None:
        return f"window={window}"
    return "causal" if causal else "documents only"


# (q lengths or None for the same as kv, kv document lengths, window, causal, Br, Bc)
CASES = {
    "packed documents": [(None, [5, 17, 9, 33], None, False, 8, 8), (None, [13, 2, 30], None, False, 4, 16)],
    "documents, causal": [(None, [5, 17, 9, 33], None, True, 8, 8), (None, [40, 7, 21], None, True, 16, 8)],
    "sliding window": [(None, [70], 10, False, 8, 8), (None, [45], 1, False, 8, 4), (None, [30], 64, False, 8, 8),
                       (None, [50], 8, True, 8, 8), (None, [20], 0, False, 8, 8)],  # window=0: no key at all
    "documents and a window": [(None, [20, 40, 11], 16, False, 8, 16), (None, [33, 33], 5, True, 4, 4)],
    "sq != sk (queries are the last rows)": [(20, [30, 25], None, True, 8, 8), (13, [30, 25], 7, False, 4, 8),
                                             (9, [6, 40], None, False, 4, 4)],
    "one document, ragged tiles": [(None, [37], None, False, 16, 16), (37, [45], None, False, 16, 16),
                                   (None, [37], None, True, 16, 8)],
}


def _docs(q_len, kv_lengths):
    kv_doc = packed(kv_lengths)
    q_doc = kv_doc if q_len is None else kv_doc[-q_len:]
    return q_doc.copy(), kv_doc.copy()


def _inputs(rng, sq, sk, d, spread=1.0):
    return (rng.normal(scale=spread, size=(sq, d)), rng.normal(size=(sk, d)), rng.normal(size=(sk, d)))


# --- block_kinds ---------------------------------------------------------------------------


def diagnose_kinds(q_doc, kv_doc, window, causal, Br, Bc, got) -> str:
    mask = dense_mask(q_doc, kv_doc, window, causal)
    want = kinds_of(mask, Br, Bc)
    candidates = [
        (kinds_of(mask, Br, Bc, padded=True),
         "a ragged last tile was judged as if it had Br×Bc pairs: the pairs it lacks are not invisible pairs; "
         "a tile is full when every pair it really holds is visible"),
        (np.where(want == 0, 0, 3 - want), "kinds 1 and 2 are swapped: 1 is partial (mask it), 2 is full (no mask)"),
        (kinds_of(dense_mask(q_doc, kv_doc, window, causal, align="top-left"), Br, Bc),
         "the causal bound is aligned top-left (j <= i); the contract aligns it bottom-right: j <= i + (sk - sq)"),
        (kinds_of(dense_mask(q_doc, kv_doc, None, False), Br, Bc),
         "only the documents were used: the causal bound and the window were ignored"),
        (kinds_of(dense_mask(q_doc, kv_doc, window, causal, docs=False), Br, Bc),
         "the documents were ignored: query i sees key j only if q_doc[i] == kv_doc[j]"),
    ]
    if window is not None:
        candidates += [
            (kinds_of(dense_mask(q_doc, kv_doc, window, causal, window_slack=1), Br, Bc),
             f"the window is one key too wide: keep 0 <= i' - j < window (window = {window} keys, the query's own "
             "included), not <= window"),
            (kinds_of(dense_mask(q_doc, kv_doc, window, causal, two_sided=True), Br, Bc),
             "the window was applied on both sides (|i' - j| < window): a window implies causal, so keys after "
             "the query (j > i') stay invisible"),
            (kinds_of(dense_mask(q_doc, kv_doc, None, True), Br, Bc), "the window was ignored: only causal was applied"),
        ]
    elif causal:
        candidates.append((kinds_of(dense_mask(q_doc, kv_doc, None, False), Br, Bc),
                           "causal=True was ignored"))
    for cand, hint in candidates:
        if cand.shape == got.shape and (cand == got).all() and not (cand == want).all():
            return hint
    bad = np.argwhere(got != want)
    if bad.size:
        i, j = (int(x) for x in bad[0])
        tile = mask[i * Br:(i + 1) * Br, j * Bc:(j + 1) * Bc]
        return (f"the first wrong tile is (i = {i}, j = {j}): rows {i * Br}..{i * Br + tile.shape[0] - 1}, keys "
                f"{j * Bc}..{j * Bc + tile.shape[1] - 1}, where {int(tile.sum())} of {tile.size} pairs are visible, so "
                f"its kind is {KIND_WORDS[int(want[i, j])]}, not {int(got[i, j])}")
    return ""


def kinds_array(result, call, shape) -> np.ndarray:
    got = array(result, call, shape=shape, what="kinds")
    if not np.issubdtype(result.dtype, np.integer):
        fail("kinds is not an integer array", called=str(call), got=f"dtype {result.dtype}",
             expected="an integer dtype (np.int64, np.int8, ...): kinds are the labels 0, 1, 2",
             hint="create kinds with np.zeros((Tr, Tc), dtype=np.int64), or convert with .astype(np.int64)")
    return got


def check_kinds(sub, q_doc, kv_doc, window, causal, Br, Bc):
    sq, sk = len(q_doc), len(kv_doc)
    call = Call("block_kinds", f"q_doc[{sq}]={show(q_doc, 4)}, kv_doc[{sk}], window={window}, causal={causal}, "
                               f"Br={Br}, Bc={Bc}")
    result = quiet_call(sub.block_kinds, call, q_doc.copy(), kv_doc.copy(), window, causal, Br, Bc)
    Tr, Tc = -(-sq // Br), -(-sk // Bc)
    if isinstance(result, np.ndarray) and result.shape != (Tr, Tc):
        fail("kinds has the wrong shape", called=str(call), got=f"shape {result.shape}",
             expected=f"shape ({Tr}, {Tc}): Tr = ceil(sq / Br) by Tc = ceil(sk / Bc)",
             hint="count the ragged last tiles too: ceil division, -(-sq // Br)")
    got = kinds_array(result, call, (Tr, Tc))
    want = kinds_of(dense_mask(q_doc, kv_doc, window, causal), Br, Bc)
    if not (got == want).all():
        fail("kinds differ from the dense mask's tiles", called=str(call),
             got=f"{got.astype(int).tolist() if got.size <= 40 else show(got.astype(int))}",
             expected=f"{want.tolist() if want.size <= 40 else show(want)}",
             hint=diagnose_kinds(q_doc, kv_doc, window, causal, Br, Bc, got))


@pytest.mark.parametrize("case", list(CASES), ids=list(CASES))
def test_kinds(sub, case):
    """block_kinds matches the dense mask tile by tile (0 empty, 1 partial, 2 full)"""
    for q_len, lengths, window, causal, Br, Bc in CASES[case]:
        q_doc, kv_doc = _docs(q_len, lengths)
        check_kinds(sub, q_doc, kv_doc, window, causal, Br, Bc)


def test_kinds_any_document_ids(sub, rng):
    """Document ids are labels, not positions: any integers, in any order, one id in separate runs"""
    lengths = [9, 14, 3, 22]
    kv_doc = packed(lengths, rng=rng, shuffle_ids=True)
    check_kinds(sub, kv_doc.copy(), kv_doc.copy(), None, True, 8, 8)
    check_kinds(sub, kv_doc.copy(), kv_doc.copy(), 6, False, 4, 8)
    # One id labelling two separate runs: its keys are not one range from its first to its last key.
    kv_doc = np.repeat(np.array([5, -2, 5, 9]), [8, 8, 8, 8]).astype(np.int64)
    check_kinds(sub, kv_doc.copy(), kv_doc.copy(), None, False, 8, 8)
    Q, K, V = _inputs(rng, 32, 32, 8)
    check_forward(sub, Q, K, V, kv_doc, kv_doc, Br=8, Bc=8)
    # One id at both ends of a tile's rows and keys with another id between them: the tile is
    # partial, though its first and last rows and keys all carry the same id.
    kv_doc = np.repeat(np.array([5, -2, 5, 9, 5, 7, 7]), [3, 2, 3, 8, 5, 6, 5]).astype(np.int64)
    check_kinds(sub, kv_doc.copy(), kv_doc.copy(), None, False, 8, 8)
    check_kinds(sub, kv_doc.copy(), kv_doc.copy(), None, True, 8, 8)
    check_kinds(sub, kv_doc[-19:].copy(), kv_doc.copy(), 12, False, 8, 8)
    check_forward(sub, Q, K, V, kv_doc, kv_doc, Br=8, Bc=8)
    check_forward(sub, Q[-19:], K, V, kv_doc[-19:], kv_doc, window=12, Br=8, Bc=8)
    # Ids far apart that agree in their low 32 bits (int64 labels: no narrower type may hold them).
    kv_doc = np.repeat(np.array([7, 7 + 2**32, -2**40, 7 - 2**33, 2**62]), [10, 12, 9, 9, 8]).astype(np.int64)
    check_kinds(sub, kv_doc.copy(), kv_doc.copy(), None, True, 8, 8)
    Q, K, V = _inputs(rng, 48, 48, 8)
    check_forward(sub, Q, K, V, kv_doc, kv_doc, Br=8, Bc=8)


@pytest.mark.peak_memory
def test_kinds_memory(sub, rng):
    """block_kinds at sq = sk = 4096 to 8192 never builds an sq×sk mask (peak memory measured)"""
    B = int(rng.choice(KINDS_MEMORY_TILES))
    n = B * int(rng.integers(-(-KINDS_MEMORY_SIZES[0] // B), KINDS_MEMORY_SIZES[1] // B + 1))
    # Five documents of drawn lengths, ending inside tiles: full, partial and empty tiles all occur.
    cuts = np.sort(rng.choice(np.arange(1, n // B), 4, replace=False)) * B + rng.integers(0, B, size=4)
    kv_doc = packed(np.diff(np.concatenate([[0], cuts, [n]])))
    # Documents only, causal and a window: block_kinds is measured under every kind of mask (the
    # forward may judge its tiles elsewhere, so its own memory checks say nothing about this one).
    for window, causal in ((None, False), (None, True), (300, False)):
        _check_kinds_memory(sub, kv_doc, window, causal, n, B)


def _check_kinds_memory(sub, kv_doc, window, causal, n, B):
    call = Call("block_kinds", f"q_doc, kv_doc [{n}] (5 documents), window={window}, causal={causal}, Br={B}, Bc={B}")
    peak, result = peak_bytes(quiet_call, sub.block_kinds, call, kv_doc.copy(), kv_doc.copy(), window, causal, B, B)
    if peak > 12 * 2**20:
        fail(f"block_kinds held {peak / 2**20:.1f} MiB at its peak: that is an sq×sk mask, not tiles",
             called=str(call), got=f"peak memory {peak / 2**20:.1f} MiB during the call",
             expected=f"under 12 MiB (a {n}×{n} boolean mask is {n * n / 2**20:.0f} MiB)",
             hint="judge each [Br, Bc] tile from its own rows and columns (q_doc[rows][:, None] == kv_doc[cols]), "
                  "or from document boundaries, never from a mask of the whole sequence")
    note(f"peak memory of block_kinds with window={window}, causal={causal}: {peak / 2**20:.1f} MiB (limit 12 MiB; "
         f"a {n}×{n} boolean mask is "
         f"{n * n / 2**20:.0f} MiB)")
    got = kinds_array(result, call, (n // B, n // B))
    # Every tile, one strip of B query rows at a time (a strip's mask is B×n here, never n×n).
    want = np.zeros((n // B, n // B), dtype=np.int64)
    for i in range(0, n, B):
        # Strip i sees keys up to i + B - 1 at most when causal (the strip is the last rows of a query
        # over kv_doc[:i + B], the bottom-right bound keeps absolute positions); later tiles stay 0.
        keys = n if not causal and window is None else i + B
        want[i // B, :keys // B] = kinds_of(dense_mask(kv_doc[i:i + B], kv_doc[:keys], window, causal), B, B)
    close(got, want, call, atol=0, what="kinds", hint="memory is fine but the kinds are wrong; the other checks "
                                                      "name the mistake")


# --- masked_flash_forward ------------------------------------------------------------------


def call_forward(sub, Q, K, V, q_doc, kv_doc, **kw):
    args = (f"Q[{Q.shape[0]}x{Q.shape[1]}], K, V[{K.shape[0]}x{K.shape[1]}], q_doc={show(q_doc, 4)}, "
            f"kv_doc[{len(kv_doc)}]" + "".join(f", {k}={v}" for k, v in kw.items()))
    call = Call("masked_flash_forward", args)
    result = quiet_call(sub.masked_flash_forward, call, Q.copy(), K.copy(), V.copy(), q_doc.copy(), kv_doc.copy(), **kw)
    O, L = pair(result, call, "O, L", ((Q.shape[0], V.shape[1]), (Q.shape[0],)))
    return call, O, L


def diagnose_forward(Q, K, V, q_doc, kv_doc, kw, got, index) -> str:
    window, causal = kw.get("window"), kw.get("causal", False)
    Br, Bc, scale = kw.get("Br", 16), kw.get("Bc", 16), kw.get("scale")
    mask = dense_mask(q_doc, kv_doc, window, causal)
    kinds = kinds_of(mask, Br, Bc)
    d = Q.shape[1]
    masks = [
        (tile_mask(mask, kinds, Br, Bc, partial_as=2),
         "partial tiles (kind 1) were used without their mask: only full tiles may skip it"),
        (tile_mask(mask, kinds, Br, Bc, partial_as=0),
         "partial tiles (kind 1) were skipped: only empty tiles (kind 0) may be; mask the partial ones"),
        (tile_mask(mask, kinds, Br, Bc, full_as=0), "full tiles (kind 2) were skipped: they hold visible pairs"),
        (dense_mask(q_doc, kv_doc, window, causal, docs=False), "the documents were ignored"),
        (dense_mask(q_doc, kv_doc, window, causal, align="top-left"),
         "the causal bound is aligned top-left; the contract aligns it bottom-right: j <= i + (sk - sq)"),
        (dense_mask(q_doc, kv_doc, None, False), "only the documents were used: the causal bound and the window "
                                                 "were ignored"),
    ]
    if window is not None:
        masks += [(dense_mask(q_doc, kv_doc, window, causal, window_slack=1),
                   "the window is one key too wide: 0 <= i' - j < window, not <= window"),
                  (dense_mask(q_doc, kv_doc, window, causal, two_sided=True),
                   "the window was applied on both sides: a window implies causal")]
    scales = [(1.0, "the scores were not scaled (1/√d when scale is None)"), (1.0 / d, "the default scale is 1/√d, "
                                                                                    "not 1/d")]
    with np.errstate(all="ignore"):
        for m, hint in masks:
            if not (m == mask).all() and matches(got, attention(Q, K, V, m, scale)[index], atol=1e-8):
                return hint
        if scale is None:
            for s, hint in scales:
                if matches(got, attention(Q, K, V, mask, s)[index], atol=1e-8):
                    return hint
        elif matches(got, attention(Q, K, V, mask, None)[index], atol=1e-8):
            return "the scale argument was ignored"
    return ""


def check_forward(sub, Q, K, V, q_doc, kv_doc, *, o_atol=O_ATOL, l_atol=L_ATOL, **kw):
    call, O, L = call_forward(sub, Q, K, V, q_doc, kv_doc, **kw)
    mask = dense_mask(q_doc, kv_doc, kw.get("window"), kw.get("causal", False))
    O_ref, L_ref = attention(Q, K, V, mask, kw.get("scale"))
    nan_hint = ("NaN: a row that has seen no visible key yet computed exp(-inf - (-inf)); shift such rows by 0 "
                "instead of their -inf max, and give rows with l = 0 O = 0 and L = -inf")
    for got, want, what, atol, rtol, index in ((O, O_ref, "O", o_atol, O_RTOL, 0),
                                               (L, L_ref, "L (the logsumexp of each row)", l_atol, L_RTOL, 1)):
        if np.isnan(got).any() or not matches(got, want, atol=atol * 100):
            hint = "" if np.isnan(got).any() else diagnose_forward(Q, K, V, q_doc, kv_doc, kw, got, index)
            close(got, want, call, atol=atol, rtol=rtol, what=what, hint=hint, nan_hint=nan_hint)
        close(got, want, call, atol=atol, rtol=rtol, what=what)
    return O, L


@pytest.mark.parametrize("case", list(CASES), ids=list(CASES))
def test_forward(sub, rng, case):
    """masked_flash_forward matches dense masked attention"""
    for q_len, lengths, window, causal, Br, Bc in CASES[case]:
        q_doc, kv_doc = _docs(q_len, lengths)
        Q, K, V = _inputs(rng, len(q_doc), len(kv_doc), 8, spread=1.5)
        check_forward(sub, Q, K, V, q_doc, kv_doc, window=window, causal=causal, Br=Br, Bc=Bc)


def test_default_blocks(sub, rng):
    """The defaults (window=None, causal=False, Br = Bc = 16) work when they are not passed"""
    kv_doc = packed([30, 11, 23])
    Q, K, V = _inputs(rng, 64, 64, 8)
    check_forward(sub, Q, K, V, kv_doc, kv_doc)


def test_rows_without_keys(sub, rng):
    """Rows that see no key (a document absent from the keys, or before the first key) give O = 0, L = -inf"""
    kv_doc = packed([20, 15])
    q_doc = np.concatenate([packed([10, 8]), np.full(6, 99)])  # 99: padding that matches no key
    Q, K, V = _inputs(rng, len(q_doc), len(kv_doc), 8)
    check_forward(sub, Q, K, V, q_doc, kv_doc, Br=8, Bc=8)
    kv_doc = packed([12])
    q_doc = packed([30])  # sq > sk, causal: the first 18 rows come before every key
    Q, K, V = _inputs(rng, 30, 12, 4)
    check_forward(sub, Q, K, V, q_doc, kv_doc, causal=True, Br=8, Bc=4)
    check_forward(sub, Q, K, V, q_doc, kv_doc, window=3, Br=4, Bc=8)
    # block_kinds itself with sq > sk (i' = i + sk - sq is negative for the first rows): the forward
    # may judge its tiles without calling it, so it is asked directly.
    check_kinds(sub, q_doc, kv_doc, None, True, 8, 4)
    check_kinds(sub, q_doc, kv_doc, 3, False, 4, 8)
    check_kinds(sub, packed([6, 20]), packed([5, 9]), 9, True, 4, 4)


def test_explicit_scale(sub, rng):
    """An explicit scale replaces 1/√d, 0.0 and negative ones included"""
    kv_doc = packed([17, 23])
    Q, K, V = _inputs(rng, 40, 40, 8)
    for scale in (0.37, 2.0, 0.0, -0.6):
        check_forward(sub, Q, K, V, kv_doc, kv_doc, causal=True, Br=8, Bc=8, scale=scale)


def test_large_logits(sub, rng):
    """Scores of magnitude 1e3 to 1e4 neither overflow nor lose accuracy"""
    kv_doc = packed([25, 19, 20])
    Q, K, V = _inputs(rng, 64, 64, 8)
    Q = Q / np.linalg.norm(Q, axis=1, keepdims=True) * rng.uniform(1e3, 1e4, size=(64, 1)) / 3.0
    check_forward(sub, Q, K, V, kv_doc, kv_doc, window=12, Br=8, Bc=16, o_atol=1e-7, l_atol=1e-7)
    # Rows that large are almost one-hot, which hides a wrong factor or an extra key.
    Q, K = near_ties(rng, 64, 64, 8)
    check_forward(sub, Q, K, V, kv_doc, kv_doc, window=12, Br=8, Bc=16, o_atol=1e-7, l_atol=1e-7)
    # Every score of every row far below zero (under -1500): a running max started at 0 rather
    # than -inf makes each exponential underflow, and the rows come out empty.
    u = rng.standard_normal(8)
    u /= np.linalg.norm(u)
    K = -rng.uniform(0.5, 1.5, size=(64, 1)) * u + 0.01 * rng.standard_normal((64, 8))
    Q = u * rng.uniform(1e4, 3e4, size=(64, 1))
    check_forward(sub, Q, K, V, kv_doc, kv_doc, causal=True, Br=8, Bc=16, o_atol=1e-7, l_atol=1e-7)


# The forward's memory is measured at a drawn length and tile size, with drawn documents: at any
# length here a boolean sq×sk mask (13 MiB and more) and a float64 score matrix stand above the limit.
FORWARD_MEMORY_SIZES, FORWARD_MEMORY_TILES = (3712, 4352), (128, 136, 144)


@pytest.mark.peak_memory
def test_forward_memory(sub, rng):
    """Peak memory at sq = sk of 3712 to 4352 (tiles of 128 to 144) stays far below one score matrix or dense mask"""
    n, d, B = int(rng.integers(*FORWARD_MEMORY_SIZES)), 16, int(rng.choice(FORWARD_MEMORY_TILES))
    kv_doc = packed(np.diff(np.concatenate([[0], np.sort(rng.choice(np.arange(1, n), 3, replace=False)), [n]])))
    Q, K, V = _inputs(rng, n, n, d)
    # Causal, then documents only (an encoder over packed documents): a shortcut may hide in either path.
    # Explicit scales: the tiled path must not depend on scale=None.
    for causal, scale in ((True, 0.3), (False, -0.4)):
        _check_forward_memory(sub, Q, K, V, kv_doc, causal, scale, B)


def _check_forward_memory(sub, Q, K, V, kv_doc, causal, scale, B):
    n, d = Q.shape
    call = Call("masked_flash_forward", f"Q, K, V [{n}x{d}], 4 documents, causal={causal}, Br={B}, Bc={B}, "
                                        f"scale={scale}")
    peak, result = peak_bytes(quiet_call, sub.masked_flash_forward, call, Q.copy(), K.copy(), V.copy(),
                              kv_doc.copy(), kv_doc.copy(), causal=causal, Br=B, Bc=B, scale=scale)
    sizes = f"one {n}×{n} float64 score matrix is {n * n * 8 / 2**20:.0f} MiB, a boolean mask {n * n / 2**20:.0f} MiB"
    if peak > PEAK_LIMIT_BYTES:
        fail(f"masked_flash_forward held {peak / 2**20:.1f} MiB at its peak: that is an sq×sk array, not tiles",
             called=str(call), got=f"peak memory {peak / 2**20:.1f} MiB during the call",
             expected=f"under {PEAK_LIMIT_BYTES / 2**20:.0f} MiB ({sizes})",
             hint="a full score matrix (or mask) was materialised: compute S, P and the mask one [Br, Bc] tile at a "
                  "time inside the loops")
    # Each note names its call: equal notes are shown once, so two calls with the same peak would merge.
    note(f"peak memory during the call with causal={causal}: {peak / 2**20:.1f} MiB (limit "
         f"{PEAK_LIMIT_BYTES / 2**20:.0f} MiB; {sizes})")
    O, L = pair(result, call, "O, L", ((n, d), (n,)))
    # Every row, 512 at a time: code right on most rows and wrong on a few is still wrong.
    parts = [attention(Q[i:i + 512], K, V, dense_mask(kv_doc[i:i + 512], kv_doc, None, False)
                       & ((np.arange(n)[None, :] <= np.arange(i, min(i + 512, n))[:, None]) | (not causal)), scale)
             for i in range(0, n, 512)]
    hint = "memory is fine, but the result is wrong at this size; the other checks name the mistake"
    close(O, np.concatenate([o for o, _ in parts]), call, atol=O_ATOL, rtol=O_RTOL, what="O", hint=hint)
    close(L, np.concatenate([lse for _, lse in parts]), call, atol=L_ATOL, rtol=L_RTOL, what="L", hint=hint)


# LONG_SQ = Br query rows against about 2^21 keys of width 1 (drawn, so that no one length marks these
# calls), a sliding window of 4096: one row of scores over all keys is 14 MiB or more (about as large as K
# itself), the whole sq×sk mask 28 MiB even as booleans, while a live tile is 0.5 MiB. The limit is the
# inputs plus LONG_SLACK_BYTES.
LONG_SQ, LONG_SK_RANGE, LONG_WINDOW, LONG_BC, LONG_SLACK_BYTES = 16, (2**21 - 2**18, 2**21), 4096, 4096, 8 * 2**20


@pytest.mark.peak_memory
def test_forward_memory_long_keys(sub, rng):
    """Peak memory with 16 query rows against about 2^21 keys in a sliding window stays at tiles"""
    sk = int(rng.integers(LONG_SK_RANGE[0], LONG_SK_RANGE[1] + 1))
    Q, K, V = _inputs(rng, LONG_SQ, sk, 1)
    q_doc, kv_doc = np.zeros(LONG_SQ, dtype=np.int64), np.zeros(sk, dtype=np.int64)
    kw = dict(window=LONG_WINDOW, causal=True, Br=16, Bc=LONG_BC)
    call = Call("masked_flash_forward", f"Q [{LONG_SQ}x1], K, V [{sk}x1], one document, window={LONG_WINDOW}, "
                                        f"causal=True, Br=16, Bc={LONG_BC}")
    held = Q.nbytes + K.nbytes + V.nbytes + q_doc.nbytes + kv_doc.nbytes
    peak, result = peak_bytes(quiet_call, sub.masked_flash_forward, call, Q.copy(), K.copy(), V.copy(), q_doc.copy(),
                              kv_doc.copy(), **kw)
    if peak > held + LONG_SLACK_BYTES:
        fail(f"masked_flash_forward held {(peak - held) / 2**20:.1f} MiB beyond its inputs on a long K",
             called=str(call), got=f"peak memory {peak / 2**20:.1f} MiB during the call",
             expected=(f"under {(held + LONG_SLACK_BYTES) / 2**20:.0f} MiB: the inputs ({held / 2**20:.0f} MiB) and "
                       f"{LONG_SLACK_BYTES / 2**20:.0f} MiB for tiles; one row of scores over all {sk:,} keys is "
                       f"{sk * 8 / 2**20:.0f} MiB, the {LONG_SQ}×{sk:,} boolean mask "
                       f"{LONG_SQ * sk / 2**20:.0f} MiB"),
             hint=("a row of scores (or of mask values) over all keys was built, then masked: only the tiles of "
                   "kind 1 and 2 may be computed, each from its own rows and keys"))
    O, L = pair(result, call, "O, L", ((LONG_SQ, 1), (LONG_SQ,)))
    live = slice(sk - LONG_WINDOW - LONG_SQ, sk)  # the keys any row's window reaches (and a few more)
    O_ref, L_ref = attention(Q, K[live], V[live], dense_mask(q_doc, kv_doc[live], LONG_WINDOW, True))
    close(O, O_ref, call, atol=1e-8, rtol=1e-8, what="O", hint="memory is fine, but O is wrong on a long K")
    close(L, L_ref, call, atol=1e-8, rtol=1e-12, what="L", hint="memory is fine, but L is wrong on a long K")


@pytest.mark.peak_memory
def test_forward_memory_long_keys_all_live(sub, rng):
    """Peak memory with 16 query rows against about 2^21 keys that are nearly all visible stays at tiles"""
    # Every tile but the first is full here, so skipping empty tiles saves nothing: code that gathers
    # the live tiles of a query block into one strip of scores holds a row over all keys.
    sk = int(rng.integers(LONG_SK_RANGE[0], LONG_SK_RANGE[1] + 1))
    Q, K, V = _inputs(rng, LONG_SQ, sk, 1)
    first = LONG_BC // 2  # the keys of another document: the first tile is partial
    q_doc = np.full(LONG_SQ, 3, dtype=np.int64)
    kv_doc = np.full(sk, 3, dtype=np.int64)
    kv_doc[:first] = 4
    kw = dict(Br=16, Bc=LONG_BC, scale=0.7)
    call = Call("masked_flash_forward", f"Q [{LONG_SQ}x1], K, V [{sk}x1], two documents (the first "
                                        f"{first} keys are another's), Br=16, Bc={LONG_BC}, scale=0.7")
    held = Q.nbytes + K.nbytes + V.nbytes + q_doc.nbytes + kv_doc.nbytes
    peak, result = peak_bytes(quiet_call, sub.masked_flash_forward, call, Q.copy(), K.copy(), V.copy(), q_doc.copy(),
                              kv_doc.copy(), **kw)
    if peak > held + LONG_SLACK_BYTES:
        fail(f"masked_flash_forward held {(peak - held) / 2**20:.1f} MiB beyond its inputs on a long K",
             called=str(call), got=f"peak memory {peak / 2**20:.1f} MiB during the call",
             expected=(f"under {(held + LONG_SLACK_BYTES) / 2**20:.0f} MiB: the inputs ({held / 2**20:.0f} MiB) and "
                       f"{LONG_SLACK_BYTES / 2**20:.0f} MiB for tiles; one row of scores over all {sk:,} keys is "
                       f"{sk * 8 / 2**20:.0f} MiB"),
             hint=("the scores of a query block against all its visible keys were held at once (the live tiles "
                   "gathered into one strip): visit the tiles of kind 1 and 2 one at a time and combine them with "
                   "the online softmax, so only one [Br, Bc] tile of scores exists at a time"))
    O, L = pair(result, call, "O, L", ((LONG_SQ, 1), (LONG_SQ,)))
    O_ref, L_ref = long_attention(Q, K[first:], V[first:], 0.7)
    close(O, O_ref, call, atol=1e-8, rtol=1e-8, what="O", hint="memory is fine, but O is wrong on a long K")
    close(L, L_ref, call, atol=1e-8, rtol=1e-12, what="L", hint="memory is fine, but L is wrong on a long K")


@pytest.mark.observed
def test_inputs_untouched(sub, rng):
    """Q, K, V, q_doc and kv_doc are not modified"""
    kv_doc = packed([9, 14, 17])
    q_doc = kv_doc[-29:].copy()
    Q, K, V = _inputs(rng, 29, 40, 4)
    # Every kind of mask, with the default scale and a given one: a write into the inputs may hide in
    # any one code path (the default scale folded into Q, a window's own branch, ...).
    for opts in (dict(window=None, causal=True, Br=8, Bc=8, scale=0.6), dict(window=None, causal=False, Br=8, Bc=4),
                 dict(window=6, causal=False, Br=4, Bc=8, scale=-0.7)):
        _check_untouched(sub, Q, K, V, q_doc, kv_doc, opts)
        _check_untouched(sub, Q[-20:], K[-20:], V[-20:], q_doc[-20:], kv_doc[-20:], opts)  # sq = sk


def _check_untouched(sub, Q, K, V, q_doc, kv_doc, opts):
    before = (Q.copy(), K.copy(), V.copy(), q_doc.copy(), kv_doc.copy())
    window, causal, Br, Bc = opts["window"], opts["causal"], opts["Br"], opts["Bc"]
    options = f"window={window}, causal={causal}, Br={Br}, Bc={Bc}"
    fkw = {k: v for k, v in opts.items() if k != "scale" or v is not None}
    for name, fn, args, kw in (
            ("block_kinds", sub.block_kinds, (q_doc, kv_doc, window, causal, Br, Bc), {}),
            ("masked_flash_forward", sub.masked_flash_forward, (Q, K, V, q_doc, kv_doc), fkw)):
        call = Call(name, (f"q_doc, kv_doc, {options}" if name == "block_kinds" else
                           f"Q [{Q.shape[0]}x{Q.shape[1]}], K, V [{K.shape[0]}x{K.shape[1]}], q_doc, kv_doc, " +
                           ", ".join(f"{k}={v}" for k, v in fkw.items())))
        after = observed_call(fn, call, *(a.copy() if isinstance(a, np.ndarray) else a for a in args),
                              return_args=True, **kw).args
        names = ("q_doc", "kv_doc") if name == "block_kinds" else ("Q", "K", "V", "q_doc", "kv_doc")
        then = before[3:] if name == "block_kinds" else before
        for what, now, was in zip(names, after, then):
            if not matches(np.asarray(now), was, atol=0.0):
                fail(f"{name} changed its input {what} in place", called=str(call),
                     hint=("a slice such as Q[r0:r1] is a view: q *= scale writes into the caller's Q; scale a "
                           "copy (q = Q[r0:r1] * scale) and never write into the arrays passed in"))


# --- how the work is done (observed inside your process) -----------------------------------

# Documents and windows whose tiles are mostly empty:
# (q length or None for sq = sk, kv lengths, window, causal, Br, Bc, scale).
# d = 5 differs from every tile size, so no [rows, d] array is taken for a tile.
SPARSE = {"documents only": (None, [24, 40, 16, 32], None, False, 8, 8, -0.5),
          "documents, causal": (None, [24, 40, 16, 32], None, True, 8, 8, None),
          "sliding window": (None, [96], 12, False, 8, 8, 0.3),
          "documents and a window": (None, [48, 48], 10, False, 8, 16, None),
          "sq < sk, documents, causal": (80, [20, 36, 40], None, True, 8, 8, None)}


def _observe(sub, rng, case):
    q_len, lengths, window, causal, Br, Bc, scale = SPARSE[case]
    q_doc, kv_doc = _docs(q_len, lengths)
    sq, sk = len(q_doc), len(kv_doc)
    Q, K, V = _inputs(rng, sq, sk, 5)
    kw = dict(window=window, causal=causal, Br=Br, Bc=Bc) | ({} if scale is None else dict(scale=scale))
    shapes = f"Q, K, V [{sk}x5]" if sq == sk else f"Q [{sq}x5] (the last rows), K, V [{sk}x5]"
    call = Call("masked_flash_forward", f"{shapes}, documents {lengths}, window={window}, causal={causal}, "
                                        f"Br={Br}, Bc={Bc}" + ("" if scale is None else f", scale={scale}"))
    sub.use_helper(PROBE)
    mask = dense_mask(q_doc, kv_doc, window, causal)
    kinds = kinds_of(mask, Br, Bc)
    outcome = observed_call(sub.masked_flash_forward, call, Q.copy(), K.copy(), V.copy(), q_doc.copy(),
                            kv_doc.copy(), record={0: "Q", 1: "K", 2: "V"},
                            helper={"module": PROBE.stem, "spec": {"tile": [Br, Bc]}}, **kw)
    O, L = pair(outcome.result, call, "O, L", ((sq, 5), (sq,)))
    O_ref, _ = attention(Q, K, V, mask, scale)
    close(O, O_ref, call, atol=O_ATOL, rtol=O_RTOL, what="O", hint="the other checks name the mistake",
          nan_hint=WATCHED_VALUES_HINT)
    return call, (sq, sk), kinds, outcome


@pytest.mark.observed
@pytest.mark.parametrize("case", list(SPARSE), ids=list(SPARSE))
def test_skips_empty_tiles(sub, rng, case):
    """No score tile is computed for an empty block (seen in the rows of Q and K read)"""
    call, (sq, sk), kinds, outcome = _observe(sub, rng, case)
    Br, Bc = SPARSE[case][4:6]
    reads, truncated = iocount.summarize(outcome.reads, {"Q": sq, "K": sk, "V": sk})
    # Every row belongs to some non-empty tile here, so all of Q, K and V is read through the arrays
    # passed in, in blocks: rows read through a converted copy (np.asarray) or whole are not counted.
    check_reads_seen(call, reads, truncated)
    check_block_reads(call, reads, {"Q": (Br, "Br"), "K": (Bc, "Bc"), "V": (Bc, "Bc")})
    heights = np.array([min(Br, sq - i * Br) for i in range(kinds.shape[0])])
    widths = np.array([min(Bc, sk - j * Bc) for j in range(kinds.shape[1])])
    live = kinds > 0
    k_needed = int((live * widths[None, :]).sum())  # K rows read when Q blocks are outside
    q_needed = int((live * heights[:, None]).sum())  # Q rows read when K/V blocks are outside
    q_rows, k_rows = reads["Q"].rows, reads["K"].rows
    q_outside = k_rows <= k_needed and q_rows <= max(sq, q_needed)
    kv_outside = q_rows <= q_needed and k_rows <= max(sk, k_needed)
    if q_outside or kv_outside:
        return
    empty = int((kinds == 0).sum())
    fail(f"the inputs were read as if empty tiles were computed too ({empty} of {kinds.size} tiles are empty) "
         "(observed)", called=str(call),
         got=f"Q rows read {q_rows}, K rows read {k_rows}",
         expected=(f"K rows at most {k_needed} (the widths of the non-empty tiles, Q blocks outside) or Q rows at "
                   f"most {q_needed} (K/V blocks outside)"),
         hint=("every (query block, key block) pair was visited and the mask applied afterwards: loop only over "
               "the key blocks whose kind is not 0 (np.flatnonzero(kinds[i])), so an empty tile costs no load and "
               "no matmul" if k_rows < sk * kinds.shape[0] + 1 else
               "K or Q was read whole (Q @ K.T, K * scale, np.max(K)) or more than once per tile: slice the blocks of "
               "the non-empty tiles from the arrays you were given"))


# Blocks that no tile uses: Q block 3 (document 5) sees no key, and K/V blocks 0, 1 (document 9) and
# 5 (document 7) meet no query. Either loop order must reload its inner blocks (104 rows of each
# of Q and K are needed by the live tiles, against 48 and 64 rows in all).
DEAD_Q_DOC = np.repeat(np.array([1, 5, 2]), [24, 8, 16]).astype(np.int64)
DEAD_KV_DOC = np.repeat(np.array([9, 1, 7, 2]), [16, 24, 8, 16]).astype(np.int64)


def _rows_read(log, name, length) -> np.ndarray:
    """[length] bool: the rows of one recorded input that any access reached (an elementwise pass: all)."""
    seen = np.zeros(length, dtype=bool)
    for entry in log or []:
        if isinstance(entry, list) and len(entry) in (4, 5) and entry[0] == name:
            start, stop = entry[1], entry[2]
            if isinstance(start, int) and isinstance(stop, int):
                seen[max(0, start):max(0, min(length, stop))] = True
    return seen


@pytest.mark.observed
def test_dead_blocks_not_loaded(sub, rng):
    """The inner loop loads only the blocks of non-empty tiles (blocks no tile uses are never read)"""
    q_doc, kv_doc, Br, Bc = DEAD_Q_DOC, DEAD_KV_DOC, 8, 8
    sq, sk = len(q_doc), len(kv_doc)
    Q, K, V = _inputs(rng, sq, sk, 5)
    call = Call("masked_flash_forward", f"Q [{sq}x5] (documents 1, 5, 2), K, V [{sk}x5] (documents 9, 1, 7, 2), "
                                        f"Br={Br}, Bc={Bc}, scale=0.4")
    sub.use_helper(PROBE)
    mask = dense_mask(q_doc, kv_doc)
    kinds = kinds_of(mask, Br, Bc)
    outcome = observed_call(sub.masked_flash_forward, call, Q.copy(), K.copy(), V.copy(), q_doc.copy(),
                            kv_doc.copy(), record={0: "Q", 1: "K", 2: "V"},
                            helper={"module": PROBE.stem, "spec": {"tile": [Br, Bc]}}, Br=Br, Bc=Bc, scale=0.4)
    O, _ = pair(outcome.result, call, "O, L", ((sq, 5), (sq,)))
    close(O, attention(Q, K, V, mask, 0.4)[0], call, atol=O_ATOL, rtol=O_RTOL, what="O",
          hint="the other checks name the mistake", nan_hint=WATCHED_VALUES_HINT)
    reads, truncated = iocount.summarize(outcome.reads, {"Q": sq, "K": sk, "V": sk})
    if truncated:
        fail("your code made more than 200,000 separate reads of its inputs", called=str(call),
             hint="read blocks of rows (K[j:j + Bc]), not single elements")
    dead_q = np.repeat(~kinds.any(axis=1), Br)[:sq]
    dead_k = np.repeat(~kinds.any(axis=0), Bc)[:sk]
    # The array read only once belongs to the outer loop; the other one's blocks are loaded tile by
    # tile, and a block that no non-empty tile uses must never be. Read once on both sides means
    # blocks sliced ahead of the loops: then dead blocks may be read on one side at most.
    once = {name: reads[name].rows <= reads[name].length for name in ("Q", "K")}
    wasted = {"Q": int((_rows_read(outcome.reads, "Q", sq) & dead_q).sum()),
              "K": int((_rows_read(outcome.reads, "K", sk) & dead_k).sum()),
              "V": int((_rows_read(outcome.reads, "V", sk) & dead_k).sum())}
    if once["Q"] and once["K"]:
        inner = ("K", "V") if wasted["Q"] and (wasted["K"] or wasted["V"]) else ()
        outer = "Q (and K: blocks taken ahead of the loops)"
    elif once["Q"]:
        inner, outer = ("K", "V"), "Q"
    elif once["K"]:
        inner, outer = ("Q",), "K"
    else:
        inner, outer = (), ""
    for name in inner:
        if wasted[name]:
            fail(f"{wasted[name]} rows of {name} were read from blocks that no non-empty tile uses (observed)",
                 called=str(call),
                 got=f"{outer} read once; {wasted[name]} rows of {name} read in blocks whose tiles are all empty",
                 expected=f"no row of those blocks of {name} read: kinds = {kinds.tolist()}",
                 hint=("the tiles were computed from blocks sliced ahead of the loop, empty ones too: loop only "
                       "over the tiles whose kind is not 0 (np.flatnonzero(kinds[i])) and slice each block "
                       "when its tile is computed; an empty tile costs no load and no matmul"))


@pytest.mark.observed
@pytest.mark.parametrize("case", list(SPARSE), ids=list(SPARSE))
def test_full_tiles_unmasked(sub, rng, case):
    """No mask is applied to a full tile (np.where on a score tile whose pairs are all visible)"""
    call, _, kinds, outcome = _observe(sub, rng, case)
    masked_full = outcome.extra.get("all_visible", 0)
    if not isinstance(masked_full, int) or masked_full <= 0:
        return
    full = int((kinds == 2).sum())
    fail(f"a mask was applied {masked_full} times with every pair of the tile visible (observed)", called=str(call),
         got=f"np.where masking no pair (an all-True mask, or a -inf fill no pair takes) on {masked_full} score tiles",
         expected=f"masks on partial tiles (kind 1) only; the {full} full tiles (kind 2) use their scores as they are",
         hint=("the mask was built and applied for every tile that is not empty: check the tile's kind first, "
               "and skip the mask (and building it) when the kind is 2; that is what makes full tiles as cheap as "
               "unmasked attention. A guard such as np.where(np.isfinite(s), np.exp(s - m), 0) counts too: a full "
               "tile has no masked score, so leave the guard to partial tiles"))
