"""Float64 attention references and call helpers shared by the NumPy FlashAttention checks.

Not collected by pytest (leading underscore). Everything here builds full sq×sk
matrices on purpose: it is the yardstick, not an answer to copy.
"""

from __future__ import annotations

import math

import numpy as np

from drill import iocount
from drill.grader.expect import Call, array, fail, matches, note, show
from drill.grader.proxy import memory_measured

# The full score matrix at the memory-check size, and the most a tiled call may hold.
# Large enough that one sq×sk array stands far above the noise of a Python process (lazy
# imports, allocator slack): the limit sits between the tiles and a full boolean mask.
MEMORY_SIZE = 4096
FULL_SCORES_BYTES = MEMORY_SIZE * MEMORY_SIZE * 8  # 128 MiB
PEAK_LIMIT_BYTES = 12 * 2**20  # a full bool mask (16 MiB) is an sq×sk array too; inputs are 0.5 MiB each


def default_scale(d: int, scale) -> float:
    return 1.0 / math.sqrt(d) if scale is None else float(scale)


def visible(sq: int, sk: int, causal: bool, align: str = "bottom-right", shift: int = 0) -> np.ndarray:
    """Boolean [sq, sk]: may query i see key j?

    align="bottom-right": j <= i + (sk - sq) (the contract); "top-left": j <= i.
    shift moves the diagonal (shift=-1: strictly below it; shift=+1: one key too many).
    """
    if not causal:
        return np.ones((sq, sk), dtype=bool)
    offset = (sk - sq if align == "bottom-right" else 0) + shift
    return np.arange(sk)[None, :] <= np.arange(sq)[:, None] + offset


def scores(Q, K, scale, mask) -> np.ndarray:
    S = (Q @ K.T) * scale
    return np.where(mask, S, -np.inf)


def attention(Q, K, V, causal=False, scale=None, align="bottom-right", shift=0):
    """(O, L) in float64; rows that see no key give O = 0 and L = -inf."""
    mask = visible(Q.shape[0], K.shape[0], causal, align, shift)
    return masked_attention(Q, K, V, default_scale(Q.shape[1], scale), mask)


def near_ties(rng, sq: int, sk: int, d: int) -> tuple[np.ndarray, np.ndarray]:
    """Q and K whose scores are all about 1e3 to 1e4 yet spread by O(1) within each row.

    Large random scores make every softmax row almost one-hot, which hides wrong factors and
    extra keys; sharing one direction u keeps the magnitude and leaves the rows soft.
    """
    u = rng.standard_normal(d)
    u /= np.linalg.norm(u)
    big = rng.uniform(1e3, 1e4, size=(sq, 1))
    Q = u * big + rng.standard_normal((sq, d))
    K = u * np.sqrt(d) + rng.standard_normal((sk, d)) * (3.0 / big.mean())
    return Q, K


def masked_attention(Q, K, V, s, mask):
    """(O, L) for an explicit visibility mask [sq, sk] (its columns may cover a prefix of K);
    mask=None: every key is visible."""
    if mask is not None:
        K, V = K[:mask.shape[1]], V[:mask.shape[1]]
    S = (Q @ K.T) * s
    if mask is not None:
        np.copyto(S, -np.inf, where=~mask)
    m = S.max(axis=1)
    empty = m == -np.inf
    m_safe = np.where(empty, 0.0, m)
    P = np.exp(np.subtract(S, m_safe[:, None], out=S), out=S)  # in place: exp(-inf) = 0 on masked entries
    l = P.sum(axis=1)
    l_safe = np.where(empty, 1.0, l)
    O = (P @ V) / l_safe[:, None]
    L = np.where(empty, -np.inf, m_safe + np.log(l_safe))
    return O, L


def tiled_forward(Q, K, V, Br, Bc, causal=False, scale=None, *, rescale_acc=True, rescale_l=True,
                  drop_ragged_k=False, drop_ragged_q=False):
    """The FlashAttention-2 loop with switchable mistakes, to name what a user got wrong.

    Returns (O, L, m) where m is the final running max (for the "L = m" mistake).
    """
    sq, d = Q.shape
    sk = K.shape[0]
    s = default_scale(d, scale)
    mask = visible(sq, sk, causal)
    O = np.zeros((sq, V.shape[1]))
    L = np.full(sq, -np.inf)
    M = np.full(sq, -np.inf)
    q_end = (sq // Br) * Br if drop_ragged_q else sq
    k_end = (sk // Bc) * Bc if drop_ragged_k else sk
    for i in range(0, q_end, Br):
        rows = slice(i, min(i + Br, q_end))
        m = np.full(rows.stop - rows.start, -np.inf)
        l = np.zeros_like(m)
        acc = np.zeros((rows.stop - rows.start, V.shape[1]))
        for j in range(0, k_end, Bc):
            cols = slice(j, min(j + Bc, k_end))
            S = scores(Q[rows], K[cols], s, mask[rows, cols])
            m_new = np.maximum(m, S.max(axis=1))
            safe = np.where(m_new == -np.inf, 0.0, m_new)
            alpha = np.exp(m - safe)  # m = -inf -> 0
            P = np.exp(S - safe[:, None])
            l = (alpha * l if rescale_l else l) + P.sum(axis=1)
            acc = (alpha[:, None] * acc if rescale_acc else acc) + P @ V[cols]
            m = m_new
        seen = l > 0
        O[rows] = np.where(seen[:, None], acc / np.where(seen, l, 1.0)[:, None], 0.0)
        L[rows] = np.where(seen, np.where(seen, m, 0.0) + np.log(np.where(seen, l, 1.0)), -np.inf)
        M[rows] = m
    return O, L, M


def attention_backward(Q, K, V, O, L, dO, causal=False, scale=None, align="bottom-right", shift=0, *,
                       d_from=None, scale_dq=True, scale_dk=True, p_scale=True, ds_sign=1.0,
                       keys_upto=None, queries_upto=None):
    """(dQ, dK, dV) in float64 from the saved O and L, with switchable mistakes.

    d_from: None uses D = rowsum(dO * O); "V" uses rowsum(dO * V) (needs sq == sk);
    "zero" drops D. p_scale=False recomputes P from unscaled scores; ds_sign=-1 flips dS;
    keys_upto / queries_upto leave out the keys / queries from that index on.
    """
    sq, d = Q.shape
    sk = K.shape[0]
    s = default_scale(d, scale)
    mask = visible(sq, sk, causal, align, shift).copy()
    if keys_upto is not None:
        mask[:, keys_upto:] = False
    if queries_upto is not None:
        mask[queries_upto:, :] = False
    S = scores(Q, K, s if p_scale else 1.0, mask)
    Lsafe = np.where(L == -np.inf, np.inf, L)  # rows that saw nothing: P = exp(-inf) = 0
    P = np.where(mask, np.exp(S - Lsafe[:, None]), 0.0)
    dV = P.T @ dO
    dP = dO @ V.T
    if d_from == "V":
        D = (dO * V).sum(axis=1)
    elif d_from == "zero":
        D = np.zeros(sq)
    else:
        D = (dO * O).sum(axis=1)
    dS = ds_sign * P * (dP - D[:, None])
    dQ = (dS @ K) * (s if scale_dq else 1.0)
    dK = (dS.T @ Q) * (s if scale_dk else 1.0)
    return dQ, dK, dV


# --- calling the user's code -------------------------------------------------------------


def quiet_call(fn, call: Call, *args, _hints: dict | None = None, **kwargs):
    """Call the user's fn; a RuntimeWarning raised inside it (overflow, 0/0, log(0)) fails the check.

    The subject runs every call with numpy's warnings on (underflow stays silent:
    exp(-1e4) rounding to 0 is correct behaviour) and reports what it saw. _hints maps
    "overflow" | "invalid" | "divide" to a hint that fits the exercise better.
    """
    return observed_call(fn, call, *args, _hints=_hints, **kwargs).result


def observed_call(fn, call: Call, *args, _hints: dict | None = None, return_args: bool = False, **kwargs):
    """quiet_call's checks, returning the whole Outcome (with the arguments after the call if asked)."""
    outcome = fn.observe(*args, return_args=return_args, **kwargs)
    if outcome.geterr:
        fail("your code changed numpy's error settings with np.seterr, which can hide warnings",
             called=str(call), got=f"np.geterr() = {outcome.geterr}",
             hint="don't silence the warning: keep -inf - (-inf) and exp overflow from happening")
    runtime = [message for category, message in outcome.warnings if category == "RuntimeWarning"]
    if runtime:
        fail("your code raised a numpy RuntimeWarning (the contract is: no NaN and no warning)",
             called=str(call), got=f"RuntimeWarning: {runtime[0]}",
             hint=warning_hint(str(runtime[0]), _hints or {}))
    return outcome


def check_inputs_kept(function: str, called, names, before, after, hint: str) -> None:
    """The arguments as the subject held them after the call (return_args=True) equal what was passed:
    a write into an input, however rare the call that makes it, is a broken contract."""
    for name, then, now in zip(names, before, after or ()):
        if not matches(now, then, atol=0.0):
            fail(f"{function} changed its input {name} in place", called=str(called), hint=hint)


def warning_hint(message: str, hints: dict) -> str:
    for key, hint in hints.items():
        if key in message:
            return hint
    if "overflow" in message:
        return "exp overflowed: subtract the running max (or the larger L) before exponentiating"
    if "invalid" in message:
        return ("an invalid value (NaN) was computed, usually exp(-inf - (-inf)) on a row that sees no key: "
                "use a finite stand-in for the max when it is -inf")
    if "divide" in message:
        return "division by zero or log(0): a row with l = 0 sees no key; give it O = 0 and L = -inf directly"
    return ""


def peak_bytes(fn, *args, **kwargs) -> tuple[int, object]:
    """Peak resident memory of the user's code during fn(*args), measured from outside its process.

    The call runs in a fresh subject; the figure is its resident high-water mark (and its
    memory cgroup's peak, where there is one) above what it held before the user's file
    was loaded, so buffers kept from import time count too.
    """
    with memory_measured() as measured:
        result = fn(*args, **kwargs)
    return measured.peak, result


def check_peak(peak: int, call: Call, what: str) -> None:
    if peak > PEAK_LIMIT_BYTES:
        fail(f"{what} held {peak / 2**20:.1f} MiB at its peak: that is an sq×sk array, not tiles",
             called=str(call),
             got=f"peak memory {peak / 2**20:.1f} MiB during the call",
             expected=(f"under {PEAK_LIMIT_BYTES / 2**20:.0f} MiB (one full {MEMORY_SIZE}×{MEMORY_SIZE} float64 score "
                       f"matrix is {FULL_SCORES_BYTES / 2**20:.0f} MiB; a full boolean mask is "
                       f"{MEMORY_SIZE * MEMORY_SIZE / 2**20:.0f} MiB)"),
             hint="a full score matrix (or mask) was materialised: compute S, P and the mask one "
                  "[Br, Bc] block at a time inside the loops")


# Few query rows against a long K (d = 1): one row of scores is 16 MiB, a chunk of rows far more,
# while a Br×Bc tile is kilobytes. The allowance above the arrays passed in and returned is one
# copy of the longest input (an elementwise pass such as K * scale makes one) plus slack for the
# tiles (measured: the reference solution needs 4.5 MiB of it, a prescaled K 4.5 MiB beside its copy).
LONG_SQ, LONG_SK, LONG_BC = 16, 2**21, 4096
LONG_SLACK_BYTES = 10 * 2**20
# The backward holds two score rows at once (P and dP) where a row shortcut is used, so half the
# length already separates it: 2^20 keys, 6 MiB of slack (the reference solution needs about 3).
LONG_SK_BACKWARD, LONG_SLACK_BACKWARD = 2**20, 6 * 2**20


def check_peak_long(peak: int, call: Call, what: str, held_bytes: int, copy_bytes: int, *,
                    sk: int = LONG_SK, slack: int = LONG_SLACK_BYTES) -> None:
    """The peak on a long K stays below the arrays held plus one input-sized copy and slack."""
    limit = held_bytes + copy_bytes + slack
    row = sk * 8
    if peak <= limit:
        note(f"peak memory on a long K (verified): {peak / 2**20:.1f} MiB, under the {limit / 2**20:.0f} MiB "
             f"allowed (the arrays passed in and returned are {held_bytes / 2**20:.0f} MiB)")
        return
    fail(f"{what} held {(peak - held_bytes) / 2**20:.1f} MiB beyond its inputs and outputs on a long K: "
         "whole rows of scores were materialised, not tiles",
         called=str(call), got=f"peak memory {peak / 2**20:.1f} MiB during the call",
         expected=(f"under {limit / 2**20:.0f} MiB: the arrays themselves ({held_bytes / 2**20:.0f} MiB), one copy "
                   f"of an input ({copy_bytes / 2**20:.0f} MiB) and {slack / 2**20:.0f} MiB for tiles; "
                   f"one query row of scores against all {sk:,} keys is {row / 2**20:.0f} MiB"),
         hint=(f"query rows were processed against all of K at once (a chunk of rows, or one row at a time, "
               f"still holds sk = {sk:,} scores per row): stream K and V in blocks of Bc rows with the "
               "online softmax, so only a Br×Bc tile of scores exists at a time"))


def long_attention(Q, K, V, scale=None, columns: int = 2**16):
    """Non-causal attention() for few query rows and a long K, a block of keys at a time.

    One pass with a running max (each block's scores computed once: half the time of two
    passes, which matters to every grading of 03 and 05); its values are checked against
    attention() in tests/test_numpy_track.py."""
    s = default_scale(Q.shape[1], scale)
    m = np.full(Q.shape[0], -np.inf)
    l, acc = np.zeros(Q.shape[0]), np.zeros((Q.shape[0], V.shape[1]))
    for j in range(0, K.shape[0], columns):
        S = Q @ K[j:j + columns].T
        S *= s
        m_new = np.maximum(m, S.max(axis=1))
        rescale = np.exp(m - m_new)
        S -= m_new[:, None]
        P = np.exp(S, out=S)
        l = l * rescale + P.sum(axis=1)
        acc = acc * rescale[:, None] + P @ V[j:j + columns]
        m = m_new
    return acc / l[:, None], m + np.log(l)


def chunked_attention(Q, K, V, causal=False, scale=None, rows: int = 512):
    """attention() computed a block of query rows at a time (the same values, less memory here)."""
    sq, sk = Q.shape[0], K.shape[0]
    mask = visible(sq, sk, causal) if causal else None
    O, L = np.zeros((sq, V.shape[1])), np.zeros(sq)
    for i in range(0, sq, rows):
        O[i:i + rows], L[i:i + rows] = masked_attention(Q[i:i + rows], K, V, default_scale(Q.shape[1], scale),
                                                        None if mask is None else mask[i:i + rows])
    return O, L


def chunked_attention_backward(Q, K, V, O, L, dO, causal=False, scale=None, columns: int = 1024):
    """attention_backward() computed a block of key columns at a time (the same values)."""
    sq, sk = Q.shape[0], K.shape[0]
    s = default_scale(Q.shape[1], scale)
    D = (dO * O).sum(axis=1)
    Lsafe = np.where(L == -np.inf, np.inf, L)
    dQ, dK, dV = np.zeros_like(Q), np.zeros_like(K), np.zeros_like(V)
    full_mask = visible(sq, sk, causal) if causal else None
    for j in range(0, sk, columns):
        cols = slice(j, min(j + columns, sk))
        mask = full_mask[:, cols] if causal else None
        P = Q @ K[cols].T  # turned into P in place: these blocks are the time the memory checks take
        P *= s
        P -= Lsafe[:, None]
        np.exp(P, out=P)
        if mask is not None:
            np.copyto(P, 0.0, where=~mask)
        dV[cols] = P.T @ dO
        dS = dO @ V[cols].T
        dS -= D[:, None]
        dS *= P
        dQ += (dS @ K[cols]) * s
        dK[cols] = (dS.T @ Q) * s
    return dQ, dK, dV


def pair(result, call: Call, names: str, shapes: tuple[tuple, tuple]):
    """Unpack a returned pair of arrays, checking type and shapes."""
    if not isinstance(result, tuple) or len(result) != 2:
        fail(f"{call} must return a pair ({names})", called=str(call), got=show(result),
             expected=f"a tuple of two arrays of shapes {shapes[0]} and {shapes[1]}")
    first, second = names.split(", ")
    return (array(result[0], call, shape=shapes[0], what=first),
            array(result[1], call, shape=shapes[1], what=second))


def first_wrong_block(got, want, block: int, atol: float, rtol: float) -> int | None:
    """Index of the first block of `block` rows in which got and want disagree."""
    got = np.asarray(got, dtype=np.float64).reshape(got.shape[0], -1)
    want = np.asarray(want, dtype=np.float64).reshape(want.shape[0], -1)
    with np.errstate(invalid="ignore"):
        same = (got == want) | (np.abs(got - want) <= atol + rtol * np.abs(want))
    bad_rows = np.flatnonzero(~same.all(axis=1))
    if bad_rows.size == 0:
        return None
    return int(bad_rows[0]) // block


# Awkward shapes shared by the forward and backward checks: (sq, sk, d, Br, Bc).
SHAPES = {
    "ragged last blocks": [(37, 37, 8, 16, 16), (45, 45, 4, 8, 8)],
    "sq != sk": [(20, 53, 8, 16, 16), (50, 13, 8, 16, 16)],
    "Br != Bc": [(33, 41, 8, 4, 16), (33, 41, 8, 16, 5)],
    "blocks longer than the sequence": [(5, 7, 8, 16, 16), (3, 30, 4, 64, 8), (30, 3, 4, 8, 64)],
    "d = 1": [(17, 23, 1, 4, 6)],
    "blocks of one row": [(6, 9, 3, 1, 1)],
}


# --- how the work is done: rows of each input read, from the subject's recording arrays ---

# For a NaN in the result of a call with recording inputs (record=...), whose memory holds NaN placeholders.
WATCHED_VALUES_HINT = ("in this watched call the inputs' own memory holds NaN placeholders, and their values reach "
                       "your code only through indexing, numpy functions and arithmetic: if the other checks pass, "
                       "your code converted an input (np.asarray, np.array, a buffer); slice the arrays you were "
                       "given instead. Otherwise the other checks name the mistake")

_CONVERTED_HINT = ("slice the arrays you were given (K[j:j + Bc]): after np.asarray, np.array or .astype on a "
                   "whole input, its reads can no longer be counted")


def check_reads_seen(call: Call, reads: dict, truncated: bool) -> None:
    """Every row of every recorded input must be read through the array itself."""
    if truncated:
        fail("your code made more than 200,000 separate reads of its inputs", called=str(call),
             hint="read blocks of rows (K[j:j + Bc]), not single elements")
    for name, r in reads.items():
        if r.covered < r.length:
            fail(f"only {r.covered} of the {r.length} rows of {name} were read through the array passed in",
                 called=str(call), got=f"{r.covered} rows of {name} seen", expected=f"all {r.length}",
                 hint=_CONVERTED_HINT)


def check_block_reads(call: Call, reads: dict, limits: dict[str, tuple[int, str]]) -> None:
    """No access to an input reads more rows than its block size."""
    for name, (block, label) in limits.items():
        r = reads[name]
        if r.largest <= block:
            continue
        if r.largest >= r.length and name in ("K", "V"):
            hint = (f"all of {name} was used at once (a matmul with the whole of {name}, or a reduction over it): "
                    "that is memory-efficient attention, not FlashAttention; stream K and V in blocks of Bc rows "
                    "and combine them with the online softmax (an elementwise pass such as K * scale is fine)")
        elif r.largest >= r.length:
            hint = (f"{name} was used whole (a matmul or a reduction over all of it): slice its blocks "
                    f"from the array you were given, {name}[i:i + {label}]")
        else:
            hint = f"read {name} in blocks of at most {label} = {block} rows"
        fail(f"{name} was read {r.largest} rows at a time; blocks of at most {label} = {block} were asked for",
             called=str(call), got=f"largest read of {name}: {r.largest} rows",
             expected=f"at most {block} rows per read", hint=hint)


def loop_order(reads: dict, sq: int, sk: int, Br: int, Bc: int, inner: tuple, outer: tuple,
               two_passes: bool = False) -> str:
    """The tiled loop the reads fit, in words; '' if none. Rows are counted as a kernel moves them
    (iocount.summarize), so every order below is a legitimate FlashAttention."""
    Tr, Tc = iocount.ceil_div(sq, Br), iocount.ceil_div(sk, Bc)

    def fits(outer_rows: int, inner_rows: int) -> bool:
        return all(reads[n].rows <= outer_rows for n in outer) and all(reads[n].rows <= inner_rows for n in inner)

    if fits(sq, Tr * sk):
        return "FA2 order: Q blocks outside, K/V streamed inside (Q read once, K and V once per Q block)"
    if fits(Tc * sq, sk):
        return ("FA1 order: K/V blocks outside, Q streamed inside (K and V read once, Q once per K/V block"
                + ("; one pass, dQ accumulated across K/V blocks" if two_passes else "") + ")")
    if two_passes and fits(sq + Tc * sq, sk + Tr * sk):
        return ("two passes, as FA2's Triton backward: dK and dV with K/V blocks outside, then dQ with Q blocks "
                "outside")
    return ""


def check_passes(call: Call, reads: dict, sq: int, sk: int, Br: int, Bc: int, inner: tuple, outer: tuple,
                 two_passes: bool = False) -> str:
    """The inputs were read as one of the tiled loops reads them; returns the order seen, in words."""
    order = loop_order(reads, sq, sk, Br, Bc, inner, outer, two_passes)
    seen = ", ".join(f"{n} read {reads[n].passes:.3g}×" for n in reads)
    if order:
        note(f"loop seen (observed): {order}; {seen}")
        return order
    Tr, Tc = iocount.ceil_div(sq, Br), iocount.ceil_div(sk, Bc)
    K = reads["K"]
    if all(reads[n].rows <= sq for n in outer) and K.rows > Tr * sk:
        hint = (f"Q was read once, but every K block {K.rows / (Tr * sk):.3g} times per Q block: that is a "
                "two-pass softmax (a first pass for the max, a second for the sum); keep m and l running so "
                "one pass is enough")
    elif all(reads[n].rows <= sk for n in inner):
        hint = (f"K and V were read once, but Q {reads['Q'].passes:.3g} times, more than once per K/V block "
                f"(Tc = {Tc}): read each Q block once inside the loop over K/V blocks")
    elif K.rows >= sq * sk > Tr * sk:
        hint = (f"K was read about once per query row (K {K.passes:.3g}×): loop over Q in blocks of Br rows, "
                "not row by row")
    else:
        hint = "no tiled loop reads its inputs this often: " + seen
    fail("the inputs were read more often than a tiled loop needs", called=str(call), got=seen,
         expected=(f"Q once and K, V at most Tr = {Tr} times each (FA2 order), or K, V once and Q at most "
                   f"Tc = {Tc} times (FA1 order)" + (", or one pass of each (two backward passes)"
                                                      if two_passes else "")), hint=hint)
    return ""


def note_traffic(reads: dict, s: int, d: int, Br: int, causal: bool) -> None:
    """Report the elements the user's loop moved beside exercise 02's formula for the same shape."""
    moved = iocount.moved_elements({n: reads[n] for n in ("Q", "K", "V")}, d, written=s * d + s)
    formula = iocount.flash_elements(s, d, Br)
    tail = " (causal block skipping reads fewer K/V rows)" if causal and moved < formula else ""
    note(f"HBM traffic measured on your loop at s = {s}, d = {d}, Br = {Br}: Q read {reads['Q'].passes:.3g}×, "
         f"K {reads['K'].passes:.3g}×, V {reads['V'].passes:.3g}×; {moved:,} elements moved with O and L "
         f"written once; exercise 02's formula 2·s·d + 2·Tr·s·d + s gives {formula:,}{tail}")
