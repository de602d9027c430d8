"""Hidden checks for 08_flash_decoding.py."""

from __future__ import annotations

import math

import numpy as np
import pytest

from drill import iocount
from drill.grader.expect import Call, close, fail, matches

from ._attention_reference import (
    WATCHED_VALUES_HINT,
    attention,
    check_reads_seen,
    observed_call,
    pair,
    peak_bytes,
    quiet_call,
)
from ._decode_reference import chunk_bounds, merge, partials

O_ATOL, O_RTOL = 1e-10, 1e-9
L_ATOL, L_RTOL = 1e-10, 1e-12

WARNING_HINTS = {
    "overflow": "exp overflowed: shift each chunk's scores by that chunk's own max before exponentiating",
    "invalid": ("NaN was computed (0/0, -inf - (-inf) or -inf · 0): a row that sees no key of a chunk was not "
                "guarded (shift it by 0, give it O = 0 and L = -inf), a chunk was shifted by something other than "
                "the max of its own visible scores, so its sum underflowed to 0 (take each chunk's max after the "
                "mask), or a -inf mask was multiplied by scale = 0 (scale the scores first, then mask)"),
    "divide": ("log(0) or a division by 0: a chunk's sum was 0, either because the row sees no key of the chunk "
               "(give it O = 0 and L = -inf directly) or because the shift was above every visible score (take "
               "the chunk's max over its visible keys, after the mask)"),
}


def _inputs(rng, sq, sk, d, spread=1.0):
    return rng.normal(scale=spread, size=(sq, d)), rng.normal(size=(sk, d)), rng.normal(size=(sk, d))


def _describe(q, K, num_splits, kw) -> str:
    args = [f"q[{q.shape[0]}x{q.shape[1]}]", f"K[{K.shape[0]}x{K.shape[1]}]", f"V[{K.shape[0]}x{K.shape[1]}]",
            f"num_splits={num_splits}"]
    return ", ".join(args + [f"{k}={v:.6g}" if isinstance(v, float) else f"{k}={v}" for k, v in kw.items()])


def _chunks_text(sk, num_splits) -> str:
    return ", ".join(f"[{a}:{b}]" if a < b else "empty" for a, b in chunk_bounds(sk, num_splits))


# --- calling the user's functions ---------------------------------------------------------


def call_partials(sub, q, K, V, num_splits, **kw):
    call = Call("split_kv_partials", _describe(q, K, num_splits, kw))
    result = quiet_call(sub.split_kv_partials, call, q.copy(), K.copy(), V.copy(), num_splits,
                        _hints=WARNING_HINTS, **kw)
    sq, d = q.shape[0], V.shape[1]
    return (call, *pair(result, call, "O_parts, L_parts", ((num_splits, sq, d), (num_splits, sq))))


def call_decode(sub, q, K, V, num_splits, **kw):
    call = Call("flash_decode", _describe(q, K, num_splits, kw))
    result = quiet_call(sub.flash_decode, call, q.copy(), K.copy(), V.copy(), num_splits,
                        _hints=WARNING_HINTS, **kw)
    return (call, *pair(result, call, "o, lse", ((q.shape[0], V.shape[1]), (q.shape[0],))))


# --- naming the mistake --------------------------------------------------------------------


def diagnose_partials(q, K, V, num_splits, kw, O, L) -> str:
    causal, scale = kw.get("causal", False), kw.get("scale")
    d = q.shape[1]
    sk = K.shape[0]
    variants = [
        (dict(normalise="global"),
         "every chunk was normalised by the global max and sum (a slice of the full softmax); each chunk "
         "must use its own max and sum, as a GPU block that sees only its own keys would"),
        (dict(rule="floor"),
         f"the chunks are sk // num_splits long with the rest in the last one; the contract cuts "
         f"ceil(sk / num_splits) keys per chunk: {_chunks_text(sk, num_splits)}"),
        (dict(rule="floor-drop"),
         "the chunks are sk // num_splits long and the keys after the last full chunk were never read; "
         "use ceil(sk / num_splits) keys per chunk, the last one shorter"),
        (dict(scale=1.0), "the scores were not scaled: S = q Kᵀ · scale, with scale = 1/√d when scale is None"),
    ]
    if scale is None:
        variants.append((dict(scale=1.0 / d), "the default scale is 1/√d, not 1/d"))
    else:
        variants.append((dict(scale=None), "the scale argument was ignored: use it when it is given"))
    if causal:
        variants += [
            (dict(align="top-left"),
             "the causal mask is aligned top-left (key j <= i); the queries' own keys are the LAST sq keys: "
             "row i sees keys j <= i + (sk - sq)"),
            (dict(causal=False), "causal=True was ignored: no mask was applied"),
        ]
    for change, hint in variants:
        args = {"causal": causal, "scale": scale, **change}
        O_c, L_c = partials(q, K, V, num_splits, args.pop("causal"), args.pop("scale"), **args)
        if matches(O, O_c, atol=1e-8) and (matches(L, L_c, atol=1e-8) or "global" not in hint):
            return hint
    O_ref, L_ref = partials(q, K, V, num_splits, causal, scale)
    if causal and scale is not None and scale <= 0:
        seen = L_ref > -np.inf  # (chunk, row) pairs that see a key: there, every key of the chunk counted
        O_all, L_all = partials(q, K, V, num_splits, False, scale)
        if seen.any() and matches(O[seen], O_all[seen], atol=1e-8) and matches(L[seen], L_all[seen], atol=1e-8):
            return (f"with scale = {scale:g} the hidden keys were counted: the mask was put on the raw scores, "
                    "then multiplied by the scale, and a large negative stand-in times 0 (or a negative scale) "
                    "is no longer the smallest score; scale first, then mask")
    with np.errstate(all="ignore"):
        if matches(L, L_ref / math.log(2.0), atol=1e-8):
            return "L is in base 2: use the natural log, L = m + np.log(l)"
        if matches(L, np.log(np.exp(L_ref - L_ref.max(axis=0))), atol=1e-8) or matches(
                L, np.broadcast_to(L_ref.max(axis=0), L.shape), atol=1e-8):
            return "L was shifted by the max over all chunks: each chunk's L is its own m_c + log(l_c)"
    bad = [c for c in range(num_splits)
           if not (matches(O[c], O_ref[c], atol=1e-8) and matches(L[c], L_ref[c], atol=1e-8))]
    if bad:
        a, b = chunk_bounds(sk, num_splits)[bad[0]]
        keys = f"keys {a}..{b - 1}" if a < b else "no keys (an empty chunk: O = 0, L = -inf)"
        return f"the first wrong chunk is c = {bad[0]}, which holds {keys}"
    return ""


def check_partials(sub, q, K, V, num_splits, *, atol=O_ATOL, hint=None, **kw):
    call, O, L = call_partials(sub, q, K, V, num_splits, **kw)
    O_ref, L_ref = partials(q, K, V, num_splits, kw.get("causal", False), kw.get("scale"))
    hint = hint or diagnose_partials(q, K, V, num_splits, kw, O, L)
    close(O, O_ref, call, atol=atol, rtol=O_RTOL, what="O_parts (each chunk's own attention)", hint=hint)
    close(L, L_ref, call, atol=atol, rtol=L_RTOL, what="L_parts (each chunk's own logsumexp)", hint=hint)
    return O, L


def diagnose_decode(sub, q, K, V, num_splits, kw, o, lse) -> str:
    """Name a merge mistake, or blame split_kv_partials when the merge of its output is right."""
    try:
        O_p, L_p = sub.split_kv_partials(q.copy(), K.copy(), V.copy(), num_splits, **kw)
        O_p, L_p = np.asarray(O_p, dtype=np.float64), np.asarray(L_p, dtype=np.float64)
    except Exception:  # noqa: BLE001 - split_kv_partials has its own checks
        return ""
    if O_p.shape != (num_splits, q.shape[0], V.shape[1]) or L_p.shape != (num_splits, q.shape[0]):
        return ""
    for how, hint in [
        ("mean", "the partial outputs were averaged: weight chunk c by its share of the mass, e^(L_c - lse)"),
        ("sum", "the partial outputs were added: weight chunk c by e^(L_c - lse), weights summing to 1"),
        ("unnormalised", "the weights e^(L_c - max L) were not divided by their sum"),
        ("max-lse", "lse is the largest chunk L: the merged lse is log Σ_c e^(L_c)"),
        ("stale", "the merge folds the chunks pair by pair but keeps the first chunk's L as the running total: "
                  "after each step carry the merged L forward (or merge all chunks at once)"),
    ]:
        O_m, L_m = merge(O_p, L_p, how)
        if matches(o, O_m, atol=1e-8) and matches(lse, L_m, atol=1e-8):
            return hint
    O_m, L_m = merge(O_p, L_p)
    if matches(o, O_m, atol=1e-8) and matches(lse, L_m, atol=1e-8):
        return "your merge of your own partials is right, so the mistake is in split_kv_partials (see its checks)"
    return ""


def check_decode(sub, q, K, V, num_splits, *, atol=O_ATOL, **kw):
    call, o, lse = call_decode(sub, q, K, V, num_splits, **kw)
    o_ref, lse_ref = attention(q, K, V, kw.get("causal", False), kw.get("scale"))
    ok = matches(o, o_ref, atol=atol * 10) and matches(lse, lse_ref, atol=atol * 10)
    hint = "" if ok else diagnose_decode(sub, q, K, V, num_splits, kw, o, lse)
    close(o, o_ref, call, atol=atol, rtol=O_RTOL, what="o (attention over the whole cache)", hint=hint)
    close(lse, lse_ref, call, atol=atol, rtol=L_RTOL, what="lse", hint=hint)
    return o, lse


# --- the checks ------------------------------------------------------------------------------


def test_partials_own_softmax(sub, rng):
    """Each chunk's partial is the softmax over its own keys alone, not a slice of the global one"""
    for sq, sk, d, n in [(1, 12, 4, 3), (3, 40, 8, 4), (2, 64, 8, 8)]:
        q, K, V = _inputs(rng, sq, sk, d, spread=2.0)
        check_partials(sub, q, K, V, n)


def test_uneven_last_chunk(sub, rng):
    """sk not a multiple of num_splits: chunks of ceil(sk / num_splits) keys, the last one shorter"""
    for sq, sk, d, n in [(1, 10, 4, 4), (2, 37, 8, 5), (1, 100, 4, 7)]:
        q, K, V = _inputs(rng, sq, sk, d)
        check_partials(sub, q, K, V, n)
        check_decode(sub, q, K, V, n)


def test_more_splits_than_keys(sub, rng):
    """More splits than keys: empty chunks give O = 0 and L = -inf, with no NaN and no warning"""
    for sq, sk, d, n in [(1, 3, 4, 5), (2, 6, 4, 5), (1, 1, 2, 4)]:
        q, K, V = _inputs(rng, sq, sk, d)
        check_partials(sub, q, K, V, n)
        check_decode(sub, q, K, V, n)
    # Causal with empty chunks: chunks [0:2], [2:4], [4:6] and two empty ones; row 0 sees none of the last.
    q, K, V = _inputs(rng, 3, 6, 4)
    check_partials(sub, q, K, V, 5, causal=True, scale=0.8)
    check_decode(sub, q, K, V, 5, causal=True, scale=0.8)


def test_one_query_row(sub, rng):
    """One query row (a decode step) over a long cache equals full attention"""
    for sk, d, n in [(257, 16, 8), (1000, 8, 16), (50, 4, 1)]:
        q, K, V = _inputs(rng, 1, sk, d, spread=1.5)
        check_decode(sub, q, K, V, n)


def test_several_query_rows(sub, rng):
    """Several query rows (speculative or batched tokens) equal full attention"""
    for sq, sk, d, n in [(4, 90, 8, 6), (7, 33, 4, 3)]:
        q, K, V = _inputs(rng, sq, sk, d, spread=1.5)
        check_decode(sub, q, K, V, n)


HIDDEN_HINT = ("a hidden key was not hidden: a finite stand-in (an added bias such as -1e9, or a score replaced by "
               "-1e30) loses to a hidden score far above it, or wins over visible scores far below it; put -inf "
               "on the hidden scores, np.where(visible, S, -np.inf), and guard the rows that see no key of the chunk")


def test_causal_own_keys_at_end(sub, rng):
    """Causal: the queries' own keys are the last sq keys of the cache (bottom-right)"""
    for sq, sk, d, n in [(4, 20, 8, 3), (6, 12, 4, 4), (3, 9, 4, 9)]:
        q, K, V = _inputs(rng, sq, sk, d)
        check_partials(sub, q, K, V, n, causal=True)
        check_decode(sub, q, K, V, n, causal=True)
    # A hidden key stays hidden at any score, however far from the visible scores (no finite stand-in).
    sq, sk, d, n = 3, 12, 4, 3
    u = rng.normal(size=d)
    u /= np.linalg.norm(u)
    q = 3.0 * u + 0.1 * rng.normal(size=(sq, d))
    # The last key (hidden from every row but the last) scores about 1e12 above the rest: an added -1e9 mask lets
    # it through. One such key only: two of them would differ by less than their rounding error.
    K = 0.1 * rng.normal(size=(sk, d))
    K[-1] += 1e12 * u
    V = rng.normal(size=(sk, d))
    check_partials(sub, q, K, V, n, causal=True, hint=HIDDEN_HINT)
    check_decode(sub, q, K, V, n, causal=True)
    # Every visible score lies near -1e31 (a large explicit scale on negative dot products): a hidden score
    # replaced by -1e30 is then the largest of its chunk.
    K = -u * (1.0 + rng.random(size=(sk, 1))) + 0.1 * rng.normal(size=(sk, d))
    K[-(sq - 1):] = 0.1 * rng.normal(size=(sq - 1, d))
    check_partials(sub, q, K, V, n, causal=True, scale=1e31, hint=HIDDEN_HINT)
    check_decode(sub, q, K, V, n, causal=True, scale=1e31)


def test_extreme_logits(sub, rng):
    """Scores of magnitude up to 1e4 neither overflow nor underflow a whole chunk, causal included"""
    sq, sk, d, n = 3, 48, 8, 4
    u = rng.normal(size=d)
    u /= np.linalg.norm(u)
    q = u * 3e3 + rng.normal(size=(sq, d))
    # Chunk c sits about 1000·c below chunk 0 in score: shifting every chunk by the global
    # max underflows whole chunks to 0, though each has a well-defined softmax of its own.
    K = 0.05 * rng.normal(size=(sk, d)) - np.repeat(np.arange(n), sk // n)[:, None] * u
    V = rng.normal(size=(sk, d))
    check_partials(sub, q, K, V, n, atol=1e-8)
    check_decode(sub, q, K, V, n, atol=1e-8)
    check_decode(sub, -q, K, V, n, atol=1e-8)  # now the last chunk dominates, scores near +3e3
    # Causal: the last two keys (the queries' own, hidden from the earlier rows) score about 1000 above
    # every other key of their chunk. A chunk max taken before the mask shifts the rows that may not see
    # them by those hidden scores, and all their visible terms underflow to 0.
    K = 0.05 * rng.normal(size=(24, d))
    K[-2:] += u
    V = rng.normal(size=(24, d))
    check_partials(sub, q, K, V, 3, atol=1e-8, causal=True)
    check_decode(sub, q, K, V, 3, atol=1e-8, causal=True)


def test_merge_order(sub, rng):
    """Swapping whole chunks of the cache leaves the merged result unchanged"""
    sq, sk, d, n = 2, 48, 8, 6
    q, K, V = _inputs(rng, sq, sk, d, spread=2.0)
    _, o, lse = call_decode(sub, q, K, V, n)
    size = sk // n
    for _ in range(3):
        order = rng.permutation(n)
        rows = np.concatenate([np.arange(c * size, (c + 1) * size) for c in order])
        call, o2, lse2 = call_decode(sub, q, K[rows], V[rows], n)
        hint = (f"the chunks merged in the order {order.tolist()} give another answer, but the merge is "
                "commutative: weight every chunk by e^(L_c - lse) with lse = log Σ e^(L_c), and never carry "
                "one chunk's L forward as the total")
        close(o2, o, f"{call} with whole chunks swapped", atol=1e-12, rtol=1e-10, what="o", hint=hint)
        close(lse2, lse, f"{call} with whole chunks swapped", atol=1e-12, rtol=1e-12, what="lse", hint=hint)


def test_explicit_scale(sub, rng):
    """An explicit scale replaces 1/√d, 0.0 and negative values included, with causal too"""
    q, K, V = _inputs(rng, 2, 30, 8)
    for scale in (0.37, 2.0, 0.0):
        check_partials(sub, q, K, V, 4, scale=scale)
        check_decode(sub, q, K, V, 4, scale=scale)
    # Causal with scale 0 (uniform weights over the visible keys) and a negative scale: a mask put on
    # the raw scores before scaling turns into 0 (or +inf) here, so hidden keys would count.
    q, K, V = _inputs(rng, 5, 17, 4)
    for scale in (0.0, -0.5):
        check_partials(sub, q, K, V, 4, causal=True, scale=scale)
        check_decode(sub, q, K, V, 4, causal=True, scale=scale)


@pytest.mark.observed
@pytest.mark.parametrize("name", ["split_kv_partials", "flash_decode"])
def test_inputs_untouched(sub, rng, name):
    """q, K and V are left as they were: the cache is read again at every later decode step (observed)"""
    # Every combination of causal and an explicit scale, and one query row (the decode step itself).
    for sq, n, kw in [(3, 4, {}), (3, 5, {"causal": True, "scale": 0.7}), (3, 4, {"causal": True}),
                      (3, 6, {"scale": 1.4}), (1, 4, {}), (1, 5, {"causal": True, "scale": 0.7})]:
        q, K, V = _inputs(rng, sq, 23, 4)
        call = Call(name, _describe(q, K, n, kw))
        after = observed_call(getattr(sub, name), call, q.copy(), K.copy(), V.copy(), n, _hints=WARNING_HINTS,
                              return_args=True, **kw).args
        for label, now, then in zip("qKV", after, (q, K, V)):
            if not (isinstance(now, np.ndarray) and now.shape == then.shape and matches(now, then, atol=0.0)):
                fail(f"{name} changed its input {label} in place", called=str(call),
                     hint=(f"{label} is the caller's array (K and V are the KV cache, read again at every later "
                           "decode step): scale a product, (q @ K[a:b].T) * scale, never q *= scale or "
                           "K[a:b] *= scale, which write through the slice into the cache"))


# Watched calls (query rows, cache length, keyword arguments): the plain case, then each argument a
# shortcut could hide behind (causal, an explicit scale, one query row: the decode step itself), then
# all; last, a cache that num_splits divides (95 = 5 · 19), where a chunk of sk // num_splits + 1 keys
# (an off-by-one ceil that happens to give 19 at sk = 91) crosses a boundary.
READ_CASES = [(3, 91, {}), (4, 91, {"causal": True}), (2, 91, {"scale": 0.61}), (1, 91, {}),
              (7, 91, {"causal": True, "scale": 1.3}), (3, 95, {})]


def _straddling_read(log, lengths: dict[str, int], chunk: int):
    """The first recorded read of rows that crosses a chunk boundary: (name, start, stop), or None."""
    for entry in log or []:
        if not (isinstance(entry, (list, tuple)) and len(entry) in (4, 5)):
            continue
        name, start, stop, rows = entry[:4]
        kind = entry[4] if len(entry) == 5 else "rows"
        if kind != "rows" or name not in lengths or rows == -1:
            continue
        if not (isinstance(start, int) and isinstance(stop, int)):
            continue
        start, stop = max(0, start), min(lengths[name], stop)
        if stop - start > 0 and start // chunk != (stop - 1) // chunk:
            return name, start, stop
    return None


@pytest.mark.observed
@pytest.mark.parametrize("name", ["split_kv_partials", "flash_decode"])
def test_reads_a_chunk_at_a_time(sub, rng, name):
    """K and V are read a chunk at a time, as split-KV thread blocks read them (observed)"""
    # Chunks of 19 keys (a prime) at sk = 91 and 95: a split into any other number of chunks reads
    # across one of the contract's chunk boundaries. d = 5 differs from every size here.
    d, n = 5, 5
    for sq, sk, kw in READ_CASES:
        chunk = -(-sk // n)
        q, K, V = _inputs(rng, sq, sk, d)
        call = Call(name, _describe(q, K, n, kw))
        outcome = observed_call(getattr(sub, name), call, q.copy(), K.copy(), V.copy(), n, record={1: "K", 2: "V"},
                                _hints=WARNING_HINTS, **kw)
        want = partials(q, K, V, n, kw.get("causal", False), kw.get("scale"))
        if name == "flash_decode":
            want = merge(*want)
            shapes, what = ((sq, d), (sq,)), "o, lse"
        else:
            shapes, what = ((n, sq, d), (n, sq)), "O_parts, L_parts"
        got = pair(outcome.result, call, what, shapes)
        for mine, ref, label in zip(got, want, what.split(", ")):
            close(mine, ref, call, atol=1e-9, rtol=1e-9, what=label, hint="the other checks name the mistake",
                  nan_hint=WATCHED_VALUES_HINT)
        reads, truncated = iocount.summarize(outcome.reads, {"K": sk, "V": sk})
        check_reads_seen(call, reads, truncated)
        for array_name, r in reads.items():
            # An elementwise pass (K * scale, -K) uses every chunk at once, and what it returns is a
            # plain copy whose later reads no log sees.
            if r.whole_passes:
                fail(f"{array_name} was used whole in an elementwise operation (observed)", called=str(call),
                     got=f"{r.whole_passes} elementwise pass{'es' if r.whole_passes > 1 else ''} over all "
                         f"{sk} rows of {array_name}",
                     expected=f"reads of one chunk at a time: {_chunks_text(sk, n)}",
                     hint=(f"an operation such as {array_name} * scale reads the whole cache in one go, which no "
                           "split-KV thread block does (and reads the cache twice per decode step): scale each "
                           "chunk's scores instead, (q @ K[start:stop].T) * scale"))
            if r.largest > chunk:
                fail(f"{array_name} was read {r.largest} rows at a time; a chunk is ceil(sk / num_splits) = {chunk} "
                     "keys (observed)", called=str(call), got=f"largest read of {array_name}: {r.largest} rows",
                     expected=f"reads of at most {chunk} rows: K[start:stop] and V[start:stop] for each chunk",
                     hint=("the scores or the output were computed over the whole cache and cut into chunks "
                           "afterwards, or flash_decode computed plain attention without the partials: give each "
                           "chunk only its own keys and values, then merge the partials by their logsumexp"
                           if r.largest >= sk else
                           f"slice each chunk's keys alone, K[c * {chunk}:(c + 1) * {chunk}]"))
        across = _straddling_read(outcome.reads, {"K": sk, "V": sk}, chunk)
        if across:
            array_name, a, b = across
            edge = (a // chunk + 1) * chunk
            fail(f"{array_name}[{a}:{b}] was read in one piece across the boundary at key {edge} between chunks "
                 f"{a // chunk} and {a // chunk + 1} (observed)", called=str(call),
                 got=f"a read of {array_name}[{a}:{b}]",
                 expected=(f"every read inside one of the num_splits = {n} chunks of ceil(sk / num_splits) = "
                           f"{chunk} keys: {_chunks_text(sk, n)} (a chunk may be read in smaller pieces)"),
                 hint=("the cache was split into another number of chunks than num_splits (or chunks of another "
                       "size): cut K and V into exactly num_splits chunks of ceil(sk / num_splits) keys, the ones "
                       "split_kv_partials returns, and merge those"))


# A long cache and a few query rows: one score row per query over the whole cache is megabytes,
# one chunk's rows are kilobytes. The inputs (K and V) count in the peak, so they are kept small
# (d = 2); the budget sits far below one [sq, sk] float64 array and far above a chunk's.
LONG_SK, LONG_SQ, LONG_D, LONG_SPLITS = 1 << 17, 32, 2, 128
FULL_ROW_BYTES = LONG_SQ * LONG_SK * 8  # 32 MiB: one [sq, sk] float64 array
VERY_LONG_SK, VERY_LONG_SLACK_BYTES = 1 << 21, 8 * 2**20
LONG_BUDGET_BYTES = 16 * 2**20  # inputs 4 MiB; a chunk's scores [32, 1024] are 256 KiB; FlashDecoding measured 7.6 MiB


@pytest.mark.peak_memory
def test_long_cache_memory(sub, rng):
    """Over a long cache no chunk holds the whole score row: peak memory stays far below one [sq, sk] array"""
    q, K, V = _inputs(rng, LONG_SQ, LONG_SK, LONG_D)
    for name in ("flash_decode", "split_kv_partials"):
        call = Call(name, _describe(q, K, LONG_SPLITS, {}))
        peak, result = peak_bytes(quiet_call, getattr(sub, name), call, q.copy(), K.copy(), V.copy(), LONG_SPLITS,
                                  _hints=WARNING_HINTS)
        if peak > LONG_BUDGET_BYTES:
            fail(f"{name} held {peak / 2**20:.1f} MiB at its peak over a cache of {LONG_SK} keys",
                 called=str(call), got=f"peak memory {peak / 2**20:.1f} MiB during the call (inputs included)",
                 expected=(f"under {LONG_BUDGET_BYTES / 2**20:.0f} MiB: K and V are {2 * K.nbytes / 2**20:.0f} MiB, "
                           f"one chunk's scores {LONG_SQ}x{LONG_SK // LONG_SPLITS} are "
                           f"{LONG_SQ * (LONG_SK // LONG_SPLITS) * 8 / 2**10:.0f} KiB, and one score row per query "
                           f"over the whole cache, [{LONG_SQ}, {LONG_SK}], is {FULL_ROW_BYTES / 2**20:.0f} MiB"),
                 hint=("the scores of the whole cache were materialised at once (full attention, not split-KV): "
                       "compute each chunk's scores, softmax and partial output from its own keys alone, then "
                       "merge the partials" if name == "flash_decode" else
                       "split_kv_partials built the scores over the whole cache, then cut them: compute S for one "
                       "chunk of keys at a time, q @ K[start:stop].T"))
        _check_long_values(name, result, call, q, K, V, {}, atol=O_ATOL, rtol=O_RTOL)
    # One query row (the decode step itself) against 2^21 keys of width 1, with causal=True and an
    # explicit scale (the arguments a shortcut could hide behind): one score row over the whole cache
    # (16 MiB) is as large as K itself, so even one row at a time stands out above the inputs and a
    # little slack.
    q, K, V = _inputs(rng, 1, VERY_LONG_SK, 1)
    kw = {"causal": True, "scale": 0.9}
    held = q.nbytes + K.nbytes + V.nbytes
    for name in ("flash_decode", "split_kv_partials"):
        call = Call(name, _describe(q, K, LONG_SPLITS, kw))
        peak, result = peak_bytes(quiet_call, getattr(sub, name), call, q.copy(), K.copy(), V.copy(), LONG_SPLITS,
                                  _hints=WARNING_HINTS, **kw)
        if peak > held + VERY_LONG_SLACK_BYTES:
            fail(f"{name} held {(peak - held) / 2**20:.1f} MiB beyond its inputs over a cache of {VERY_LONG_SK:,} keys",
                 called=str(call), got=f"peak memory {peak / 2**20:.1f} MiB during the call (inputs included)",
                 expected=(f"under {(held + VERY_LONG_SLACK_BYTES) / 2**20:.0f} MiB: the inputs "
                           f"({held / 2**20:.0f} MiB) and {VERY_LONG_SLACK_BYTES / 2**20:.0f} MiB for a chunk's "
                           f"work; one query row of scores over the whole cache is {VERY_LONG_SK * 8 / 2**20:.0f} MiB"),
                 hint=("a query row's scores were computed over the whole cache (one row at a time still holds all "
                       "sk of them): give each chunk only its own keys, K[start:stop], and merge the partials"))
        _check_long_values(name, result, call, q, K, V, kw, atol=1e-8, rtol=1e-8)


def _check_long_values(name, result, call, q, K, V, kw, *, atol, rtol):
    """Both outputs of either function on a long cache: code may be right only below these sizes."""
    sq, d = q.shape[0], V.shape[1]
    want = partials(q, K, V, LONG_SPLITS, kw.get("causal", False), kw.get("scale"))
    if name == "flash_decode":
        want = merge(*want)
        shapes, labels = ((sq, d), (sq,)), ("o (attention over the whole cache)", "lse")
    else:
        shapes, labels = ((LONG_SPLITS, sq, d), (LONG_SPLITS, sq)), ("O_parts", "L_parts")
    got = pair(result, call, ", ".join(label.split()[0] for label in labels), shapes)
    for mine, ref, label in zip(got, want, labels):
        close(mine, ref, call, atol=atol, rtol=rtol, what=label,
              hint="memory is fine, but the result is wrong at this size; the other checks name the mistake")


# What the functions should return, for `drill check --repro` (values only reach the learner).
REFERENCES = {
    "split_kv_partials": lambda q, K, V, num_splits, causal=False, scale=None:
        partials(q, K, V, num_splits, causal, scale),
    "flash_decode": lambda q, K, V, num_splits, causal=False, scale=None:
        merge(*partials(q, K, V, num_splits, causal, scale)),
}
