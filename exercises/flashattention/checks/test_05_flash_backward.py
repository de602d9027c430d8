"""Hidden checks for 05_flash_backward.py."""

from __future__ import annotations

import math

import numpy as np
import pytest

from drill import iocount
from drill.grader.expect import Call, array, close, fail, matches, max_error, show

from ._attention_reference import (
    WATCHED_VALUES_HINT,
    LONG_BC,
    LONG_SK_BACKWARD,
    LONG_SLACK_BACKWARD,
    LONG_SQ,
    MEMORY_SIZE,
    SHAPES,
    attention,
    attention_backward,
    check_block_reads,
    check_inputs_kept,
    check_passes,
    check_peak,
    check_peak_long,
    check_reads_seen,
    chunked_attention,
    chunked_attention_backward,
    long_attention,
    near_ties,
    default_scale,
    first_wrong_block,
    peak_bytes,
    observed_call,
    quiet_call,
)

ATOL, RTOL = 1e-9, 1e-8
NAMES = ("dQ", "dK", "dV")


class Problem:
    """Inputs for one backward call, with O and L from the float64 reference forward."""

    def __init__(self, rng, sq, sk, d, *, spread=1.0, Q=None, K=None, **kw):
        self.Q = rng.normal(scale=spread, size=(sq, d)) if Q is None else Q
        self.K = rng.normal(size=(sk, d)) if K is None else K
        self.V = rng.normal(size=(sk, d))
        self.dO = rng.normal(size=(sq, d))
        self.kw = kw
        self.O, self.L = attention(self.Q, self.K, self.V, kw.get("causal", False), kw.get("scale"))

    @property
    def args(self):
        return (self.Q, self.K, self.V, self.O, self.L, self.dO)

    def reference(self, **mistake):
        causal = mistake.pop("causal", self.kw.get("causal", False))
        with np.errstate(all="ignore"):
            return attention_backward(*self.args, causal, self.kw.get("scale"), **mistake)

    def call(self) -> Call:
        sq, d = self.Q.shape
        sk = self.K.shape[0]
        extra = "".join(f", {k}={v:.6g}" if isinstance(v, float) else f", {k}={v}" for k, v in self.kw.items())
        return Call("flash_attention_backward", f"Q[{sq}x{d}], K, V[{sk}x{d}], O, L, dO{extra}")


WARNING_HINTS = {
    "overflow": ("exp overflowed: compute P = exp(S - L) in one step (S <= L, so it stays <= 1), not exp(S) / exp(L), "
                 "and mask S exactly as the forward did (an unmasked score can exceed L)"),
    "invalid": ("NaN was computed: a row that sees no key has L = -inf, and exp(S - L) became exp(-inf + inf); "
                "treat L = -inf as +inf so that P = 0 on that row"),
}


INPUT_NAMES = ("Q", "K", "V", "O", "L", "dO")
INPUTS_HINT = ("work on copies (np.where(...) returns a new array; L[L == -inf] = ... writes into the caller's L; "
               "Q *= scale writes into the caller's Q)")


def call_backward(sub, p: Problem, *args):
    """The user's (dQ, dK, dV), checked for type, shape and warnings."""
    call = p.call()
    copies = [a.copy() for a in (args or p.args)]
    result = quiet_call(sub.flash_attention_backward, call, *copies, _hints=WARNING_HINTS, **p.kw)
    if not isinstance(result, tuple) or len(result) != 3:
        fail(f"{call} must return three arrays (dQ, dK, dV)", called=str(call), got=show(result),
             expected="a tuple (dQ [sq, d], dK [sk, d], dV [sk, d])")
    shapes = (p.Q.shape, p.K.shape, p.V.shape)
    return call, [array(g, call, shape=s, what=n) for g, s, n in zip(result, shapes, NAMES)]


def _within(got, want, atol, rtol=RTOL) -> bool:
    if np.isnan(got).any() or math.isinf(max_error(got, want)):
        return False
    return bool(np.all(np.abs(got - want) <= atol + rtol * np.abs(want)))


# --- naming the mistake ----------------------------------------------------------------------


def diagnose(p: Problem, which: int, got) -> str:
    """Name the mistake behind a wrong dQ (0), dK (1) or dV (2), or say where it starts."""
    if np.isnan(got).any():
        return ("NaN: a row that sees no key has L = -inf, and exp(S - L) became exp(-inf + inf); "
                "such rows must give P = 0 (for example, use L = +inf there)")
    causal = p.kw.get("causal", False)
    sq, sk = p.Q.shape[0], p.K.shape[0]
    candidates = [
        (dict(scale_dq=False), "dQ is missing the scale: S = scale · Q Kᵀ, so dQ = scale · dS K"),
        (dict(scale_dk=False), "dK is missing the scale: S = scale · Q Kᵀ, so dK = scale · dSᵀ Q"),
        (dict(p_scale=False), "P was recomputed from unscaled scores: P = exp(scale · Q Kᵀ - L)"),
        (dict(d_from="zero"), "D is missing: dS = P ∘ (dP - D) with D = rowsum(dO ∘ O)"),
        (dict(ds_sign=-1.0), "dS has the wrong sign: dS = P ∘ (dP - D), not P ∘ (D - dP)"),
    ]
    if sq == sk:
        candidates.append((dict(d_from="V"), "D was computed from V: D = rowsum(dO ∘ O), with the forward's O"))
    Br, Bc = p.kw.get("Br", 16), p.kw.get("Bc", 16)
    if sk % Bc:
        candidates.append((dict(keys_upto=sk - sk % Bc),
                           "the last, shorter K/V block was dropped: loop j over range(0, sk, Bc), slice K[j:j+Bc]"))
    if sq % Br:
        candidates.append((dict(queries_upto=sq - sq % Br),
                           "the last, shorter Q block was dropped: loop i over range(0, sq, Br), slice Q[i:i+Br]"))
    if causal:
        candidates += [
            (dict(align="top-left"), "the mask is aligned top-left (j <= i); like the forward, align it "
                                     "bottom-right: query i sees keys j <= i + (sk - sq)"),
            (dict(shift=-1), "causal mask off by one: the diagonal key is visible, use j <= i + (sk - sq), not <"),
            (dict(shift=+1), "causal mask off by one: one key too many is visible, the last is i + (sk - sq)"),
            (dict(causal=False), "causal=True was ignored in the backward pass: mask S exactly as the forward did"),
        ]
    for mistake, hint in candidates:
        variant = p.reference(**mistake)[which]
        if matches(got, variant, atol=1e-8) and not matches(variant, p.reference()[which], atol=1e-8):
            return hint
    return locate(p, which, got)


def locate(p: Problem, which: int, got) -> str:
    want = p.reference()[which]
    block, what = (p.kw.get("Br", 16), "query") if which == 0 else (p.kw.get("Bc", 16), "key")
    index = first_wrong_block(got, want, block, ATOL, RTOL)
    if index is None:
        return ""
    n = got.shape[0]
    rows = slice(index * block, min((index + 1) * block, n))
    where = f"the first wrong {what} block is {index} (rows {rows.start}..{rows.stop - 1} of {NAMES[which]})"
    if rows.stop == n and n % block and matches(got[rows], np.zeros(got[rows].shape), atol=0.0):
        return f"{where}, the last, shorter block, left at 0: loop over range(0, n, block) and slice [i:i+block]"
    return where


def check_backward(sub, p: Problem, atol=ATOL):
    call, grads = call_backward(sub, p)
    want = p.reference()
    for which, (got, ref) in enumerate(zip(grads, want)):
        if not _within(got, ref, atol):
            close(got, ref, call, atol=atol, rtol=RTOL, what=NAMES[which], hint=diagnose(p, which, got))
    return grads


# --- the checks ------------------------------------------------------------------------------


def test_small_square(sub, rng):
    """A small square input (sq = sk = 8, d = 4, Br = Bc = 4) gives the right dQ, dK and dV"""
    check_backward(sub, Problem(rng, 8, 8, 4, Br=4, Bc=4))


# The shared shapes keep d <= 16; wider heads catch code that is right only on the columns it saw.
SHAPES_05 = {**SHAPES, "wide heads": [(19, 27, 40, 8, 8), (21, 16, 64, 16, 4)]}


@pytest.mark.parametrize("case", list(SHAPES_05), ids=list(SHAPES_05))
def test_shapes(sub, rng, case):
    """dQ, dK and dV are right for awkward shapes and block sizes"""
    for sq, sk, d, Br, Bc in SHAPES_05[case]:
        check_backward(sub, Problem(rng, sq, sk, d, Br=Br, Bc=Bc))


def test_default_blocks(sub, rng):
    """The default block sizes (Br = Bc = 16) work when Br and Bc are not passed"""
    check_backward(sub, Problem(rng, 40, 70, 16))


def test_explicit_scale(sub, rng):
    """An explicit scale replaces 1/√d in P, dQ and dK (0.0 and negative values included, causal too)"""
    for scale, causal in ((0.37, False), (2.0, False), (0.0, False), (-0.6, False), (0.37, True)):
        check_backward(sub, Problem(rng, 24, 30, 8, Br=8, Bc=8, causal=causal, scale=scale))
    # The causal path takes the scale as well, with Br != Bc, sq on either side of sk (rows
    # without keys included) and a negative value.
    for sq, sk, Br, Bc, scale in [(21, 34, 4, 8, 0.45), (34, 21, 8, 4, 1.7), (19, 19, 8, 8, -0.8)]:
        check_backward(sub, Problem(rng, sq, sk, 8, Br=Br, Bc=Bc, causal=True, scale=scale))
    # Every kind of value (positive, zero, negative) against every pairing of causal and the
    # sq/sk relation: a shortcut keyed to one combination (scale 0 only when causal, say, or a
    # negative scale only when sq < sk) meets its own case here.
    for scale in (0.6, 0.0, -0.45):
        for causal in (False, True):
            for sq, sk in ((13, 22), (17, 17), (22, 13)):
                check_backward(sub, Problem(rng, sq, sk, 4, Br=8, Bc=4, causal=causal, scale=scale))


CAUSAL = {
    "sq == sk": [(37, 37, 8, 8, 16), (16, 16, 4, 4, 4), (9, 9, 4, 16, 16), (24, 24, 64, 16, 8)],
    "sq < sk, bottom-right": [(20, 45, 8, 8, 8), (7, 50, 4, 16, 4), (1, 12, 4, 16, 16)],
}


@pytest.mark.parametrize("case", list(CAUSAL), ids=list(CAUSAL))
def test_causal(sub, rng, case):
    """Causal: the same bottom-right mask as the forward (query i sees keys j <= i + (sk - sq))"""
    for sq, sk, d, Br, Bc in CAUSAL[case]:
        check_backward(sub, Problem(rng, sq, sk, d, Br=Br, Bc=Bc, causal=True))


def test_causal_rows_without_keys(sub, rng):
    """Causal with sq > sk: rows with L = -inf add nothing and get dQ = 0, no NaN, no warning"""
    for sq, sk, d, Br, Bc in [(45, 20, 8, 8, 8), (50, 7, 4, 4, 16)]:
        check_backward(sub, Problem(rng, sq, sk, d, Br=Br, Bc=Bc, causal=True))


def test_large_logits(sub, rng):
    """Scores of magnitude 1e3 to 1e4 neither overflow nor lose accuracy"""
    for sq, sk, d, Br, Bc, causal in [(24, 40, 8, 8, 16, False), (33, 21, 4, 16, 8, True)]:
        Q = rng.normal(size=(sq, d))
        Q = Q / np.linalg.norm(Q, axis=1, keepdims=True) * rng.uniform(1e3, 1e4, size=(sq, 1)) / 3.0
        check_backward(sub, Problem(rng, sq, sk, d, Q=Q, Br=Br, Bc=Bc, causal=causal), atol=1e-7)
    # Rows that large are almost one-hot, with gradients near zero that hide a wrong factor.
    Q, K = near_ties(rng, 29, 37, 8)
    check_backward(sub, Problem(rng, 29, 37, 8, Q=Q, K=K, Br=8, Bc=16, causal=True), atol=1e-7)


def test_uses_given_o_and_l(sub, rng):
    """The given L and O are used: P = exp(S - L) and D = rowsum(dO ∘ O), nothing recomputed (causal too)"""
    # Non-causal with the default scale, then causal (sq < sk) and causal with a given scale and
    # rows that see no key (sq > sk): a recomputation done on one path only meets its case.
    for sq, sk, kw in ((19, 26, {}), (19, 26, dict(causal=True)), (26, 19, dict(causal=True, scale=0.6))):
        p = Problem(rng, sq, sk, 8, Br=8, Bc=8, **kw)
        causal, scale = kw.get("causal", False), kw.get("scale")
        O_true, L_true = p.O, p.L
        # Shift L by 1 (P shrinks by e) and nudge O: the contract's formulas give a known, different answer.
        p.L = p.L + 1.0
        p.O = p.O + 0.25 * rng.normal(size=p.O.shape)
        call, grads = call_backward(sub, p)
        with np.errstate(all="ignore"):
            ignored = [
                (attention_backward(p.Q, p.K, p.V, p.O, L_true, p.dO, causal, scale),
                 "your gradients ignore the L you were given (the softmax statistics were recomputed): "
                 "rebuild each P block as exp(S - L) from the saved L"),
                (attention_backward(p.Q, p.K, p.V, O_true, p.L, p.dO, causal, scale),
                 "your D ignores the O you were given (O was recomputed): take D = rowsum(dO ∘ O) with the given O"),
                (attention_backward(p.Q, p.K, p.V, O_true, L_true, p.dO, causal, scale),
                 "your gradients ignore the O and L you were given: use P = exp(S - L) and D = rowsum(dO ∘ O) "
                 "with them"),
            ]
        for which, (got, ref) in enumerate(zip(grads, p.reference())):
            if _within(got, ref, ATOL):
                continue
            hint = next((h for grads_, h in ignored if matches(got, grads_[which], atol=1e-8)), "")
            close(got, ref, f"{call} with L + 1 and O perturbed", atol=ATOL, rtol=RTOL,
                  what=NAMES[which], hint=hint or diagnose(p, which, got))


def _loss(Q, K, V, dO, causal, scale):
    return float((attention(Q, K, V, causal, scale)[0] * dO).sum())


def test_finite_differences(sub, rng):
    """dQ, dK and dV agree with finite differences of sum(O ∘ dO) at sampled entries"""
    h = 1e-5
    for sq, sk, d, Br, Bc, causal in [(9, 14, 4, 4, 8, False), (11, 17, 3, 8, 4, True), (15, 6, 4, 4, 4, True)]:
        p = Problem(rng, sq, sk, d, Br=Br, Bc=Bc, causal=causal)
        call, grads = call_backward(sub, p)
        for which, name in enumerate(NAMES):
            base = [p.Q, p.K, p.V]
            target = base[which]
            for _ in range(5):
                r, c = int(rng.integers(target.shape[0])), int(rng.integers(target.shape[1]))
                plus, minus = [a.copy() for a in base], [a.copy() for a in base]
                plus[which][r, c] += h
                minus[which][r, c] -= h
                numeric = (_loss(*plus, p.dO, causal, None) - _loss(*minus, p.dO, causal, None)) / (2 * h)
                value = float(grads[which][r, c])
                if not abs(value - numeric) <= 1e-6 + 1e-5 * abs(numeric):
                    fail(f"{name}[{r}, {c}] disagrees with a finite difference of sum(O ∘ dO)",
                         called=str(call), got=f"{name}[{r}, {c}] = {value:.8g}",
                         expected=f"≈ {numeric:.8g} (central difference, h = {h:g})",
                         hint=diagnose(p, which, grads[which]))


def test_key_permutation(sub, rng):
    """Shuffling the rows of K and V shuffles the rows of dK and dV the same way, and leaves dQ alone"""
    p = Problem(rng, 21, 29, 4, spread=1.5, Br=8, Bc=8)
    _, (dQ, dK, dV) = call_backward(sub, p)
    perm = rng.permutation(p.K.shape[0])
    call, (dQ2, dK2, dV2) = call_backward(sub, p, p.Q, p.K[perm], p.V[perm], p.O, p.L, p.dO)
    hint = "the result depends on where a key sits: is every K/V block, the last, shorter one too, included?"
    where = f"{call} with K, V rows shuffled"
    close(dQ2, dQ, where, atol=1e-10, rtol=1e-9, what="dQ after shuffling K and V", hint=hint)
    close(dK2, dK[perm], where, atol=1e-10, rtol=1e-9, what="dK after shuffling K and V", hint=hint)
    close(dV2, dV[perm], where, atol=1e-10, rtol=1e-9, what="dV after shuffling K and V", hint=hint)


@pytest.mark.peak_memory
@pytest.mark.parametrize("causal", [False, True], ids=["non-causal", "causal"])
def test_memory(sub, rng, causal):
    """Peak memory at sq = sk = 4096 (Br = Bc = 128) stays far below one score matrix"""
    n, d = MEMORY_SIZE, 16
    Q, K, V, dO = (rng.normal(size=(n, d)) for _ in range(4))
    # Both paths watched: the default scale, and a given one (negative: a shortcut taken only for
    # a sign, say a plain [sq, sk] backward, must meet this check; the long-K one takes a positive).
    scale = -0.37 if causal else None
    O, L = chunked_attention(Q, K, V, causal, scale)
    call = Call("flash_attention_backward", f"Q, K, V, O, dO [{n}x{d}], L [{n}], Br=128, Bc=128, causal={causal}"
                + ("" if scale is None else f", scale={scale}"))
    args = [a.copy() for a in (Q, K, V, O, L, dO)]
    peak, result = peak_bytes(quiet_call, sub.flash_attention_backward, call, *args,
                              Br=128, Bc=128, causal=causal, scale=scale, _hints=WARNING_HINTS)
    check_peak(peak, call, "flash_attention_backward")
    if not isinstance(result, tuple) or len(result) != 3:
        fail(f"{call} must return three arrays (dQ, dK, dV)", called=str(call), got=show(result))
    # Every row of every gradient: code right on most rows and wrong on a few is still wrong.
    wants = chunked_attention_backward(Q, K, V, O, L, dO, causal, scale)
    for got, want, name in zip(result, wants, NAMES):
        close(array(got, call, shape=(n, d), what=name), want, call, atol=ATOL, rtol=RTOL, what=name,
              hint=f"memory is fine, but {name} is wrong at this size; the other checks name the mistake")


def _long_causal_attention(Q, K, V, scale):
    """attention(Q, K, V, causal=True, scale) for few query rows and a long K: every row sees the
    first sk - sq keys (long_attention, a block at a time), and the last sq keys under a
    lower-triangular mask; the two parts are merged by their logsumexps."""
    sq, sk = Q.shape[0], K.shape[0]
    n0 = sk - sq
    O0, L0 = long_attention(Q, K[:n0], V[:n0], scale)
    S = np.where(np.tri(sq, dtype=bool), (Q @ K[n0:].T) * default_scale(Q.shape[1], scale), -np.inf)
    m = np.maximum(L0, S.max(axis=1))
    L = m + np.log(np.exp(L0 - m) + np.exp(S - m[:, None]).sum(axis=1))
    O = np.exp(L0 - L)[:, None] * O0 + np.exp(S - L[:, None]) @ V[n0:]
    return O, L


@pytest.mark.peak_memory
def test_memory_long_keys(sub, rng):
    """Peak memory with 16 query rows against 2^20 keys stays at tiles: no whole row of scores"""
    Q = rng.normal(size=(LONG_SQ, 1))
    K, V = rng.normal(size=(LONG_SK_BACKWARD, 1)), rng.normal(size=(LONG_SK_BACKWARD, 1))
    dO = rng.normal(size=(LONG_SQ, 1))
    # Causal and with a given scale: the 4096-square checks watch the other paths, and a
    # shortcut taken only when causal or only when a scale is given must meet this one too.
    scale = 0.5
    O, L = _long_causal_attention(Q, K, V, scale)
    call = Call("flash_attention_backward", f"Q, O, dO [{LONG_SQ}x1], K, V [{LONG_SK_BACKWARD}x1], L [{LONG_SQ}], "
                f"Br={LONG_SQ}, Bc={LONG_BC}, causal=True, scale={scale}")
    args = [a.copy() for a in (Q, K, V, O, L, dO)]
    held = sum(a.nbytes for a in args) + Q.nbytes + K.nbytes + V.nbytes  # the inputs, and dQ, dK, dV
    peak, result = peak_bytes(quiet_call, sub.flash_attention_backward, call, *args, Br=LONG_SQ, Bc=LONG_BC,
                              causal=True, scale=scale, _hints=WARNING_HINTS)
    check_peak_long(peak, call, "flash_attention_backward", held, K.nbytes, sk=LONG_SK_BACKWARD,
                    slack=LONG_SLACK_BACKWARD)
    if not isinstance(result, tuple) or len(result) != 3:
        fail(f"{call} must return three arrays (dQ, dK, dV)", called=str(call), got=show(result))
    wants = chunked_attention_backward(Q, K, V, O, L, dO, True, scale, columns=2**16)
    for got, want, name, shape in zip(result, wants, NAMES, (Q.shape, K.shape, V.shape)):
        close(array(got, call, shape=shape, what=name), want, call, atol=ATOL, rtol=RTOL, what=name,
              hint=f"memory is fine, but {name} is wrong on a long K")


@pytest.mark.observed
def test_inputs_untouched(sub, rng):
    """Q, K, V, O, L and dO are not modified"""
    # sq > sk, causal: L starts with four -inf rows; then with a given scale, causal or not.
    # A negative scale too: folding its sign into Q in place changes the caller's Q.
    # Then wider heads drawn per run with their own tiles (causal, so L has -inf rows): a write kept for
    # some widths or sizes shows too. (The value and memory checks hand the subject copies and compare
    # values only, so they stay verified; this check rests on the arguments the subject sends back.)
    for kw in (dict(causal=True), dict(causal=True, scale=0.37), dict(causal=False, scale=2.0),
               dict(causal=False, scale=-0.6), dict(causal=True, d=0), dict(causal=False, scale=0.37, d=0)):
        if kw.pop("d", 4):
            p = Problem(rng, 23, 19, 4, Br=8, Bc=8, **kw)
        else:
            sq, sk, d = (int(x) for x in rng.integers((50, 29, 5), (97, 49, 65)))  # sq > sk: L has -inf rows
            p = Problem(rng, sq, sk, d, Br=int(rng.integers(4, 33)), Bc=int(rng.integers(4, 33)), **kw)
        args = list(p.args)
        before = [a.copy() for a in args]
        after = observed_call(sub.flash_attention_backward, p.call(), *args, _hints=WARNING_HINTS,
                              return_args=True, **p.kw).args
        check_inputs_kept("flash_attention_backward", p.call(), INPUT_NAMES, before, after, INPUTS_HINT)


# (sq, sk, d, Br, Bc, causal, scale): every pairing of causal with a given or default scale, since a
# shortcut behind one pairing is otherwise never watched; and a K as long as the 4096-square memory
# check's with d > 1, where a strip of a few query rows against all of K fits that check's budget
# and the long-K check (d = 1) never looks.
READ_CASES = {
    "non-causal": (48, 40, 8, 16, 8, False, 0.37),
    "causal": (48, 40, 8, 16, 8, True, None),
    "non-causal, default scale": (48, 40, 8, 16, 8, False, None),
    "causal, given scale": (40, 48, 8, 8, 16, True, -0.45),
    "long K": (40, 4096, 4, 16, 128, False, None),
    "long K, causal": (40, 4096, 4, 16, 128, True, 0.7),
}


@pytest.mark.observed
@pytest.mark.parametrize("case", list(READ_CASES), ids=list(READ_CASES))
def test_recomputes_in_blocks(sub, rng, case):
    """Score blocks are recomputed from Q and K in blocks, D from dO and O once (one pass or two)"""
    sq, sk, d, Br, Bc, causal, scale = READ_CASES[case]
    p = Problem(rng, sq, sk, d, Br=Br, Bc=Bc, causal=causal, **({} if scale is None else dict(scale=scale)))
    call = p.call()
    outcome = observed_call(sub.flash_attention_backward, call, *[a.copy() for a in p.args], _hints=WARNING_HINTS,
                            record={0: "Q", 1: "K", 2: "V", 3: "O", 5: "dO"}, **p.kw)
    result = outcome.result
    if not isinstance(result, tuple) or len(result) != 3:
        fail(f"{call} must return three arrays (dQ, dK, dV)", called=str(call), got=show(result))
    for got, want, name, shape in zip(result, p.reference(), NAMES, (p.Q.shape, p.K.shape, p.V.shape)):
        close(array(got, call, shape=shape, what=name), want, call, atol=ATOL, rtol=RTOL, what=name,
              hint="the other checks name the mistake", nan_hint=WATCHED_VALUES_HINT)
    reads, truncated = iocount.summarize(outcome.reads, {"Q": sq, "K": sk, "V": sk, "O": sq, "dO": sq},
                                         {"Q": Br, "K": Bc, "V": Bc, "O": Br, "dO": Br})
    check_reads_seen(call, reads, truncated)
    check_block_reads(call, reads, {"K": (Bc, "Bc"), "V": (Bc, "Bc"), "Q": (Br, "Br")})
    if reads["O"].rows > sq:
        fail(f"O was read {reads['O'].passes:.3g} times; it is needed once, for D = rowsum(dO ∘ O)",
             called=str(call), got=f"O read {reads['O'].passes:.3g}×", expected="O read once",
             hint="compute D for every row once, before the loops, and slice D[i:i + Br] inside them")
    check_passes(call, reads, sq, sk, Br, Bc, inner=("K", "V"), outer=("Q",), two_passes=True)


# What the function should return, for `drill check --repro` (values only reach the learner).
REFERENCES = {"flash_attention_backward": lambda Q, K, V, O, L, dO, Br=16, Bc=16, causal=False, scale=None:
              attention_backward(Q, K, V, O, L, dO, causal, scale)}
