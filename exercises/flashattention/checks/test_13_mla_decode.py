"""Hidden checks for 13_mla_decode.py."""

from __future__ import annotations

import math

import numpy as np
import pytest

from drill import iocount
from drill.grader.expect import Call, array, close, fail, matches, note

from ._attention_reference import WATCHED_VALUES_HINT, check_reads_seen, observed_call, peak_bytes
from ._mla_reference import Mla, default_scale, draw, naive, streamed

ATOL, RTOL = 1e-10, 1e-9

WARNING_HINTS = {
    "overflow": "exp overflowed: subtract each head's running max score before exponentiating",
    "invalid": ("NaN was computed: rows of the cache at or past seq_len hold NaN and must never be read, "
                "or exp(-inf - (-inf)) appeared on the first block"),
}

# (H, d_c, d_nope, d_rope, d_v): small versions of DeepSeek's shapes and some awkward ones.
CONFIGS = {
    "DeepSeek-like ratios": [(8, 32, 16, 8, 16), (16, 64, 32, 16, 32)],
    "d_c == d_nope": [(4, 12, 12, 4, 12)],
    "d_v != d_nope": [(6, 20, 8, 4, 10), (3, 9, 5, 3, 7)],
    "one head": [(1, 16, 8, 4, 8)],
    "d_rope = 1": [(5, 10, 6, 1, 4)],
}


# Every call is watched: c_kv and k_rope are recorded as views (a slice logs nothing until it is
# used, so a prefix sliced once and then used whole for every head shows each use). A call that
# was not watched could be told apart from one that was, and run other code.
RECORD = {2: ["c_kv", "views"], 3: ["k_rope", "views"]}


def watched_bytes(x: Mla) -> int:
    """What watching adds to a call's memory: a placeholder array beside each recorded input."""
    return x.c_kv.nbytes + x.k_rope.nbytes


def describe_call(x: Mla, kw: dict) -> Call:
    return Call("mla_decode", x.describe() + "".join(f", {k}={v:.6g}" if isinstance(v, float) else f", {k}={v}"
                                                    for k, v in kw.items()))


def check_reads(call: Call, x: Mla, block: int, log) -> None:
    """Rows 0 .. seq_len - 1 of c_kv and k_rope, each read once, through the arrays, at most `block` at a time."""
    S, seq_len = x.c_kv.shape[0], x.seq_len
    reads, truncated = iocount.summarize(log, {"c_kv": S, "k_rope": S}, blocks={"c_kv": block, "k_rope": block})
    for name, r in reads.items():
        if not truncated and r.covered == 0:
            part = ("the RoPE part of the score, q_rope[h] · k_rope[t]" if name == "k_rope" else
                    "the latent part of the score, (W_uk[h] q_nope[h]) · c_kv[t], and the weighted sum")
            fail(f"{name} was never read", called=str(call), got=f"no row of {name} read",
                 expected=f"rows 0 .. {seq_len - 1}, each once",
                 hint=(f"every score needs {name}: {part}; the values came out right here only because this "
                       f"input hides that part. If you did use it, slice the array you were given "
                       f"({name}[lo:hi]) rather than a converted copy"))
    check_reads_seen(call, {name: iocount.Reads(seq_len, r.rows, r.largest, min(r.covered, seq_len), r.passes)
                            for name, r in reads.items()}, truncated)
    for name, r in reads.items():
        spans = [entry[1:3] for entry in log or [] if isinstance(entry, list) and len(entry) in (4, 5)
                 and entry[0] == name and isinstance(entry[2], int)]
        past = max((stop for _, stop in spans), default=0)
        if past > seq_len:
            fail(f"rows of {name} up to {past - 1} were read, past seq_len - 1 = {seq_len - 1}", called=str(call),
                 got=f"{name} read up to row {past - 1}", expected=f"rows 0 .. {seq_len - 1} only",
                 hint=(f"the whole cache was used ({name}.T, {name} @ ..., or a loop to len({name})) and the rows "
                       "past seq_len masked afterwards: they may hold NaN, so stop the loop at seq_len"))
        if r.largest > block:
            fail(f"{name} was read {r.largest} rows at a time; blocks of at most block = {block} rows were asked for",
                 called=str(call), got=f"largest read of {name}: {r.largest} rows",
                 expected=f"at most {block} rows per read",
                 hint=(f"walk the cache in blocks of the `block` rows you were given ({name}[lo:lo + block], "
                       "never more) with the online softmax, whatever the length of the cache"))
        if r.rows > seq_len:
            fail(f"{name} was read {r.rows / seq_len:.3g} times over (observed)", called=str(call),
                 got=f"{r.rows} rows of {name} read", expected=f"{seq_len}: each row once, for all heads at once",
                 hint=("a loop over heads that walks the whole cache for every head (or a two-pass softmax: one "
                       "pass for the max, one for the sum) reads the cache again and again; decode is bound by "
                       "these reads. Absorb the query of every head, score each block for all H heads at once "
                       "([H, b]) and keep a running max and sum per head"))


def watched_call(sub, x: Mla, call: Call, _hints: dict | None = None, **kw):
    """The user's o (unchecked) and a function that checks the reads of that call, to run after its values."""
    outcome = observed_call(sub.mla_decode, call, *x.args(), record=RECORD, _hints=_hints or WARNING_HINTS, **kw)
    return outcome.result, lambda: check_reads(call, x, kw.get("block", 256), outcome.reads)


def call_mla(sub, x: Mla, _hints: dict | None = None, **kw):
    """The user's o, checked for type, shape and numpy warnings (`_hints`: what each warning means here),
    and the check of its reads, to run once its values are checked."""
    call = describe_call(x, kw)
    result, reads = watched_call(sub, x, call, _hints, **kw)
    H, d_c, d_nope, d_rope, d_v, S = x.shape
    return call, array(result, call, shape=(H, d_v), what="o"), reads


# --- naming the mistake --------------------------------------------------------------------


def diagnose(x: Mla, kw: dict, o: np.ndarray) -> str:
    """Name the mistake if o equals a known wrong variant; else say which head goes wrong first."""
    H, d_c, d_nope, d_rope, d_v, S = x.shape
    scale, block = kw.get("scale"), kw.get("block", 256)
    n = x.seq_len
    candidates = []
    if scale is None:
        candidates += [
            (lambda: naive(x, 1.0 / math.sqrt(d_nope)),
             "the default scale is 1/√(d_nope + d_rope): the key is the nope part and the RoPE part "
             "together, so its width is d_nope + d_rope, not d_nope"),
            (lambda: naive(x, 1.0 / math.sqrt(d_c)),
             "the default scale is 1/√(d_nope + d_rope), the width of the per-head key, not 1/√d_c: "
             "absorbing W_uk changes where the dot product is taken, not its value"),
            (lambda: naive(x, 1.0 / math.sqrt(d_c + d_rope)),
             "the default scale is 1/√(d_nope + d_rope), not 1/√(d_c + d_rope): the scores are those "
             "of the per-head keys, whatever space you compute them in"),
            (lambda: naive(x, 1.0), "the scores were not scaled: multiply by 1/√(d_nope + d_rope)"),
        ]
    else:
        candidates += [
            (lambda: naive(x, None),
             "scale=0.0 was replaced by the default (`scale or ...` treats 0.0 as missing): test `scale is None`"
             if scale == 0.0 else "the scale argument was ignored: use it when it is given"),
            (lambda: naive(x, 1.0), "the scores were not multiplied by scale"),
        ]
        if scale < 0:
            candidates.append((lambda: naive(x, -scale),
                               "the negative scale was used as its absolute value: use scale as given, its sign "
                               "included (the weights then favour the lowest scores)"))
    candidates += [
        (lambda: naive(x, scale, rope=False),
         "the RoPE part of the score is missing: add q_rope[h] · k_rope[t], the same k_rope row for every head"),
        (lambda: naive(x, scale, nope=False),
         "the latent (nope) part of the score is missing: add (W_uk[h] q_nope[h]) · c_kv[t]"),
        (lambda: naive(x, scale, uv="head0"),
         "every head used W_uv[0]: head h's value is c_kv @ W_uv[h], so up-project with its own matrix"),
        (lambda: naive(x, scale, uk="head0"),
         "every head used W_uk[0]: absorb each head's own W_uk[h] into its query"),
        (lambda: naive(x, scale, rows=n - 1) if n > 1 else None,
         "the last cached row (seq_len - 1) was left out: attend over rows 0 .. seq_len - 1"),
        (lambda: streamed(x, block, scale, rescale_acc=False),
         "the latent accumulator was not rescaled when the running max grew: multiply it by "
         "exp(m_old - m_new), just like l"),
        (lambda: streamed(x, block, scale, rescale_l=False),
         "l was not rescaled when the running max grew: l = exp(m_old - m_new) · l + rowsum(p)"),
        (lambda: streamed(x, block, scale, drop_ragged=True),
         "the last, shorter block of the cache was dropped: loop over range(0, seq_len, block)"),
        (lambda: streamed(x, block, scale, per_block=True),
         "each block was normalised on its own and the blocks averaged: keep a running max and sum "
         "across blocks (the online softmax) and divide once at the end"),
    ]
    if d_c == d_nope:
        candidates.insert(0, (lambda: naive(x, scale, uk="transposed"),
                              "W_uk[h] was used transposed: head h's key is c_kv @ W_uk[h] ([S, d_c] @ "
                              "[d_c, d_nope]), so the absorbed query is W_uk[h] @ q_nope[h], of width d_c"))
    with np.errstate(all="ignore"):
        for make, hint in candidates:
            cand = make()
            if cand is not None and matches(o, cand, atol=1e-8):
                return hint
    want = naive(x, scale)
    bad = np.flatnonzero(~np.isclose(o, want, atol=1e-8, rtol=1e-8).all(axis=1))
    return f"the first wrong head is h = {int(bad[0])}" if bad.size else ""


NAN_HINT = ("o has NaN: rows of the cache at or past seq_len hold NaN; read only c_kv[:seq_len] and "
            "k_rope[:seq_len] (a masked score is not enough: 0 · NaN is NaN in p @ c). Every call is watched, so "
            "an input converted by np.asarray or np.array (c_kv whole or a slice of it) or a buffer also holds NaN "
            "placeholders: use the slices c_kv[lo:hi] themselves, or c_kv[lo:hi].copy() for a local tile")


def check_mla(sub, x: Mla, *, atol=ATOL, **kw) -> np.ndarray:
    call, o, reads = call_mla(sub, x, **kw)
    want = naive(x, kw.get("scale"))
    if np.isnan(o).any():
        close(o, want, call, atol=atol, rtol=RTOL, what="o", nan_hint=NAN_HINT)
    if not matches(o, want, atol=atol * 100):
        close(o, want, call, atol=atol, rtol=RTOL, what="o", hint=diagnose(x, kw, o))
    close(o, want, call, atol=atol, rtol=RTOL, what="o")
    reads()
    return o


# --- the checks ------------------------------------------------------------------------------


def test_small(sub, rng):
    """A small cache (H = 4, S = 40, block = 16) matches naive MLA with per-head keys and values"""
    x = draw(rng, 4, 16, 8, 4, 8, 40)
    check_mla(sub, x, block=16)
    # Reversed, every head whose max fell in the first block meets it late: the running max must move.
    x.c_kv, x.k_rope = x.c_kv[::-1].copy(), x.k_rope[::-1].copy()
    check_mla(sub, x, block=16)


@pytest.mark.parametrize("case", list(CONFIGS), ids=list(CONFIGS))
def test_configs(sub, rng, case):
    """Matches naive MLA for several head counts and widths (H, d_c, d_nope, d_rope, d_v)"""
    for H, d_c, d_nope, d_rope, d_v in CONFIGS[case]:
        check_mla(sub, draw(rng, H, d_c, d_nope, d_rope, d_v, 150, spread=1.5), block=32)


def test_block_sizes(sub, rng):
    """Any block size: one row, a ragged last block, one block longer than the cache"""
    x = draw(rng, 4, 16, 8, 4, 8, 97)
    for block in (1, 7, 32, 96, 97, 500):
        check_mla(sub, x, block=block)


def test_default_block(sub, rng):
    """The default block (256 rows) works when block is not passed, on a cache of 700 rows"""
    x = draw(rng, 4, 16, 8, 4, 8, 700)
    check_mla(sub, x)
    # Reversed too: a head whose max fell in the first block meets it in the last one (the running max moves).
    x.c_kv, x.k_rope = x.c_kv[::-1].copy(), x.k_rope[::-1].copy()
    check_mla(sub, x)


def test_seq_len_shorter_than_cache(sub, rng):
    """Rows at or past seq_len are never read: they hold NaN and must not change o"""
    for S, seq_len, block in [(100, 37, 16), (64, 64, 16), (300, 257, 256), (50, 1, 8), (80, 48, 16)]:
        check_mla(sub, draw(rng, 4, 16, 8, 4, 8, S, seq_len), block=block)


def test_one_token(sub, rng):
    """A cache of one token: every head returns that token's value, c_kv[0] @ W_uv[h]"""
    x = draw(rng, 6, 12, 8, 4, 5, 10, 1)
    call, o, reads = call_mla(sub, x, block=4)
    want = np.einsum("c,hcv->hv", x.c_kv[0], x.W_uv)
    hint = ("with one visible row the softmax weight is 1, so o[h] = c_kv[0] @ W_uv[h]"
            + ("; NaN came from rows past seq_len (or from an input converted whole)" if np.isnan(o).any() else ""))
    close(o, want, call, atol=ATOL, rtol=RTOL, what="o", hint=diagnose(x, {"block": 4}, o) or hint, nan_hint=hint)
    reads()


def test_rope_part_shared(sub, rng):
    """The decoupled RoPE key is one head shared by every query head (the latent part switched off)"""
    x = draw(rng, 8, 16, 8, 6, 8, 90, spread=2.0)
    x.q_nope[:] = 0.0  # scores come from q_rope[h] · k_rope[t] alone
    check_mla(sub, x, block=16)


def test_latent_part_alone(sub, rng):
    """The absorbed latent part alone (q_rope = 0): scores are q_nope[h] · (c_kv[t] @ W_uk[h])"""
    x = draw(rng, 8, 16, 8, 6, 8, 90, spread=2.0)
    x.q_rope[:] = 0.0
    check_mla(sub, x, block=16)


def test_explicit_scale(sub, rng):
    """An explicit scale replaces 1/√(d_nope + d_rope), 0.0 (uniform weights) and a negative one included"""
    x = draw(rng, 4, 16, 8, 4, 8, 60)
    for scale in (0.37, 2.0, 0.0, -0.6):
        check_mla(sub, x, block=16, scale=scale)


def test_large_logits(sub, rng):
    """Scores of magnitude up to 1e4 neither overflow nor lose accuracy"""
    x = draw(rng, 6, 16, 8, 4, 8, 120)
    x.q_nope *= 800.0 / np.linalg.norm(x.q_nope, axis=1, keepdims=True)
    x.q_rope *= 2000.0 / np.linalg.norm(x.q_rope, axis=1, keepdims=True)
    check_mla(sub, x, block=16, atol=1e-8)


def test_heads_at_different_scales(sub, rng):
    """Heads whose scores sit near +1e4 and -1e4 keep their own running max"""
    x = draw(rng, 4, 16, 8, 4, 8, 64)
    x.k_rope[:, 0] = 1.0  # every key has 1 there, so q_rope[h, 0] shifts head h's scores as a whole
    x.q_rope[:, 0] = np.array([1e4, -1e4, 0.0, 5e3]) * math.sqrt(12)
    hint = ("one running max was shared by every head (s.max() without axis=1): a head near -1e4 underflows "
            "beside one near +1e4; keep m and l per head")
    # Every score is finite and no row lies past seq_len, so NaN here is 0 / 0: a head's sum underflowed
    # to 0 under a max that is not its own, not the NaN the default hint names.
    underflow = ("NaN was computed (0 / 0): the sum of a head whose scores sit near -1e4 underflowed to 0, so its "
                 "exponentials were shifted by a max that is not its own (one running max shared by every head, "
                 "s.max() without axis=1, or a running max started at 0 instead of -inf); keep m and l per head")
    call, o, reads = call_mla(sub, x, block=16, _hints={**WARNING_HINTS, "invalid": underflow})
    if not matches(o, naive(x), atol=1e-8):
        hint = diagnose(x, {"block": 16}, o) or hint
    close(o, naive(x), call, atol=1e-9, rtol=RTOL, what="o", hint=hint, nan_hint=hint)
    reads()


# Peak memory: a long cache with many heads and a narrow latent. Per-head keys or values
# [H, S, d_nope] (256 MiB) and an [H, S] (or [S, H]) float64 score array (32 MiB) stand far
# above the streaming loop, which holds little beside its inputs (c_kv 4 MiB, k_rope 1 MiB).
MEMORY_SHAPE = dict(H=128, d_c=16, d_nope=8, d_rope=4, d_v=8, S=32768)
MEMORY_LIMIT_BYTES = 20 * 2**20
WIDE_HEADS_SHAPE = dict(H=16, d_c=4, d_nope=64, d_rope=4, d_v=64, S=2**18)
WIDE_HEADS_SLACK_BYTES = 12 * 2**20
# Two more calls with the head count, every width, the block and the scale drawn: a short cache
# (1024 to 2048 rows, per-head keys [H, S, d_nope] of 16 MiB or more: d_nope grows as S shrinks)
# and a long one (2^15 to 2^16 rows). Code that is naive only below the fixed sizes above (per-head
# keys, one head's keys [S, d_nope], or the live cache copied whole into a local buffer and then
# softmaxed any way at all) holds 9 MiB or more beyond its inputs in one of them; a block's work,
# per-block keys and values [H, b, d] included, stays below the slack. Below a few MiB, memory cannot
# tell a naive call from a streamed one.
DRAWN_SLACK_BYTES = 6 * 2**20
DRAWN_CACHE_ROWS = {"short": (2**10, 2**11), "long": (2**15, 2**16)}


def draw_drawn_shape(rng, rows: tuple[int, int]) -> tuple[Mla, dict]:
    """A call unlike the fixed ones: H 16..32, d_c 32..48, d_v 24..48, S in `rows`, d_nope 24..48 or
    more (per-head keys of 16 MiB at least), block 16..48, a signed scale half the time."""
    H, d_c, d_rope, d_v = int(rng.integers(16, 33)), int(rng.integers(32, 49)), int(rng.integers(4, 9)), \
        int(rng.integers(24, 49))
    S = int(rng.integers(rows[0], rows[1] + 1))
    d_nope = max(int(rng.integers(24, 49)), math.ceil(16 * 2**20 / (8 * H * S)))
    x = draw(rng, H, d_c, d_nope, d_rope, d_v, S, S - int(rng.integers(0, 64)))
    kw = {"block": int(rng.integers(16, 49))}
    if rng.random() < 0.5:
        kw["scale"] = float(rng.choice([-1.0, 1.0]) * rng.uniform(0.1, 0.4))
    return x, kw


@pytest.mark.peak_memory
def test_memory(sub, rng):
    """Peak memory on a long latent cache (H = 128, S = 32768) stays far below an [H, S] score array"""
    sh = MEMORY_SHAPE
    x = draw(rng, sh["H"], sh["d_c"], sh["d_nope"], sh["d_rope"], sh["d_v"], sh["S"], sh["S"] - 5)
    scale = float(rng.uniform(0.2, 0.4))  # given explicitly here (the wide-heads call below uses the default)
    call = describe_call(x, {"block": 256, "scale": scale})
    # Watched like every other call; the placeholders watching adds are not the code's own memory.
    peak, (result, reads) = peak_bytes(watched_call, sub, x, call, block=256, scale=scale)
    peak -= watched_bytes(x)
    H, S = sh["H"], sh["S"]
    scores_mib = H * S * 8 / 2**20
    keys_mib = H * S * sh["d_nope"] * 8 / 2**20
    if peak > MEMORY_LIMIT_BYTES:
        fail(f"mla_decode held {peak / 2**20:.1f} MiB at its peak: that is an [H, S] array or per-head keys, "
             "not a streamed cache", called=str(call), got=f"peak memory {peak / 2**20:.1f} MiB during the call",
             expected=(f"under {MEMORY_LIMIT_BYTES / 2**20:.0f} MiB (an [H, S] float64 score array is "
                       f"{scores_mib:.0f} MiB, per-head keys [H, S, d_nope] {keys_mib:.0f} MiB; the cache "
                       f"itself is {S * (sh['d_c'] + sh['d_rope']) * 8 / 2**20:.0f} MiB)"),
             hint=("absorb W_uk into the query (q_lat[h] = W_uk[h] @ q_nope[h], [H, d_c]) and W_uv after the "
                   "weighted sum, then walk the cache in blocks of `block` rows with a running max and sum: "
                   "only an [H, block] score tile exists at a time"))
    note(f"peak memory during the call: {peak / 2**20:.1f} MiB (limit {MEMORY_LIMIT_BYTES / 2**20:.0f} MiB; an "
         f"[H, S] score array alone is {scores_mib:.0f} MiB)")
    o = array(result, call, shape=(H, sh["d_v"]), what="o")
    heads = np.sort(rng.choice(H, 16, replace=False))  # drawn after the call, checked against the naive form
    small = Mla(x.q_nope[heads], x.q_rope[heads], x.c_kv, x.k_rope, x.W_uk[heads], x.W_uv[heads], x.seq_len)
    close(o[heads], naive(small, scale), call, atol=ATOL, rtol=RTOL, what="o (16 heads drawn at random)",
          hint="memory is fine, but o is wrong at this size; the other checks name the mistake")
    reads()
    # Wide heads over a narrow latent: one head's keys [S, d_nope] are 128 MiB, eight times the cache,
    # so building them even one head at a time stands far above the inputs and a little slack.
    sh = WIDE_HEADS_SHAPE
    x = draw(rng, sh["H"], sh["d_c"], sh["d_nope"], sh["d_rope"], sh["d_v"], sh["S"], sh["S"] - 3)
    call = describe_call(x, {"block": 256})
    held = sum(a.nbytes for a in x.args() if isinstance(a, np.ndarray))
    peak, (result, reads) = peak_bytes(watched_call, sub, x, call, block=256)
    peak -= watched_bytes(x)
    if peak > held + WIDE_HEADS_SLACK_BYTES:
        fail(f"mla_decode held {(peak - held) / 2**20:.1f} MiB beyond its inputs: one head's keys or values over "
             "the whole cache were built", called=str(call), got=f"peak memory {peak / 2**20:.1f} MiB during the call",
             expected=(f"under {(held + WIDE_HEADS_SLACK_BYTES) / 2**20:.0f} MiB: the inputs ({held / 2**20:.0f} MiB) "
                       f"and {WIDE_HEADS_SLACK_BYTES / 2**20:.0f} MiB for a block's work; one head's keys [S, d_nope] "
                       f"are {sh['S'] * sh['d_nope'] * 8 / 2**20:.0f} MiB"),
             hint=("c_kv @ W_uk[h] over the whole cache builds that head's keys: absorb W_uk into the query "
                   "instead (q_lat[h] = W_uk[h] @ q_nope[h]) and score the latent rows block by block"))
    o = array(result, call, shape=(sh["H"], sh["d_v"]), what="o")
    close(o, streamed(x, 4096), call, atol=ATOL, rtol=RTOL, what="o (wide heads)",
          hint="memory is fine, but o is wrong at this size; the other checks name the mistake")
    reads()
    # Drawn shapes, a short and a long cache, so that no fixed size tells the measured calls apart.
    for length, rows in DRAWN_CACHE_ROWS.items():
        x, kw = draw_drawn_shape(rng, rows)
        call = describe_call(x, kw)
        held = sum(a.nbytes for a in x.args() if isinstance(a, np.ndarray))
        peak, (result, reads) = peak_bytes(watched_call, sub, x, call, **kw)
        peak -= watched_bytes(x)
        H, d_c, d_nope, d_rope, d_v, S = x.shape
        if peak > held + DRAWN_SLACK_BYTES:
            fail(f"mla_decode held {(peak - held) / 2**20:.1f} MiB beyond its inputs on a {length} cache of {S} rows: "
                 "it was not streamed", called=str(call), got=f"peak memory {peak / 2**20:.1f} MiB during the call",
                 expected=(f"under {(held + DRAWN_SLACK_BYTES) / 2**20:.0f} MiB: the inputs ({held / 2**20:.0f} MiB) "
                           f"and {DRAWN_SLACK_BYTES / 2**20:.0f} MiB for a block's work; per-head keys [H, S, d_nope] "
                           f"are {H * S * d_nope * 8 / 2**20:.0f} MiB, one head's {S * d_nope * 8 / 2**20:.1f} MiB, "
                           f"a copy of the live cache {x.seq_len * (d_c + d_rope) * 8 / 2**20:.1f} MiB"),
                 hint=("whatever the size of the cache, hold one block of it at a time: absorb W_uk into the query, "
                       "score each block of `block` rows for all heads ([H, b]) with a running max and sum, and "
                       "up-project at the end; no per-head keys or values over the cache, no local copy of it"))
        o = array(result, call, shape=(H, d_v), what="o")
        close(o, streamed(x, 4096, kw.get("scale")), call, atol=ATOL, rtol=RTOL, what=f"o ({length} drawn cache)",
              hint="memory is fine, but o is wrong at this size; the other checks name the mistake")
        reads()


@pytest.mark.observed
def test_reads_cache_once(sub, rng):
    """The latent cache is read once, rows 0 .. seq_len - 1 only, for any number of heads and scale"""
    S, seq_len = 200, 150
    # Twice, the default scale and an explicit one, each with a head count and a block size drawn anew
    # (8 or more heads in one): a loop over heads re-reads the cache H times, however few or many heads.
    # Rows past seq_len hold 0.0 here, not NaN, so reading them is named by the read log, not by NaN.
    for H, scale in [(int(rng.integers(2, 33)), None), (int(rng.integers(8, 33)), float(rng.uniform(0.2, 0.5)))]:
        block = int(rng.integers(5, 40))
        x = draw(rng, H, 16, 8, 4, 8, S, seq_len, poison=0.0)
        kw = {"block": block} if scale is None else {"block": block, "scale": scale}
        call = describe_call(x, kw)
        # A block reused while it is the one in use (scores, then the weighted sum) is read once, as a
        # kernel keeps it on chip.
        result, reads = watched_call(sub, x, call, **kw)
        o = array(result, call, shape=(H, 8), what="o")
        close(o, naive(x, scale), call, atol=ATOL, rtol=RTOL, what="o", hint="the other checks name the mistake",
              nan_hint=WATCHED_VALUES_HINT)
        reads()


@pytest.mark.observed
def test_inputs_untouched(sub, rng):
    """q_nope, q_rope, the cache (c_kv, k_rope), W_uk and W_uv are not modified, under the default scale and a given one"""
    # Watched like every other call: the cache arrays come back as the values they hold after the
    # call (NaN past seq_len, as passed in), not as the placeholders watching puts in their memory.
    for kw in ({"block": 16}, {"block": 16, "scale": -0.6}, {"block": 7, "scale": 1.3}, {"block": 8, "scale": 0.0}):
        x = draw(rng, 5, 12, 8, 4, 6, 50, 41)
        call = describe_call(x, kw)
        outcome = observed_call(sub.mla_decode, call, *x.args(), record=RECORD, _hints=WARNING_HINTS,
                                return_args=True, **kw)
        after = outcome.args or []
        for i, label, then in ((0, "q_nope", x.q_nope), (1, "q_rope", x.q_rope), (2, "c_kv", x.c_kv),
                               (3, "k_rope", x.k_rope), (4, "W_uk", x.W_uk), (5, "W_uv", x.W_uv)):
            now = after[i] if len(after) > i else None
            if not (isinstance(now, np.ndarray) and now.shape == then.shape
                    and np.array_equal(now, then, equal_nan=True)):
                whose = ("the model weights" if label.startswith("W") else
                         "the cache, read again at every later decode step" if label in ("c_kv", "k_rope") else
                         "the query")
                fail(f"mla_decode changed its input {label} in place", called=str(call),
                     hint=(f"{label} is the caller's ({whose}): c_kv[lo:hi] is a view, so r *= scale writes into "
                           "the cache; scale the scores, (q_lat @ c.T + q_rope @ r.T) * scale, or a copy "
                           "(q_nope * scale), never an input in place or an out= into one"))


# What the function should return, for `drill check --repro` (values only reach the learner).
REFERENCES = {"mla_decode": lambda q_nope, q_rope, c_kv, k_rope, W_uk, W_uv, seq_len, block=256, scale=None:
              naive(Mla(q_nope, q_rope, c_kv, k_rope, W_uk, W_uv, seq_len), scale)}
