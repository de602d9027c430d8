"""Hidden checks for 01_online_softmax.py."""

import math

import numpy as np
import pytest

from drill.grader.expect import Call, array, close, fail, matches, show

WORKED = [np.array([1.0, 3.0]), np.array([2.0, 5.0])]


def reference_softmax(x):
    x = np.asarray(x, dtype=np.float64)
    m = np.max(x, axis=-1, keepdims=True)
    e = np.exp(x - m)
    return e / e.sum(axis=-1, keepdims=True)


def reference_update(m, l, block):
    m_new = max(m, float(np.max(block)))
    if m_new == -math.inf:
        return m_new, l
    return m_new, l * math.exp(m - m_new) + float(np.exp(block - m_new).sum())


# Known mistakes, each as the (m, l) it would produce: used to name the user's mistake.
def _not_rescaled(m, l, block):
    m_new = max(m, float(np.max(block)))
    return m_new, l + float(np.exp(block - m_new).sum())


def _inverted(m, l, block):
    m_new = max(m, float(np.max(block)))
    factor = math.exp(m_new - m) if m > -math.inf else 0.0
    return m_new, l * factor + float(np.exp(block - m_new).sum())


def _no_max(m, l, block):
    return max(m, float(np.max(block))), l + float(np.exp(block).sum())


UPDATE_MISTAKES = [
    (_not_rescaled, "l was not rescaled when the running max grew: multiply the old l by exp(m_old - m_new)"),
    (_inverted, "the rescale factor is inverted: use exp(m_old - m_new), which is at most 1, not exp(m_new - m_old)"),
    (_no_max, "the block's exponentials are not shifted by the running max: use exp(block - m_new)"),
]


def _as_pair(result, call):
    if not isinstance(result, tuple) or len(result) != 2:
        fail(f"{call} must return a pair (m_new, l_new)", called=str(call), got=show(result),
             expected="a tuple of two floats")
    try:
        return float(result[0]), float(result[1])
    except (TypeError, ValueError):
        fail(f"{call} returned something that is not two numbers", called=str(call), got=show(result))


def _step_through(sub, blocks, m0=-math.inf, l0=0.0):
    """Feed blocks to the user's update one by one; fail at the first block whose state differs.

    Each step starts from the reference state, so one mistake is reported where it happens.
    """
    ref_m, ref_l = m0, l0
    for index, block in enumerate(blocks, start=1):
        call = Call("online_softmax_update", f"m={ref_m:.6g}, l={ref_l:.6g}, block={show(block)}")
        got_m, got_l = _as_pair(sub.online_softmax_update(ref_m, ref_l, block.copy()), call)
        next_m, next_l = reference_update(ref_m, ref_l, block)
        stepped = []
        for fn, hint in UPDATE_MISTAKES:
            try:
                stepped.append((hint, *fn(ref_m, ref_l, block)))
            except (OverflowError, ValueError):
                pass  # this mistake cannot even produce a number here
        ok_m = got_m == next_m or (math.isfinite(next_m) and abs(got_m - next_m) <= 1e-12 * max(1, abs(next_m)))
        ok_l = math.isfinite(got_l) and abs(got_l - next_l) <= 1e-9 * max(1.0, abs(next_l))
        if not (ok_m and ok_l):
            hint = ""
            for mistake_hint, mm, ll in stepped:
                if abs(got_m - mm) <= 1e-9 * max(1, abs(mm)) and math.isfinite(ll) and abs(got_l - ll) <= 1e-9 * max(1, abs(ll)):
                    hint = mistake_hint
                    break
            if not hint and math.isnan(got_l) and all(float(b) == -math.inf for b in block):
                hint = "l became NaN: a block of only -inf gives exp(-inf - (-inf)); leave (m, l) unchanged then"
            elif not hint and not math.isfinite(got_l):
                hint = "l overflowed: shift every exponential by the new running max, exp(block - m_new)"
            if not hint and not ok_m:
                hint = "m_new must be max(m, max(block))"
            fail(f"(m, l) first differs from the reference after block {index}",
                 called=str(call), got=f"m={got_m:.6g}, l={got_l:.6g}",
                 expected=f"m={next_m:.6g}, l={next_l:.6g}", hint=hint)
        ref_m, ref_l = next_m, next_l


def test_worked_example(sub):
    """The worked example (1, 3 | 2, 5) stepped block by block"""
    _step_through(sub, WORKED)


def test_update_from_start_state(sub):
    """The first block from the start state m = -inf, l = 0"""
    _step_through(sub, [np.array([-2.5, 0.5, 0.25])])


def test_update_random_blocks(sub, rng):
    """Random rows streamed in blocks of 1 to 7, and of 50 and 300, give the one-shot statistics"""
    for trial in range(20):
        n = int(rng.integers(1, 40))
        x = rng.normal(scale=3.0, size=n)
        size = int(rng.integers(1, 8))
        blocks = [x[i:i + size] for i in range(0, n, size)]
        _step_through(sub, blocks)
    for n, size in ((170, 50), (700, 300)):  # long blocks: every logit of a block counts
        x = rng.normal(scale=3.0, size=n)
        _step_through(sub, [x[i:i + size] for i in range(0, n, size)])


def test_update_extreme_and_masked_blocks(sub):
    """Blocks of ±1e4 and of -inf keep (m, l) finite and exact"""
    _step_through(sub, [np.array([-1e4, -1e4 + 1.0]), np.array([1e4]), np.array([-1e4, 1e4 - 3.0])])
    _step_through(sub, [np.array([-np.inf, -np.inf]), np.array([0.5, -np.inf]), np.array([-np.inf])])


def _softmax_call(sub, x, block_size, what="the softmax"):
    call = Call("online_softmax", f"x={show(x)}, block_size={block_size}")
    got = array(sub.online_softmax(x.copy(), block_size), call, shape=x.shape, what=what)
    return call, got


def _diagnose_softmax(x, block_size, got):
    """Name the mistake if the output equals a known wrong variant."""
    rows = np.atleast_2d(x)
    per_block = np.concatenate(
        [reference_softmax(rows[:, i:i + block_size]) for i in range(0, rows.shape[1], block_size)], axis=1)
    if matches(got.reshape(rows.shape), per_block):
        return "each block was normalised on its own: keep one running (m, l) per row across all blocks"
    full = (rows.shape[1] // block_size) * block_size
    if 0 < full < rows.shape[1]:
        dropped = reference_softmax(rows[:, :full])
        if matches(got.reshape(rows.shape)[:, :full], dropped):
            return "the last, shorter block was skipped: loop with range(0, n, block_size)"
    return ""


@pytest.mark.parametrize("block_size", [1, 3, 4, 64], ids=lambda b: f"block {b}")
def test_softmax_matches_reference(sub, rng, block_size):
    """Rows of many lengths match softmax"""
    for n in (1, 2, 5, 12, 33):
        x = rng.normal(scale=4.0, size=n)
        call, got = _softmax_call(sub, x, block_size)
        close(got, reference_softmax(x), call, atol=1e-12, rtol=1e-9,
              hint=_diagnose_softmax(x, block_size, got))


def test_softmax_2d(sub, rng):
    """A 2-D array is softmaxed row by row along the last axis, however many rows it has"""
    # Tall arrays too (dozens of rows, more than a fixed tile of 8, 16 or 32 rows would hold), so every
    # row's own statistics are used, not those of a row a fixed stride earlier.
    # One row as a [1, n] array, and one column as [R, 1], keep their 2-D shape.
    for count, n, block_size in ((6, 11, 4), (None, 7, 3), (1, 9, 4), (5, 1, 3)):
        count = count or int(rng.integers(37, 70))
        x = rng.normal(scale=2.0, size=(count, n))
        call, got = _softmax_call(sub, x, block_size)
        hint = _diagnose_softmax(x, block_size, got)
        if not hint and matches(got, reference_softmax(x.T).T):
            hint = "softmax ran down the columns: normalise along the last axis"
        close(got, reference_softmax(x), call, atol=1e-12, rtol=1e-9, hint=hint)


def test_softmax_rows_keep_their_own_statistics(sub):
    """Rows at wildly different scales each keep their own running max and sum"""
    x = np.array([[1e4, 1e4 - 2.0, 1e4 - 1.0, 1e4 - 7.0, 1e4 - 3.0],
                  [-1e4, -1e4 - 1.0, -1e4 + 2.0, -1e4 - 4.0, -1e4 + 0.5],
                  [-np.inf, -np.inf, -np.inf, 3.0, -np.inf],
                  [0.5, -1.0, 2.0, 0.0, 1.5]])
    call, got = _softmax_call(sub, x, 2)
    want = reference_softmax(x)
    hint = ""
    if bool(np.isnan(got).any()) or not matches(got.sum(axis=1), np.ones(len(x)), atol=1e-6):
        hint = ("one running max is shared by every row (block.max() without an axis): a row near -1e4 then "
                "underflows to 0/0 beside a row near +1e4; take the max along the last axis, one m and l per row")
    close(got, want, call, atol=1e-12, rtol=1e-9, hint=hint, nan_hint=hint)


def test_softmax_extreme_logits(sub):
    """Logits of 1e4 and -1e4, and far lower (-1e6, -1e300, -1e308), give a finite, exact softmax"""
    # -1e308 leaves no room for a finite stand-in start max (-1e5, -1e300, ...) above the logits; only
    # -inf itself (or the most negative float) works. 1e293 is a few units in the last place there.
    extremes = (np.array([1e4, 1e4 - 1.0, 1e4 - 5.0, 0.0]), np.array([-1e4, -1e4 - 1.0, -1e4 - 2.0]),
                np.array([-1e6, -1e6 - 1.0, -1e6 - 3.0, -1e6 + 0.5]), np.array([-1e300, -2e300, -1e300, -3e300]),
                np.array([-1e308, -1.2e308, -1e308 - 1e293, -1e308]))
    # Then the same rows as one 2-D array (the short row padded with -inf), and the lowest alone as [1, n]:
    # a vectorised path for 2-D input needs the same start max as a single row.
    rows = np.stack([np.pad(x, (0, 4 - x.size), constant_values=-np.inf) for x in extremes])
    for x in (*extremes, rows, rows[-1:]):
        call, got = _softmax_call(sub, x, 2)
        hint = ""
        if not matches(np.isfinite(got), np.ones(got.shape)) or matches(got, np.zeros(got.shape)):
            hint = ("in 2-D too, every row's running max starts at -inf (not 0 nor any finite stand-in such as "
                    "-1e30), so exp never overflows or underflows to a zero sum" if x.ndim == 2 else
                    "every exponent must be shifted by the running max (which starts at -inf, not 0 nor any "
                    "finite stand-in such as -1e5), so exp never overflows or underflows to a zero sum")
        close(got, reference_softmax(x), call, atol=1e-12, rtol=1e-9, hint=hint)


def test_softmax_negative_infinity(sub):
    """-inf logits get probability 0, also when a whole block is -inf"""
    x = np.array([[-np.inf, -np.inf, 1.0, 2.0, -np.inf], [0.5, -np.inf, -np.inf, -np.inf, 3.0]])
    call, got = _softmax_call(sub, x, 2)
    close(got, reference_softmax(x), call, atol=1e-12, rtol=1e-9,
          nan_hint="a block of only -inf makes exp(-inf - (-inf)) = NaN: skip the rescale while the max is still -inf")


@pytest.mark.observed
def test_softmax_leaves_input_alone(sub, rng):
    """The input array is not modified"""
    # A 2-D array and a single row as a 1-D array (np.asarray does not copy either), at two block sizes;
    # then each as large as the largest the streaming check passes, so an in-place path kept for large
    # inputs shows too.
    for shape, block_size in (((3, 9), 4), ((13,), 5), ((12, 128_077), 128), ((200_501,), 1000)):
        x = rng.normal(size=shape)
        before = x.copy()
        x = sub.online_softmax.observe(x, block_size, return_args=True).args[0]
        if not matches(x, before, atol=0.0):
            fail("online_softmax changed its input array in place",
                 called=f"online_softmax(x[{'x'.join(map(str, shape))}], {block_size})",
                 hint="work on a copy, or write results into a new array")


# --- streaming, seen in the values ------------------------------------------------------------
#
# A running sum rounds once per addition. Two kinds of rows make that rounding a signature:
#
# * absorbing rows: every logit but the row's max (in the first block) sits below half a unit in
#   the last place of l, and a block's sum a little above a whole number of them, so each block
#   adds a whole number of units and drops the rest. The running l ends up measurably (about
#   1e-13) below the exact sum a one-shot softmax computes (np.sum is pairwise), by an amount that
#   depends on block_size.
# * late-max rows: l starts at 1 and every other logit adds 0.55 to 0.65 of a unit, until the
#   last block brings the row's max and the running sum is rescaled by alpha = exp(-M). Rescaling
#   an l that rounded on the old scale differs from summing on the final max's scale from the
#   start, so a one-shot max (np.cumsum or a Python sum after x.max()) lands elsewhere too.
#
# Two honest ways of keeping (m, l) pass: a block's terms summed at once (np.sum: the reference
# fold) or added to l one at a time (Python's sum, a loop over the block). Each lands on its own
# l, to a few units; a one-shot softmax, or blocks of another size, land elsewhere. A log-domain
# sum (np.logaddexp) is exact here, like a one-shot softmax, and cannot be told from one.
STREAM_BLOCKS = 6000  # blocks per row: the gap grows with their number, ~0.3 units of 2^-52 each
STREAM_RTOL = 3e-14   # honest variants (vectorised rows, lse tracking, exp2) measured within 4e-15
ULP_ONE = 2.0 ** -52
FAR_BELOW = -50.0     # exp(-50) ~ 2e-22: a block of them is nothing beside a term of 1, in any order


def absorbing_row(rng, block_size: int, n_blocks: int = STREAM_BLOCKS, odd: bool = False) -> np.ndarray:
    """A row whose streamed sum rounds block by block away from its exact sum (max 0 in the first block).

    odd: a block adds an odd number of units plus a little, so halving the block (blocks of b/2, or of
    b/4, ...) rounds every half up and lands a unit per block away from blocks of b.
    """
    b = block_size
    if b == 1:
        s = rng.uniform(0.2, 0.35)  # each term is absorbed outright: the running l never moves
    elif b == 2:
        s = 1.0 - rng.uniform(0.2, 0.35)  # each pair rounds up to one unit
    elif odd:
        s = 2 * int(rng.integers(0, int(b / 4 - 0.675) + 1)) + 1 + rng.uniform(0.2, 0.35)
    else:
        s = int(rng.integers(1, int(b / 2 - 0.35) + 1)) + rng.uniform(0.2, 0.35)
    x = np.full(n_blocks * b, math.log(s / b * ULP_ONE))
    # The rest of the max's block is far lower still (it adds exactly nothing in any order): a block sum
    # of 1 and tiny terms would absorb them in an order-dependent way (BLAS dot accumulators drop more
    # of them than np.sum's pairwise tree), which is honest rounding, not the block-by-block signature.
    x[:b] = FAR_BELOW
    x[int(rng.integers(0, b))] = 0.0
    return x


def late_max_row(rng, block_size: int, n_blocks: int = STREAM_BLOCKS) -> np.ndarray:
    """A row that starts at 0, adds just over half a unit per logit and meets its max in the last block."""
    n = n_blocks * block_size
    x = np.full(n, math.log(rng.uniform(0.55, 0.65) * ULP_ONE))
    x[0] = 0.0
    # alpha = exp(-M) in (0.67, 0.74): the rescaled tiny terms stay clearly below half a unit.
    x[n - block_size + int(rng.integers(0, block_size))] = rng.uniform(0.3, 0.4)
    return x


def _term_by_term_update(m, l, block):
    """reference_update with the block's terms added to l one at a time (np.cumsum is sequential)."""
    m_new = max(m, float(np.max(block)))
    if m_new == -math.inf:
        return m_new, l
    return m_new, float(np.cumsum(np.concatenate(([l * math.exp(m - m_new)], np.exp(block - m_new))))[-1])


def streamed_softmax(rows: np.ndarray, block_size: int, update=reference_update) -> np.ndarray:
    """The softmax a block-by-block (m, l) gives, rounding as it goes: `update` folded over each row."""
    out = np.empty_like(rows)
    for r, x in enumerate(rows):
        m, l = -math.inf, 0.0
        for i in range(0, x.shape[0], block_size):
            m, l = update(m, l, x[i:i + block_size])
        out[r] = np.exp(x - m) / l
    return out


def _rel_gap(got, want) -> float:
    return float(np.max(np.abs(got - want) / np.abs(want)))


def _folds_like(got, rows, block_size) -> bool:
    """got is what one of the honest folds at block_size gives."""
    return bool(np.all(np.isfinite(got))) and any(
        _rel_gap(got, streamed_softmax(rows, block_size, update)) <= STREAM_RTOL
        for update in (reference_update, _term_by_term_update))


def _streaming_hint(got, rows, block_size) -> str:
    if not np.all(np.isfinite(got)):
        return ""
    e = np.exp(rows - rows.max(axis=1, keepdims=True))
    for one_shot in (e / e.sum(axis=1, keepdims=True), e / np.cumsum(e, axis=1)[:, -1:]):
        if _rel_gap(got, one_shot) <= STREAM_RTOL:
            return ("this is a one-shot softmax (one max and one sum over the whole row): the running sum was not "
                    "built block by block; loop over the columns in blocks of block_size and update m and l per "
                    "block (the rounding of a running sum differs measurably from a single sum here). A running "
                    "sum kept as a log (np.logaddexp), compensated (Kahan) or wider (np.longdouble) rounds like a "
                    "one-shot sum too: keep l itself, a plain float64 sum")
    for other in (128, 64, 37, 32, 16, 8, 4, 2):
        # The largest (cheapest to fold) first; folds of many blocks take seconds, and a fixed small
        # block size shows already at block_size = 1, on a short row.
        if other != block_size and rows.shape[1] // other <= 4 * STREAM_BLOCKS and _folds_like(got, rows, other):
            return (f"the values match streaming in blocks of {other}, not of block_size = {block_size}: "
                    "step through the columns block_size at a time")
    return ""


def _check_streams(sub, rows, block_size, what):
    call = Call("online_softmax", what)
    got = array(sub.online_softmax(rows.copy(), block_size), call, shape=rows.shape, what="the softmax")
    folded = np.atleast_2d(rows)
    if _folds_like(np.atleast_2d(got), folded, block_size):
        return
    got = np.atleast_2d(got)
    want = streamed_softmax(folded, block_size)
    fail("online_softmax does not round like a running (m, l) kept block by block",
         called=str(call), got=f"largest relative gap to a block-by-block fold: {_rel_gap(got, want):.3g}",
         expected=f"within {STREAM_RTOL:g} of folding online_softmax_update over blocks of {block_size}",
         hint=_streaming_hint(got, folded, block_size))


def test_softmax_streams_in_blocks(sub, rng):
    """online_softmax keeps its running sum block by block, at the block size asked for"""
    # Blocks of 128, 1000 and 4096 (fewer of them: still a gap of ~1e-13 or more, in less time) catch a cap
    # on block_size (a fixed tile of 64 or 1024 columns): the odd absorbing row rounds otherwise in smaller
    # blocks.
    # Some rows end in a shorter last block (tail > 0) and every row is also passed alone as a 1-D array,
    # so neither ragged rows nor 1-D input can take a one-shot path that the other shapes do not.
    for block_size, n_blocks, tail in ((1, STREAM_BLOCKS, 0), (4, STREAM_BLOCKS, 3), (37, STREAM_BLOCKS, 0),
                                       (128, 1000, 77), (1000, 200, 501), (4096, 300, 1500)):
        # At blocks of 128 the three kinds of row come four times over (12 rows): every row is checked,
        # so streaming only the first few rows of a 2-D array and softmaxing the rest in one go fails.
        rows = np.stack([make(rng, block_size, n_blocks)
                         for _ in range(4 if block_size == 128 else 1)
                         for make in (absorbing_row,
                                      lambda g, b, k: absorbing_row(g, b, k, odd=b > 37),
                                      late_max_row)])
        if tail:  # a shorter last block of tiny logits (each row's most common one), after the row's max
            rows = np.concatenate([rows, np.repeat(np.median(rows, axis=1, keepdims=True), tail, axis=1)], axis=1)
        _check_streams(sub, rows, block_size,
                       f"x[{rows.shape[0]}x{rows.shape[1]}] (logits 0, tiny ones and a late max), "
                       f"block_size={block_size}")
        for r, row in enumerate(rows[:3]):
            _check_streams(sub, row, block_size,
                           f"x[{row.shape[0]}] (row {r} of the above, as a 1-D array), block_size={block_size}")


# What each function should return, for `drill check --repro` (values only reach the learner).
REFERENCES = {"online_softmax_update": reference_update,
              "online_softmax": lambda x, block_size: reference_softmax(x)}
