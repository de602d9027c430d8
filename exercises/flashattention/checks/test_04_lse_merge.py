"""Hidden checks for 04_lse_merge.py."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from drill.grader.expect import Call, close, fail, matches, max_error, show

from ._attention_reference import default_scale, masked_attention, near_ties, observed_call, pair, quiet_call, visible

O_ATOL, O_RTOL = 1e-10, 1e-9
L_ATOL, L_RTOL = 1e-10, 1e-12


# --- inputs: partial attentions over a random split of the keys -------------------------


def _split(rng, sk, parts):
    """Random non-empty index sets (not contiguous) that cover range(sk)."""
    order = rng.permutation(sk)
    cuts = np.sort(rng.choice(np.arange(1, sk), size=parts - 1, replace=False))
    return [np.sort(piece) for piece in np.split(order, cuts)]


def _partials(Q, K, V, pieces, causal=False):
    """(O_k, L_k) for each key subset, plus the full (O, L) they must merge into."""
    s = default_scale(Q.shape[1], None)
    mask = visible(Q.shape[0], K.shape[0], causal)
    parts = [masked_attention(Q, K[idx], V[idx], s, mask[:, idx]) for idx in pieces]
    return parts, masked_attention(Q, K, V, s, mask)


def _problem(rng, n, sk, d, parts, spread=1.0, causal=False):
    Q = rng.normal(scale=spread, size=(n, d))
    K = rng.normal(size=(sk, d))
    V = rng.normal(size=(sk, d))
    return _partials(Q, K, V, _split(rng, sk, parts), causal)


# --- calling the user's functions ---------------------------------------------------------


def _desc(O, L) -> str:
    finite = L[np.isfinite(L)]
    span = f"L in [{finite.min():.4g}, {finite.max():.4g}]" if finite.size else "L all -inf"
    if finite.size and finite.size < L.size:
        span += f", {L.size - finite.size} rows -inf"
    return f"O[{O.shape[0]}x{O.shape[1]}], {span}"


WARNING_HINTS = {
    "overflow": "exp overflowed: never exponentiate L itself; shift by the larger L first, e^(L_k - max)",
    "invalid": ("NaN was computed: with a part at L = -inf, -inf - (-inf) (or inf - inf) appears; "
                "use a finite shift for rows where both parts are -inf"),
    "divide": ("log(0) or a division by 0: where both parts are -inf the total weight is 0; "
               "give those rows O = 0 and L = -inf directly"),
}


def call_merge(sub, O1, L1, O2, L2):
    call = Call("merge_partials", f"{_desc(O1, L1)}; {_desc(O2, L2)}")
    result = quiet_call(sub.merge_partials, call, O1.copy(), L1.copy(), O2.copy(), L2.copy(),
                        _hints=WARNING_HINTS)
    return (call, *pair(result, call, "O, L", (O1.shape, L1.shape)))


def call_many(sub, parts):
    call = Call("merge_many", f"{len(parts)} parts: " + "; ".join(_desc(O, L) for O, L in parts[:3])
                + ("; …" if len(parts) > 3 else ""))
    copies = [(O.copy(), L.copy()) for O, L in parts]
    result = quiet_call(sub.merge_many, call, copies, _hints=WARNING_HINTS)
    return (call, *pair(result, call, "O, L", (parts[0][0].shape, parts[0][1].shape)))


# --- naming the mistake --------------------------------------------------------------------


def _stable(O1, L1, O2, L2):
    m = np.maximum(L1, L2)
    shift = np.where(m == -np.inf, 0.0, m)
    w1, w2 = np.exp(L1 - shift), np.exp(L2 - shift)
    return w1, w2, shift


def diagnose_o(O1, L1, O2, L2, O) -> str:
    w1, w2, _ = _stable(O1, L1, O2, L2)
    total = np.where(w1 + w2 > 0, w1 + w2, 1.0)
    with np.errstate(all="ignore"):
        candidates = [
            ((w2[:, None] * O1 + w1[:, None] * O2) / total[:, None],
             "the weights are swapped: O1 gets e^(L1 - L) and O2 gets e^(L2 - L)"),
            ((O1 + O2) / 2, "O1 and O2 were averaged: weight each by its share of the mass, e^(L_k - L)"),
            (w1[:, None] * O1 + w2[:, None] * O2,
             "the weights e^(L_k - max) were not normalised: divide by their sum (that is, use e^(L_k - L))"),
            (O1 + O2, "O1 + O2 adds two normalised outputs: weight each by e^(L_k - L)"),
        ]
    for cand, hint in candidates:
        if matches(O, cand, atol=1e-8):
            return hint
    return ""


def diagnose_l(L1, L2, L) -> str:
    with np.errstate(all="ignore"):
        candidates = [
            (np.maximum(L1, L2), "L is just max(L1, L2): add log1p(exp(-|L1 - L2|)), L = log(e^L1 + e^L2)"),
            (L1, "L was left as L1: the merged L is log(e^L1 + e^L2)"),
            (L1 + L2, "L1 + L2 is the log of a product; the merged L is the log of a sum, log(e^L1 + e^L2)"),
            ((L1 + L2) / 2, "L is the mean of L1 and L2; the merged L is log(e^L1 + e^L2)"),
        ]
    for cand, hint in candidates:
        if matches(L, cand, atol=1e-8):
            return hint
    if not np.isfinite(L[np.isfinite(np.maximum(L1, L2))]).all():
        return "L overflowed: never exponentiate L itself; shift by the larger one, max + log1p(exp(-|L1 - L2|))"
    return ""


NAN_HINT = ("NaN: with L1 = L2 = -inf, L1 - max(L1, L2) is -inf - (-inf); use a finite shift for such rows "
            "and return O = 0, L = -inf")


def check_merge(sub, O1, L1, O2, L2, O_want, L_want, atol=O_ATOL):
    call, O, L = call_merge(sub, O1, L1, O2, L2)
    nan = NAN_HINT if np.isnan(O).any() or np.isnan(L).any() else ""
    close(O, O_want, call, atol=atol, rtol=O_RTOL, what="O", hint=nan or diagnose_o(O1, L1, O2, L2, O))
    close(L, L_want, call, atol=atol, rtol=L_RTOL, what="L", hint=nan or diagnose_l(L1, L2, L))
    return O, L


def diagnose_many(sub, parts, O, L) -> str:
    """Blame merge_partials if merge_many folds it faithfully; else name merge_many's slip."""
    if np.isnan(O).any() or np.isnan(L).any():
        return NAN_HINT
    try:
        O_f, L_f = parts[0]
        for Ok, Lk in parts[1:]:
            O_f, L_f = sub.merge_partials(O_f.copy(), L_f.copy(), Ok.copy(), Lk.copy())
    except Exception:  # noqa: BLE001 - merge_partials has its own checks
        return ""
    if matches(O, O_f, atol=1e-10) and matches(L, L_f, atol=1e-10):
        return "merge_many folds your merge_partials faithfully, so the mistake is in merge_partials (see its checks)"
    if len(parts) > 1 and matches(L, parts[0][1], atol=1e-12):
        return "merge_many returned the first part's L: carry the merged L forward after every merge"
    return ""


def check_many(sub, parts, O_want, L_want, atol=O_ATOL, hint=""):
    call, O, L = call_many(sub, parts)
    if not _ok(O, O_want, atol) or not _ok(L, L_want, atol):
        hint = hint or diagnose_many(sub, parts, O, L)
    close(O, O_want, call, atol=atol, rtol=O_RTOL, what="O", hint=hint)
    close(L, L_want, call, atol=atol, rtol=L_RTOL, what="L", hint=hint)
    return O, L


def _ok(got, want, atol) -> bool:
    if np.isnan(got).any() or max_error(got, want) == np.inf:
        return False
    both = np.isfinite(want)
    return bool(np.all(np.abs(got[both] - want[both]) <= atol + O_RTOL * np.abs(want[both])))


def _merged_reference(parts):
    """The exact merge of many parts, in float64 (for inputs not built from Q, K, V)."""
    Ls = np.stack([L for _, L in parts])  # [parts, n]
    m = Ls.max(axis=0)
    shift = np.where(m == -np.inf, 0.0, m)
    w = np.exp(Ls - shift)
    total = w.sum(axis=0)
    seen = total > 0
    total_safe = np.where(seen, total, 1.0)
    O = sum(wk[:, None] * Ok for wk, (Ok, _) in zip(w, parts)) / total_safe[:, None]
    return O, np.where(seen, shift + np.log(total_safe), -np.inf)


# --- the checks ------------------------------------------------------------------------------


def _drawn_shape(rng):
    """(n, d) drawn for this run, past any fixed tile of rows or head-dimension columns (32 rows, 8 or 16
    columns) that the small fixed shapes fit in."""
    return int(rng.integers(33, 600)), int(rng.integers(17, 160))


def test_two_halves(sub, rng):
    """Two halves of the keys merge into attention over all of them"""
    for n, sk, d in [(5, 12, 4), (16, 40, 8), (1, 2, 1), (None, 50, None)]:
        if n is None:
            n, d = _drawn_shape(rng)
        (p1, p2), (O_full, L_full) = _problem(rng, n, sk, d, 2)
        check_merge(sub, *p1, *p2, O_full, L_full)


def test_symmetric(sub, rng):
    """merge_partials(a, b) equals merge_partials(b, a)"""
    (p1, p2), _ = _problem(rng, 9, 25, 4, 2, spread=2.0)
    _, O_ab, L_ab = call_merge(sub, *p1, *p2)
    call, O_ba, L_ba = call_merge(sub, *p2, *p1)
    close(O_ba, O_ab, f"{call} (parts swapped)", atol=1e-12, rtol=1e-12, what="O with the parts swapped",
          hint="the merge must treat both parts alike: each O_k weighted by e^(L_k - L)")
    close(L_ba, L_ab, f"{call} (parts swapped)", atol=1e-12, rtol=1e-12, what="L with the parts swapped",
          hint=diagnose_l(p1[1], p2[1], L_ab) or "L = log(e^L1 + e^L2) is symmetric in the two parts")


def test_pairwise_random_splits(sub, rng):
    """Random splits into 2 to 8 parts, merged pair by pair, give full attention"""
    for parts in range(2, 9):
        pieces, (O_full, L_full) = _problem(rng, 7, 30, 4, parts, spread=1.5)
        O, L = pieces[0]
        for k, (Ok, Lk) in enumerate(pieces[1:], start=1):
            want = _merged_reference(pieces[:k + 1])
            O, L = check_merge(sub, O, L, Ok, Lk, *want)
        close(O, O_full, f"merge_partials folded over {parts} parts", atol=O_ATOL, rtol=O_RTOL, what="O")


def test_many_random_splits(sub, rng):
    """merge_many over random splits into 2 to 8 parts gives full attention"""
    # Then 13 and 33 parts: more than any fixed number of merge rounds or unrolled steps covers.
    # (The title stays as the planted files name it.)
    # Last, 2 and 5 parts of a shape drawn per run (many rows, a wide head).
    for parts, sk in [(p, 30) for p in range(2, 9)] + [(13, 30), (33, 40), (2, 50), (5, 50)]:
        n, d = (7, 4) if sk < 50 else _drawn_shape(rng)
        pieces, (O_full, L_full) = _problem(rng, n, sk, d, parts, spread=1.5)
        check_many(sub, pieces, O_full, L_full)


def _extreme_rows(rng, d=4):
    """Fixed rows of (L1, L2) where shortcuts break, with O_k drawn around them."""
    inf = np.inf
    pairs = [
        (1e4, 1e4 - 3.0), (1e4, 1e4), (-1e4, -1e4 + 5.0), (-1e4, -1e4), (1e4, -1e4), (5e3, 5e3 + 0.5),
        (-1e4, 1e4), (-750.0, 720.0),  # the second part far larger: shift by the max, not by L1
        # e^L subnormal or near overflow: log(e^L1 + e^L2) loses digits here, or overflows
        (-740.0, -740.0), (-742.0, -739.0), (-744.5, -710.0), (-708.5, -730.0), (-inf, -741.0), (-745.0, -inf),
        (709.5, 709.5), (709.7, 705.0), (-20.0, 709.0),
    ]
    # Parts far apart, the smaller one's O large: its share e^-gap is tiny but still counts.
    # (|O| stays <= 2e5: an exact merge written as O1 + share·(O2 - O1) loses ~1e-16·|O| to rounding.)
    gaps = [12.5, 16.0, 19.0, 22.0, 25.0, 27.5, 30.0]
    big = rng.uniform(-30.0, 30.0, size=len(gaps))
    flip = np.arange(len(gaps)) % 2 == 1  # the small part second, then first
    pairs += [(b - g, b) if f else (b, b - g) for b, g, f in zip(big, gaps, flip)]
    L1, L2 = (np.array(column) for column in zip(*pairs))
    O1, O2 = rng.normal(size=(len(pairs), d)), rng.normal(size=(len(pairs), d))
    for k, (g, f) in enumerate(zip(gaps, flip), start=len(pairs) - len(gaps)):
        small = O1 if f else O2
        # dropping it moves O by 1e-4 for gaps up to 20, then down to ~1e-8 (allowed: ~2e-9)
        small[k] *= min(np.exp(g) * 1e-4, 1e5) * rng.uniform(1.0, 2.0) / np.abs(small[k]).max()
    for O, L in ((O1, L1), (O2, L2)):
        O[L == -inf] = 0.0
    return O1, L1, O2, L2


def test_extreme_lse(sub, rng):
    """|L| up to 1e4 merges without overflow and stays exact"""
    d = 4
    O1, L1, O2, L2 = _extreme_rows(rng, d)
    want = _merged_reference([(O1, L1), (O2, L2)])
    check_merge(sub, O1, L1, O2, L2, *want, atol=1e-9)
    check_many(sub, [(O2, L2), (O1, L1)], *want, atol=1e-9)
    # The same rows with a third part halfway between the two: merge_many's path for 3 or more
    # parts meets the subnormal e^L and the far, large-O parts too (not only the pairwise one).
    L3 = (L1 + L2) / 2  # -inf where either part is -inf (never both here)
    O3 = rng.normal(size=O1.shape)
    O3[L3 == -np.inf] = 0.0
    three = [(O2, L2), (O3, L3), (O1, L1)]
    check_many(sub, three, *_merged_reference(three), atol=1e-9)
    # The same from attention with scores near ±1e4.
    Q = rng.normal(size=(8, d))
    Q = Q / np.linalg.norm(Q, axis=1, keepdims=True) * rng.uniform(2e3, 2e4, size=(8, 1))
    pieces, (O_full, L_full) = _partials(Q, rng.normal(size=(20, d)), rng.normal(size=(20, d)),
                                         _split(rng, 20, 3))
    check_many(sub, pieces, O_full, L_full, atol=1e-9)
    # Rows that large are almost one-hot: a part that holds every row's max hides a stale L.
    Q, K = near_ties(rng, 8, 20, d)
    pieces, (O_full, L_full) = _partials(Q, K, rng.normal(size=(20, d)), _split(rng, 20, 3))
    check_many(sub, pieces, O_full, L_full, atol=1e-9)


def test_empty_part(sub, rng):
    """A part with L = -inf contributes nothing"""
    n, d = 6, 4
    O1, L1 = rng.normal(size=(n, d)), rng.normal(size=n) * 3
    empty = (np.zeros((n, d)), np.full(n, -np.inf))
    check_merge(sub, O1, L1, *empty, O1, L1)
    check_merge(sub, *empty, O1, L1, O1, L1)
    # Causal attention split by keys: some rows see no key of a part, row by row.
    Q, K, V = rng.normal(size=(10, d)), rng.normal(size=(10, d)), rng.normal(size=(10, d))
    pieces, (O_full, L_full) = _partials(Q, K, V, [np.arange(0, 4), np.arange(4, 10)], causal=True)
    check_merge(sub, *pieces[0], *pieces[1], O_full, L_full)


def test_both_empty(sub, rng):
    """Both parts -inf give O = 0 and L = -inf, with no NaN and no warning"""
    n, d = 5, 3
    O1, L1 = rng.normal(size=(n, d)), rng.normal(size=n)
    L1[[1, 3]] = -np.inf
    O1[[1, 3]] = 0.0
    O2, L2 = np.zeros((n, d)), np.full(n, -np.inf)
    L2[[0, 4]] = [0.5, -2.0]
    O2[[0, 4]] = rng.normal(size=(2, d))
    want = _merged_reference([(O1, L1), (O2, L2)])
    check_merge(sub, O1, L1, O2, L2, *want)
    zeros, none = np.zeros((n, d)), np.full(n, -np.inf)
    check_merge(sub, zeros, none, zeros, none, zeros, none)
    check_many(sub, [(zeros, none)] * 3, zeros, none)
    # merge_many on the same mixed rows, as 2 and as 4 parts: rows 1 and 3 are empty in every part
    # while the other rows are not (a path for 3 or more parts that clamps the total mass before
    # its log gives those rows a finite L; only an all-empty input took the special case above).
    check_many(sub, [(O1, L1), (O2, L2)], *want)
    O3, L3 = np.zeros((n, d)), np.full(n, -np.inf)
    L3[[0, 2]] = rng.normal(size=2)
    O3[[0, 2]] = rng.normal(size=(2, d))
    four = [(O2, L2), (zeros, none), (O1, L1), (O3, L3)]
    check_many(sub, four, *_merged_reference(four))


def test_many_order(sub, rng):
    """merge_many gives the same result in any order of the parts"""
    pieces, _ = _problem(rng, 6, 24, 4, 4, spread=2.0)
    pieces[2][1][[0, 3]] = -np.inf  # an empty part for two rows
    pieces[2][0][[0, 3]] = 0.0
    _, O0, L0 = call_many(sub, pieces)
    for perm in itertools.islice(itertools.permutations(range(4)), 1, None, 5):
        call, O, L = call_many(sub, [pieces[k] for k in perm])
        hint = (f"parts in the order {perm} give another answer, but merging is commutative and associative: "
                "check that merge_partials weights each part by e^(L_k - L) and that merge_many carries "
                "the merged L forward")
        close(O, O0, call, atol=1e-12, rtol=1e-11, what="O in another order", hint=hint)
        close(L, L0, call, atol=1e-12, rtol=1e-12, what="L in another order", hint=hint)


def test_many_equals_pairwise(sub, rng):
    """merge_many equals repeated pairwise merges with merge_partials"""
    pieces, (O_full, L_full) = _problem(rng, 8, 33, 4, 5, spread=1.5)
    O, L = pieces[0]
    for Ok, Lk in pieces[1:]:
        _, O, L = call_merge(sub, O, L, Ok, Lk)
    call, O_many, L_many = call_many(sub, pieces)
    hint = "merge_many should fold the parts with merge_partials (or do the same arithmetic at once)"
    close(O_many, O, f"{call} vs folding merge_partials", atol=1e-12, rtol=1e-11, what="O", hint=hint)
    close(L_many, L, f"{call} vs folding merge_partials", atol=1e-12, rtol=1e-12, what="L", hint=hint)


def test_many_single_part(sub, rng):
    """merge_many of one part returns that part"""
    O1, L1 = rng.normal(size=(4, 3)), rng.normal(size=4)
    L1[2] = -np.inf
    O1[2] = 0.0
    check_many(sub, [(O1, L1)], O1, L1,
               hint="with a single part there is nothing to merge: return it (no IndexError on parts[1])")


@pytest.mark.observed
def test_inputs_untouched(sub, rng):
    """The input arrays are not modified"""
    # Each call at a small shape, then at a shape drawn like the largest the value checks merge (and
    # merge_many over more parts): an in-place path kept for large inputs shows too.
    for drawn in (False, True):
        n, d = _drawn_shape(rng) if drawn else (6, 4)
        _merge_leaves_inputs(sub, rng, n, d)
        _many_leaves_inputs(sub, rng, n, d, int(rng.integers(5, 34)) if drawn else 4)


def _merge_leaves_inputs(sub, rng, n, d):
    (p1, p2), _ = _problem(rng, n, 14, d, 2)
    # Rows where one part, or both, is empty (L = -inf, O = 0): a merge that patches the -inf
    # in place (L1[L1 == -inf] = ...) changes nothing on rows without one.
    for (O, L), rows in ((p1, [1, 4]), (p2, [4])):
        O[rows], L[rows] = 0.0, -np.inf
    arrays = [p1[0], p1[1], p2[0], p2[1]]
    before = [a.copy() for a in arrays]
    called = f"merge_partials(O1, L1, O2, L2) on O[{n}x{d}]"
    after = observed_call(sub.merge_partials, called, *arrays, return_args=True).args
    for name, now, then in zip(("O1", "L1", "O2", "L2"), after, before):
        if not matches(now, then, atol=0.0):
            fail(f"merge_partials changed its input {name} in place", called=called,
                 got=show(now), expected=show(then),
                 hint=("build new arrays (w * O1), don't scale O1 in place" if name.startswith("O") else
                       "don't patch the -inf rows of the caller's L in place (L[L == -inf] = ...): "
                       "use np.where or a finite shift instead"))


def _many_leaves_inputs(sub, rng, n, d, count):
    """merge_many, given the caller's own arrays (call_many hands it copies)."""
    parts, _ = _problem(rng, n, max(20, 2 * count), d, count)
    # Empty rows again, in unequal numbers per part (2, 0, 1, 3, ...): reordering the caller's list
    # (parts.sort(key=...)) or patching its -inf in place shows.
    for (O, L), rows in zip(parts, itertools.cycle(([0, 5], [], [5], [1, 3, 5]))):
        O[rows], L[rows] = 0.0, -np.inf
    before = [(O.copy(), L.copy()) for O, L in parts]
    called = ("merge_many([(O1, L1), (O2, L2), (O3, L3), (O4, L4)])" if count == 4 else
              f"merge_many([(O1, L1), …, (O{count}, L{count})]) on O[{n}x{d}]")
    after = observed_call(sub.merge_many, called, parts, return_args=True).args[0]
    if (not isinstance(after, (list, tuple)) or len(after) != len(before)
            or not all(isinstance(part, (list, tuple)) and len(part) == 2 for part in after)):
        fail("merge_many changed the list of parts it was given", called=called, got=show(after),
             hint="leave the caller's list as it is: work on a copy, list(parts)")
    same = [[matches(O_now, O_then, atol=0.0) and matches(L_now, L_then, atol=0.0) for O_then, L_then in before]
            for O_now, L_now in after]
    if (not all(row[k] for k, row in enumerate(same))
            and sorted(row.index(True) if any(row) else -1 for row in same) == list(range(len(before)))):
        fail("merge_many reordered the caller's list of parts in place", called=called,
             got="the same parts in another order",
             hint="leave the caller's list as it is: sort or reverse a copy (sorted(parts), list(parts))")
    for k, ((O_now, L_now), (O_then, L_then)) in enumerate(zip(after, before), start=1):
        for name, now, then in ((f"O{k}", O_now, O_then), (f"L{k}", L_now, L_then)):
            if not matches(now, then, atol=0.0):
                fail(f"merge_many changed the input {name} (of parts[{k - 1}]) in place", called=called,
                     got=show(now), expected=show(then),
                     hint="build new arrays for the running (O, L); don't write the merge into the caller's "
                          "parts (O[...] = or O *= ...)")


# What each function should return, for `drill check --repro` (values only reach the learner).
REFERENCES = {"merge_partials": lambda O1, L1, O2, L2: _merged_reference([(O1, L1), (O2, L2)]),
              "merge_many": lambda parts: _merged_reference(list(parts))}
