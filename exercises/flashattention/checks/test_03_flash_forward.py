"""Hidden checks for 03_flash_forward.py."""

from __future__ import annotations

import math

import numpy as np
import pytest

from drill import iocount
from drill.grader.expect import Call, close, fail, matches, max_error

from ._attention_reference import (
    WATCHED_VALUES_HINT,
    LONG_BC,
    LONG_SK,
    LONG_SQ,
    MEMORY_SIZE,
    SHAPES,
    attention,
    check_block_reads,
    check_passes,
    check_peak,
    check_peak_long,
    check_reads_seen,
    check_inputs_kept,
    chunked_attention,
    default_scale,
    first_wrong_block,
    long_attention,
    masked_attention,
    near_ties,
    note_traffic,
    pair,
    peak_bytes,
    observed_call,
    quiet_call,
    tiled_forward,
    visible,
)

O_ATOL, O_RTOL = 1e-9, 1e-9
L_ATOL, L_RTOL = 1e-9, 1e-12


def _inputs(rng, sq, sk, d, spread=1.0):
    Q = rng.normal(scale=spread, size=(sq, d))
    K = rng.normal(size=(sk, d))
    V = rng.normal(size=(sk, d))
    return Q, K, V


def _describe(Q, K, kw) -> str:
    args = [f"Q[{Q.shape[0]}x{Q.shape[1]}]", f"K[{K.shape[0]}x{K.shape[1]}]", f"V[{K.shape[0]}x{K.shape[1]}]"]
    args += [f"{k}={v:.6g}" if isinstance(v, float) else f"{k}={v}" for k, v in kw.items()]
    return ", ".join(args)


INPUTS_HINT = ("scale a copy (Q * scale, or Q[i:i + Br] * scale), not Q itself (Q *= scale, or *= on a block "
               "sliced from Q, which is a view)")


def call_forward(sub, Q, K, V, **kw):
    """The user's (O, L), checked for type, shape and warnings."""
    call = Call("flash_attention_forward", _describe(Q, K, kw))
    result = quiet_call(sub.flash_attention_forward, call, Q.copy(), K.copy(), V.copy(), **kw)
    O, L = pair(result, call, "O, L", ((Q.shape[0], V.shape[1]), (Q.shape[0],)))
    return call, O, L


def _within(got, want, atol, rtol) -> bool:
    err = max_error(got, want)
    if math.isinf(err):
        return False
    both = np.isfinite(want)
    return bool(np.all(np.abs(got[both] - want[both]) <= atol + rtol * np.abs(want[both])))


def _blocks(kw):
    return kw.get("Br", 16), kw.get("Bc", 16)


def diagnose_o(Q, K, V, kw, O) -> str:
    """Name the mistake if O equals a known wrong variant; else say where it first goes wrong."""
    causal, scale = kw.get("causal", False), kw.get("scale")
    Br, Bc = _blocks(kw)
    d = Q.shape[1]
    candidates = []
    if scale is None:
        candidates += [
            (lambda: attention(Q, K, V, causal, 1.0)[0],
             "the scores were not scaled: S = Q Kᵀ · scale with scale = 1/√d when scale is None"),
            (lambda: attention(Q, K, V, causal, 1.0 / d)[0], "the default scale is 1/√d, not 1/d"),
        ]
    else:
        candidates += [
            (lambda: attention(Q, K, V, causal, None)[0],
             "the scale argument was ignored: use it when it is given, 1/√d only when it is None"),
            (lambda: attention(Q, K, V, causal, 1.0)[0], "the scores were not multiplied by scale: S = Q Kᵀ · scale"),
        ]
    if causal:
        candidates += [
            (lambda: attention(Q, K, V, True, scale, align="top-left")[0],
             "the mask is aligned top-left (key j <= i); the contract aligns it bottom-right: "
             "query i sees keys j <= i + (sk - sq)"),
            (lambda: attention(Q, K, V, True, scale, shift=-1)[0],
             "causal mask off by one: a query also sees the key on its diagonal, keep j <= i + (sk - sq), not <"),
            (lambda: attention(Q, K, V, True, scale, shift=+1)[0],
             "causal mask off by one: each query sees one key too many; the last visible key is i + (sk - sq)"),
            (lambda: attention(Q, K, V, False, scale)[0], "causal=True was ignored: no mask was applied"),
        ]
    else:
        candidates.append((lambda: attention(Q, K, V, True, scale)[0],
                           "a causal mask was applied although causal=False"))
    candidates += [
        (lambda: tiled_forward(Q, K, V, Br, Bc, causal, scale, rescale_acc=False)[0],
         "the accumulator was not rescaled when the running max grew: multiply acc by exp(m_old - m_new), "
         "just like l"),
        (lambda: tiled_forward(Q, K, V, Br, Bc, causal, scale, rescale_l=False)[0],
         "l was not rescaled when the running max grew: l = exp(m_old - m_new) · l + rowsum(P)"),
        (lambda: tiled_forward(Q, K, V, Br, Bc, causal, scale, rescale_acc=False, rescale_l=False)[0],
         "neither l nor the accumulator was rescaled by exp(m_old - m_new) when the running max grew"),
        (lambda: tiled_forward(Q, K, V, Br, Bc, causal, scale, drop_ragged_k=True)[0],
         "the last, shorter key block was dropped: loop j over range(0, sk, Bc) and slice K[j:j+Bc]"),
        (lambda: tiled_forward(Q, K, V, Br, Bc, causal, scale, drop_ragged_q=True)[0],
         "the last, shorter query block was dropped: loop i over range(0, sq, Br) and slice Q[i:i+Br]"),
    ]
    for make, hint in candidates:
        if matches(O, make(), atol=1e-8):
            return hint
    return locate_o(Q, K, V, kw, O)


def locate_o(Q, K, V, kw, O) -> str:
    """The first query block that goes wrong, and whether it equals a prefix of the key blocks."""
    causal, scale = kw.get("causal", False), kw.get("scale")
    Br, Bc = _blocks(kw)
    sq, sk = Q.shape[0], K.shape[0]
    s = default_scale(Q.shape[1], scale)
    O_ref, _ = attention(Q, K, V, causal, scale)
    i = first_wrong_block(O, O_ref, Br, O_ATOL, O_RTOL)
    if i is None:
        return ""
    rows = slice(i * Br, min((i + 1) * Br, sq))
    where = f"the first wrong query block is i = {i} (rows {rows.start}..{rows.stop - 1})"
    mask = visible(sq, sk, causal)
    for j in range(0, math.ceil(sk / Bc)):
        upto = min(j * Bc, sk)
        if upto == 0:
            continue
        prefix, _ = masked_attention(Q[rows], K, V, s, mask[rows, :upto])
        if matches(O[rows], prefix, atol=1e-8) and not matches(prefix, O_ref[rows], atol=1e-8):
            return (f"{where}; there O equals attention over key blocks 0..{j - 1} only: "
                    f"key block j = {j} (keys {upto}..) and later never reached the result")
    return where


def diagnose_l(Q, K, V, kw, L) -> str:
    causal, scale = kw.get("causal", False), kw.get("scale")
    Br, Bc = _blocks(kw)
    _, L_ref = attention(Q, K, V, causal, scale)
    _, _, M = tiled_forward(Q, K, V, Br, Bc, causal, scale)
    tiled = [
        (dict(rescale_l=False), "l was not rescaled when the running max grew: l = exp(m_old - m_new) · l + rowsum(P)"),
        (dict(drop_ragged_k=True),
         "the last, shorter key block was dropped: loop j over range(0, sk, Bc) and slice K[j:j+Bc]"),
        (dict(drop_ragged_q=True),
         "the last, shorter query block was dropped: loop i over range(0, sq, Br) and slice Q[i:i+Br]"),
    ]
    with np.errstate(all="ignore"):
        l_ref = np.exp(L_ref - M)
        candidates = [
            (L_ref / math.log(2.0), "L is in base 2: use the natural log, L = m + np.log(l)"),
            (M, "L equals the running max m: the logsumexp is L = m + log(l)"),
            (np.log(l_ref), "L is missing the running max: L = m + log(l), not log(l)"),
            (M + l_ref, "L = m + log(l), not m + l"),
            (attention(Q, K, V, causal, 1.0)[1], "L was computed from unscaled scores: scale them first"),
            (np.where(np.isinf(L_ref), 0.0, L_ref),
             "rows that see no key must get L = -inf (the log of an empty sum), not 0"),
        ]
    for cand, hint in candidates:
        if matches(L, cand, atol=1e-8):
            return hint
    for flags, hint in tiled:
        if matches(L, tiled_forward(Q, K, V, Br, Bc, causal, scale, **flags)[1], atol=1e-8):
            return hint
    i = first_wrong_block(L, L_ref, Br, L_ATOL, L_RTOL)
    return "" if i is None else f"the first wrong query block is i = {i} (rows {i * Br}..)"


def check_forward(sub, Q, K, V, *, o_atol=O_ATOL, l_atol=L_ATOL, **kw):
    """Run the user's forward and compare O and L with the float64 reference."""
    call, O, L = call_forward(sub, Q, K, V, **kw)
    O_ref, L_ref = attention(Q, K, V, kw.get("causal", False), kw.get("scale"))
    if not _within(O, O_ref, o_atol, O_RTOL) or np.isnan(O).any():
        hint = "" if np.isnan(O).any() else diagnose_o(Q, K, V, kw, O)
        if np.isnan(O).any():
            hint = ("O has NaN: a row (or block) with no visible key computed exp(-inf - (-inf)); "
                    "use 0 instead of a -inf max when shifting, and give such rows O = 0")
        close(O, O_ref, call, atol=o_atol, rtol=O_RTOL, what="O", hint=hint)
    if not _within(L, L_ref, l_atol, L_RTOL) or np.isnan(L).any():
        close(L, L_ref, call, atol=l_atol, rtol=L_RTOL, what="L (the logsumexp of each row)",
              hint=diagnose_l(Q, K, V, kw, L))
    return O, L


def test_small_square(sub, rng):
    """A small square input (sq = sk = 8, d = 4, Br = Bc = 4) matches attention"""
    Q, K, V = _inputs(rng, 8, 8, 4)
    check_forward(sub, Q, K, V, Br=4, Bc=4)


# The shared shapes keep d <= 16; wider heads catch code that is right only on the columns it saw.
SHAPES_03 = {**SHAPES, "wide heads": [(19, 27, 40, 8, 8), (21, 16, 64, 16, 4)]}


@pytest.mark.parametrize("case", list(SHAPES_03), ids=list(SHAPES_03))
def test_shapes(sub, rng, case):
    """Matches attention for awkward shapes and block sizes"""
    for sq, sk, d, Br, Bc in SHAPES_03[case]:
        Q, K, V = _inputs(rng, sq, sk, d)
        check_forward(sub, Q, K, V, Br=Br, Bc=Bc)


def test_default_blocks(sub, rng):
    """The default block sizes (Br = Bc = 16) work when Br and Bc are not passed"""
    Q, K, V = _inputs(rng, 40, 70, 16)
    check_forward(sub, Q, K, V)


def test_explicit_scale(sub, rng):
    """An explicit scale replaces 1/√d, 0.0 and negative values included, with causal=True too"""
    Q, K, V = _inputs(rng, 24, 30, 8)
    for scale in (0.37, 2.0, 0.0, -0.6):
        check_forward(sub, Q, K, V, Br=8, Bc=8, scale=scale)
    # The causal path takes the scale as well (a mask written as its own branch may drop it),
    # with Br != Bc and sq on either side of sk.
    # Scale 0 gives each row uniform weights over the keys it sees, not over all of them.
    for sq, sk, Br, Bc, scale in [(21, 34, 4, 8, 0.45), (34, 21, 8, 4, 1.7), (19, 19, 8, 8, -0.8),
                                  (22, 31, 8, 8, 0.0), (31, 22, 16, 8, 0.0)]:
        Q, K, V = _inputs(rng, sq, sk, 8)
        check_forward(sub, Q, K, V, Br=Br, Bc=Bc, causal=True, scale=scale)


def test_logsumexp(sub, rng):
    """L is the natural-log logsumexp of each scaled row"""
    Q, K, V = _inputs(rng, 30, 45, 8, spread=2.0)
    call, O, L = call_forward(sub, Q, K, V, Br=8, Bc=16)
    _, L_ref = attention(Q, K, V)
    close(L, L_ref, call, atol=L_ATOL, rtol=L_RTOL, what="L (the logsumexp of each row)",
          hint=diagnose_l(Q, K, V, {"Br": 8, "Bc": 16}, L))


CAUSAL = {
    "sq == sk": [(37, 37, 8, 8, 16), (16, 16, 4, 4, 4), (9, 9, 4, 16, 16), (24, 24, 64, 16, 8)],
    "sq < sk, bottom-right": [(20, 45, 8, 8, 8), (7, 50, 4, 16, 4), (1, 12, 4, 16, 16)],
}


@pytest.mark.parametrize("case", list(CAUSAL), ids=list(CAUSAL))
def test_causal(sub, rng, case):
    """Causal: query i sees keys j <= i + (sk - sq)"""
    for sq, sk, d, Br, Bc in CAUSAL[case]:
        Q, K, V = _inputs(rng, sq, sk, d)
        check_forward(sub, Q, K, V, Br=Br, Bc=Bc, causal=True)


def test_causal_rows_without_keys(sub, rng):
    """Causal with sq > sk: rows that see no key give O = 0 and L = -inf, no NaN, no warning"""
    for sq, sk, d, Br, Bc in [(45, 20, 8, 8, 8), (50, 7, 4, 4, 16), (12, 3, 4, 16, 16)]:
        Q, K, V = _inputs(rng, sq, sk, d)
        check_forward(sub, Q, K, V, Br=Br, Bc=Bc, causal=True)


def test_large_logits(sub, rng):
    """Scores of magnitude 1e3 to 1e4 neither overflow nor lose accuracy"""
    for sq, sk, d, Br, Bc, causal in [(24, 40, 8, 8, 16, False), (33, 21, 4, 16, 8, True)]:
        Q, K, V = _inputs(rng, sq, sk, d)
        norms = np.linalg.norm(Q, axis=1, keepdims=True)
        Q = Q / norms * rng.uniform(1e3, 1e4, size=(sq, 1)) / 3.0  # |S| up to about 1e4
        check_forward(sub, Q, K, V, o_atol=1e-7, l_atol=1e-7, Br=Br, Bc=Bc, causal=causal)
    # Rows that large are almost one-hot, which hides a wrong factor or an extra key.
    Q, K = near_ties(rng, 29, 37, 8)
    check_forward(sub, Q, K, rng.normal(size=(37, 8)), o_atol=1e-7, l_atol=1e-7, Br=8, Bc=16, causal=True)
    # A negative scale turns the largest raw product Q·K into the smallest score: a max taken before
    # scaling becomes the row's minimum, harmless on small scores and an overflow on these.
    for sq, sk, d, Br, Bc, causal in [(24, 40, 8, 8, 16, False), (33, 21, 4, 16, 8, True)]:
        Q, K, V = _inputs(rng, sq, sk, d)
        Q = Q / np.linalg.norm(Q, axis=1, keepdims=True) * rng.uniform(1e3, 1e4, size=(sq, 1)) / 3.0
        check_forward(sub, Q, K, V, o_atol=1e-7, l_atol=1e-7, Br=Br, Bc=Bc, causal=causal,
                      scale=-1.0 / math.sqrt(d))
    Q, K = near_ties(rng, 29, 37, 8)
    check_forward(sub, -Q, K, rng.normal(size=(37, 8)), o_atol=1e-7, l_atol=1e-7, Br=16, Bc=8,
                  scale=-0.4)


def test_permutation_invariance(sub, rng):
    """Shuffling the rows of K and V together leaves O and L unchanged"""
    Q, K, V = _inputs(rng, 29, 47, 8, spread=2.0)
    _, O, L = call_forward(sub, Q, K, V, Br=8, Bc=16)
    perm = rng.permutation(K.shape[0])
    call, O2, L2 = call_forward(sub, Q, K[perm], V[perm], Br=8, Bc=16)
    hint = ("the result depends on the order of the keys: is the accumulator rescaled with l "
            "when the max grows, and is every key block (the last, shorter one too) included?")
    close(O2, O, f"{call} with K, V rows shuffled", atol=1e-10, rtol=1e-9,
          what="O after shuffling K and V", hint=hint)
    close(L2, L, f"{call} with K, V rows shuffled", atol=1e-10, rtol=1e-12,
          what="L after shuffling K and V", hint=hint)


def test_shift_invariance(sub, rng):
    """Adding one vector to every key shifts each row's scores by a constant: O stays, L moves by it"""
    sq, sk, d = 26, 35, 8
    Q, K, V = _inputs(rng, sq, sk, d)
    u = rng.normal(size=d)
    scale = default_scale(d, None)
    # Per-row shift scale·(q_i · u), pushed to ±1000 for the largest: exp overflows past 709.8
    # and underflows below -745, so exponentials taken without the running max break on every seed.
    Q = Q / np.abs(Q @ u * scale).max() * 1000.0
    _, O, L = call_forward(sub, Q, K, V, Br=8, Bc=8)
    call, O2, L2 = call_forward(sub, Q, K + u, V, Br=8, Bc=8)
    shift = (Q @ u) * scale
    hint = ""
    if not (np.isfinite(O2).all() and np.isfinite(L2).all()):  # the symptom of exponentials left unshifted
        hint = ("shifting every score of a row by a constant must not matter to O: subtract the running max "
                "(starting from -inf, not 0) before exponentiating")
    close(O2, O, f"{call} with K + u", atol=1e-8, rtol=1e-9, what="O after adding u to every key", hint=hint)
    if matches(L2 - L, shift / scale, atol=1e-6):
        hint = "L moved by q·u instead of scale·(q·u): the scores were not multiplied by the scale"
    close(L2, L + shift, f"{call} with K + u", atol=1e-8, rtol=1e-12,
          what="L after adding u to every key (expected L + scale·(Q u))", hint=hint)


# The two memory runs differ in every option, so a shortcut kept behind one of them (a given
# scale, causal, sq > sk, Br != Bc) meets the budget in one run or the other.
MEMORY_CASES = {"non-causal": dict(sk=MEMORY_SIZE, Br=128, Bc=128, causal=False),
                "causal, sq > sk, given scale": dict(sk=3600, Br=128, Bc=64, causal=True, scale=-0.6)}


@pytest.mark.peak_memory
@pytest.mark.parametrize("case", list(MEMORY_CASES), ids=["non-causal", "causal"])
def test_memory(sub, rng, case):
    """Peak memory at sq = sk = 4096 (Br = Bc = 128) stays far below one score matrix; the masked run has sk = 3600, Bc = 64 and scale = -0.6"""
    n, d = MEMORY_SIZE, 16
    opts = dict(MEMORY_CASES[case])
    sk = opts.pop("sk")
    causal, scale = opts["causal"], opts.get("scale")
    Q, K, V = _inputs(rng, n, sk, d)
    call = Call("flash_attention_forward", _describe(Q, K, opts))
    args = (Q.copy(), K.copy(), V.copy())
    peak, result = peak_bytes(quiet_call, sub.flash_attention_forward, call, *args, **opts)
    check_peak(peak, call, "flash_attention_forward")
    O, L = pair(result, call, "O, L", ((n, d), (n,)))
    # Every row: code right on most rows and wrong on a few is still wrong.
    O_ref, L_ref = chunked_attention(Q, K, V, causal, scale)
    close(O, O_ref, call, atol=O_ATOL, rtol=O_RTOL, what="O",
          hint="memory is fine, but O is wrong at this size; the other checks name the mistake")
    close(L, L_ref, call, atol=L_ATOL, rtol=L_RTOL, what="L",
          hint="memory is fine, but L is wrong at this size; the other checks name the mistake")


@pytest.mark.peak_memory
def test_memory_long_keys(sub, rng):
    """Peak memory with 16 query rows against 2^21 keys stays at tiles: no whole row of scores"""
    Q, K, V = _inputs(rng, LONG_SQ, LONG_SK, 1)
    kw = dict(Br=LONG_SQ, Bc=LONG_BC)
    call = Call("flash_attention_forward", _describe(Q, K, kw))
    peak, result = peak_bytes(quiet_call, sub.flash_attention_forward, call, Q.copy(), K.copy(), V.copy(), **kw)
    check_peak_long(peak, call, "flash_attention_forward", Q.nbytes + K.nbytes + V.nbytes, K.nbytes)
    O, L = pair(result, call, "O, L", ((LONG_SQ, 1), (LONG_SQ,)))
    O_ref, L_ref = long_attention(Q, K, V)
    close(O, O_ref, call, atol=1e-8, rtol=1e-8, what="O", hint="memory is fine, but O is wrong on a long K")
    close(L, L_ref, call, atol=1e-8, rtol=1e-12, what="L", hint="memory is fine, but L is wrong on a long K")


@pytest.mark.observed
def test_inputs_untouched(sub, rng):
    """Q, K and V are not modified, with or without the mask and a given scale"""
    # Heads of 4, then wider ones drawn per run with their own tiles: a write kept for some widths or
    # sizes shows too. (The value and memory checks hand the subject copies and compare values only,
    # so they stay verified; this check rests on the arguments the subject sends back.)
    for sq, sk, d, causal, scale in [(19, 23, 4, True, None), (19, 23, 4, False, None), (23, 19, 4, True, -0.6),
                                     (19, 23, 4, False, 0.37), (0, 0, 0, True, None), (0, 0, 0, False, 0.37)]:
        if not d:
            sq, sk, d = (int(x) for x in rng.integers((33, 33, 5), (97, 97, 65)))
        Q, K, V = _inputs(rng, sq, sk, d)
        kw = dict(Br=int(rng.integers(4, 33)), Bc=int(rng.integers(4, 33)), causal=causal, scale=scale) \
            if d > 4 else dict(Br=8, Bc=8, causal=causal, scale=scale)
        called = f"flash_attention_forward({_describe(Q, K, kw)})"
        before = (Q.copy(), K.copy(), V.copy())
        after = observed_call(sub.flash_attention_forward, called, Q, K, V, return_args=True, **kw).args
        check_inputs_kept("flash_attention_forward", called, "QKV", before, after, INPUTS_HINT)


# (sq, sk, d, Br, Bc, causal, scale): the options and head widths vary, so no shortcut hides behind one of them.
STREAM_CASES = {"s = 64": (64, 64, 8, 16, 16, False, None), "causal": (64, 64, 8, 16, 16, True, None),
                "ragged, sq != sk": (37, 53, 4, 8, 16, False, None),
                "sq > sk, given scale, d = 40": (45, 40, 40, 16, 8, False, 0.37),
                "causal, sq < sk, given scale, d = 64": (29, 50, 64, 8, 16, True, -0.6),
                "causal, sq > sk": (45, 40, 4, 8, 8, True, None)}


@pytest.mark.observed
@pytest.mark.parametrize("case", list(STREAM_CASES))
def test_streams_kv_blocks(sub, rng, case):
    """K and V stream through in blocks of Bc rows, each pair of blocks met once (FA2 or FA1 order)"""
    sq, sk, d, Br, Bc, causal, scale = STREAM_CASES[case]
    Q, K, V = _inputs(rng, sq, sk, d)
    kw = dict(Br=Br, Bc=Bc, causal=causal)
    if scale is not None:
        kw["scale"] = scale
    call = Call("flash_attention_forward", _describe(Q, K, kw))
    outcome = observed_call(sub.flash_attention_forward, call, Q.copy(), K.copy(), V.copy(),
                            record={0: "Q", 1: "K", 2: "V"}, **kw)
    O, L = pair(outcome.result, call, "O, L", ((sq, d), (sq,)))
    O_ref, _ = attention(Q, K, V, causal, scale)
    close(O, O_ref, call, atol=O_ATOL, rtol=O_RTOL, what="O", hint="the other checks name the mistake",
          nan_hint=WATCHED_VALUES_HINT)
    reads, truncated = iocount.summarize(outcome.reads, {"Q": sq, "K": sk, "V": sk}, {"Q": Br, "K": Bc, "V": Bc})
    check_reads_seen(call, reads, truncated)
    check_block_reads(call, reads, {"K": (Bc, "Bc"), "V": (Bc, "Bc"), "Q": (Br, "Br")})
    check_passes(call, reads, sq, sk, Br, Bc, inner=("K", "V"), outer=("Q",))
    if sq == sk and not causal:
        note_traffic(reads, sq, d, Br, causal)


def test_rows_keep_their_own_statistics(sub, rng):
    """Query rows at wildly different scales keep their own running max"""
    sq, sk, d = 6, 40, 4
    Q, K, V = _inputs(rng, sq, sk, d)
    K[:, 0] = 1.0  # every key has 1 in column 0, so Q[i, 0] shifts row i's scores as a whole
    Q[:, 0] = np.array([1e4, -1e4, 0.0, 5e3, -5e3, 1.0]) * math.sqrt(d)
    kw = dict(Br=8, Bc=8)
    call, O, L = call_forward(sub, Q, K, V, **kw)
    O_ref, L_ref = attention(Q, K, V, False, None)
    hint = ""
    if not _within(O, O_ref, 1e-9, 1e-9) or not _within(L, L_ref, 1e-9, 1e-12):
        # Name the shared max only where the code shows its symptom: the rows far below the block's
        # largest score lost everything (NaN, or O = 0 with L = -inf); else let the value checks speak.
        low = Q[:, 0] < 0
        lost = ~np.isfinite(O[low]).all(axis=1) | ~np.isfinite(L[low]) | (np.abs(O[low]).sum(axis=1) == 0)
        if lost.any():
            hint = ("one running max is shared by the whole Q block (S.max() without axis=1): a row near -1e4 "
                    "underflows beside a row near +1e4; keep m and l per row")
        else:
            hint = diagnose_o(Q, K, V, kw, O)
    close(O, O_ref, call, atol=1e-9, rtol=1e-9, what="O", hint=hint, nan_hint=hint)
    close(L, L_ref, call, atol=1e-9, rtol=1e-12, what="L", hint=hint, nan_hint=hint)


# What the function should return, for `drill check --repro` (values only reach the learner).
REFERENCES = {"flash_attention_forward": lambda Q, K, V, Br=16, Bc=16, causal=False, scale=None:
              attention(Q, K, V, causal, scale)}
