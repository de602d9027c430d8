"""Hidden checks for 09_paged_attention.py."""

from __future__ import annotations

import numpy as np
import pytest

from drill.grader.expect import Call, array, close, fail, matches

from ._attention_reference import WATCHED_VALUES_HINT, observed_call, peak_bytes, quiet_call
from ._paged_reference import Pool, build_pool, gathered, probe, reference

ATOL, RTOL = 1e-10, 1e-9

WARNING_HINTS = {
    "overflow": "exp overflowed: subtract each row's max score before exponentiating",
    "invalid": ("NaN was computed: a slot past seq_len or a page outside the block table was read "
                "(they may hold NaN), or exp(-inf - (-inf)) appeared"),
}


def _queries(rng, B, Hq, d, spread=1.0):
    return rng.normal(scale=spread, size=(B, Hq, d))


# Every call hands over pools that record which pages are read, as the watched check's do, so
# code cannot tell the watched call from the others. The value checks decide on values alone:
# the reads they saw are kept here, and the watched check (observed) judges them with its own.
RECORD = {1: "k_pages", 2: "v_pages"}
SEEN_READS: list = []  # (call, reads, pool, sub) of every call_paged in this run


def call_paged(sub, q, pool, scale=None):
    kw = {} if scale is None else {"scale": scale}
    args = f"q[{q.shape[0]}x{q.shape[1]}x{q.shape[2]}], {pool.describe()}"
    call = Call("paged_decode", args + (f", scale={scale:.6g}" if scale is not None else ""))
    outcome = observed_call(sub.paged_decode, call, q.copy(), pool.k_pages.copy(), pool.v_pages.copy(),
                            pool.block_table.copy(), pool.seq_lens.copy(), record=RECORD,
                            _hints=WARNING_HINTS, **kw)
    if SEEN_READS and SEEN_READS[0][3] is not sub:  # another submission's run in this process
        SEEN_READS.clear()
    SEEN_READS.append((call, outcome.reads, pool, sub))
    return call, array(outcome.result, call, shape=(q.shape[0], q.shape[1], pool.v_pages.shape[3]), what="o")


def _used_whole(call) -> bool:
    """Whether the last call_paged (this one) used all of a pool at once (a conversion gets NaN)."""
    if not SEEN_READS or SEEN_READS[-1][0] is not call:
        return False
    _, reads, pool, _ = SEEN_READS[-1]
    n = pool.k_pages.shape[0]
    return any(isinstance(e, list) and len(e) >= 4 and e[1] == 0 and e[2] == n and e[3] == n for e in reads or [])


def live_pages(pool) -> set:
    """The physical pages that hold some sequence's keys: block_table[b, :ceil(seq_lens[b] / page_size)]."""
    ps = pool.page_size
    return {int(p) for b, n in enumerate(pool.seq_lens) for p in pool.block_table[b, :-(-int(n) // ps)]}


def check_reads(call, reads, pool, span: tuple[int, int] | None = None) -> None:
    """Fail on an access of k_pages or v_pages that reached a page no sequence holds (observed).

    A gather is logged by its smallest and largest page (a -1 index wrapped to the pool's last
    page), and both were read: each must be a live page. With span = (lo, hi), the live pages are
    exactly lo .. hi - 1, so every page of the logged range must lie in it."""
    num_pages = pool.k_pages.shape[0]
    live = live_pages(pool)
    lo, hi = span if span is not None else (min(live), max(live) + 1)
    for entry in reads or []:
        if not (isinstance(entry, list) and len(entry) in (4, 5) and entry[0] in ("k_pages", "v_pages")):
            continue
        name, start, stop, rows = entry[:4]
        inside = lo <= start < stop <= hi if span is not None else (start in live and stop - 1 in live)
        if inside:
            continue
        # A gather logs its smallest and largest page; a negative index (-1) is logged wrapped, as
        # the pool's last page, so the entry then starts at num_pages - 1.
        where = f"{name}[{start}:{stop}]" if start < stop else f"{name}[-1] (page {start}) among others"
        if start <= 0 and stop >= num_pages:
            hint = (f"all of {name} was used at once ({name}.reshape, {name}[:, ...], a numpy function over the "
                    "whole pool): the pool holds every sequence's pages and pages no one references; gather "
                    f"sequence b's pages by number, {name}[block_table[b, :ceil(seq_len / page_size)]]")
        elif (start == num_pages - 1 or stop == num_pages) and num_pages - 1 not in live:
            hint = ("the pool's last page was read, which no sequence references: a -1 entry of the block table "
                    f"indexes {name}[-1]. Use only the first ceil(seq_len / page_size) entries (a seq_len that "
                    "is a multiple of page_size needs no page past its last full one)")
        else:
            hint = ("a page no sequence references was read: use only the pages block_table[b, :ceil(seq_len / "
                    "page_size)] names")
        expected = (f"only pages {lo} .. {hi - 1}, the ones the block table names; pages 0 .. {lo - 1} and "
                    f"{hi} .. {num_pages - 1} are referenced by no sequence" if span is not None else
                    f"only the pages the block tables name: {sorted(live)}")
        fail(f"pages of {name} outside the block tables were read (observed)", called=str(call),
             got=f"{where} read ({rows} page{'s' if rows != 1 else ''} in that access)",
             expected=expected, hint=hint)


# --- naming the mistake --------------------------------------------------------------------


def _nan_hint(o, pool) -> str:
    rows = sorted({int(b) for b in np.argwhere(np.isnan(o))[:, 0]})
    partial = [b for b in rows if pool.seq_lens[b] % pool.page_size]
    if partial:
        b = partial[0]
        return (f"o has NaN for sequence {b} (seq_len {int(pool.seq_lens[b])}, page_size {pool.page_size}): "
                f"the slots past seq_len in its last page were read; keep only the first seq_lens[b] keys")
    return (f"o has NaN for sequence {rows[0]}: a page outside its block table was read (an entry of -1 "
            "indexes k_pages[-1], the pool's last page); use only the first ceil(seq_len / page_size) entries")


def diagnose(sub, q, pool, scale, o, rng) -> str:
    Hq, Hkv = q.shape[1], pool.k_pages.shape[2]
    group = Hq // Hkv
    if matches(o, reference(q, pool, scale, head_map="mod"), atol=1e-8):
        return (f"query head h read KV head h % Hkv; with groups of {group} consecutive query heads it is "
                f"h // (Hq // Hkv): heads 0..{group - 1} share KV head 0")
    d = q.shape[2]
    if scale is None:
        wrongs = [(1.0, "the scores were not scaled (scale = 1/√d when scale is None)"),
                  (1.0 / d, "the default scale is 1/√d, not 1/d")]
        wrongs += [(1.0 / np.sqrt(other), f"the default scale is 1/√d with this call's d = {d}, not 1/√{other}: "
                                          "take d from q.shape") for other in (8, 16, 64, 128) if other != d]
    elif scale == 0:
        wrongs = [(None, "scale=0.0 was replaced by the default 1/√d (`scale or 1/√d` treats 0.0 as missing): "
                         "test `scale is None`; with scale 0 every live key weighs the same")]
    else:
        wrongs = [(None, "the scale argument was ignored: use it when it is given")]
        if scale < 0:
            wrongs.append((-scale, "a negative scale was used as its magnitude: use the value as given"))
    for wrong, hint in wrongs:
        if matches(o, reference(q, pool, wrong), atol=1e-8):
            return hint
    # Run again on a pool whose poison is finite, so a wrong read shows as a value, not NaN.
    probed = probe(pool, rng)
    try:
        o_p = np.asarray(sub.paged_decode(q.copy(), probed.k_pages.copy(), probed.v_pages.copy(),
                                          pool.block_table.copy(), pool.seq_lens.copy(),
                                          **({} if scale is None else {"scale": scale})), dtype=np.float64)
    except Exception:  # noqa: BLE001 - the failing call already reported the error
        o_p = None
    rules = [
        ("identity", "logical page p was read as physical page p: the block table maps it, "
                     "key t of sequence b is in page block_table[b, t // page_size], slot t % page_size"),
        ("floor", "the partial last page was dropped: a sequence holds ceil(seq_len / page_size) pages"),
        ("whole-pages", "every slot of the last page was read: slots past seq_len hold garbage; cut the "
                        "gathered keys to seq_lens[b] rows"),
        ("whole-table", "every entry of the block-table row was read, -1 included (k_pages[-1] is the pool's "
                        "last page): use only the first ceil(seq_len / page_size) entries"),
    ]
    if o_p is not None and o_p.shape == o.shape:
        if np.isnan(o).any() and matches(o_p, reference(q, probed, scale), atol=1e-8):
            return ("with finite garbage past seq_len your result is right, but NaN there leaks through: "
                    "masking those scores to -inf is not enough, since 0 · NaN = NaN in p @ V; "
                    "cut the gathered keys and values to seq_lens[b] rows")
        for rule, hint in rules:
            got = gathered(probed, rule)
            if got is not None and matches(o_p, reference(q, probed, scale, keys=got[0], values=got[1]),
                                           atol=1e-8):
                return hint
    if np.isnan(o).any():
        return _nan_hint(o, pool)
    want = reference(q, pool, scale)
    bad = np.argwhere(~np.isclose(o, want, atol=1e-8))
    if bad.size:
        b, h = int(bad[0][0]), int(bad[0][1])
        return (f"the first wrong output is sequence {b} (seq_len {int(pool.seq_lens[b])}), query head {h} "
                f"(KV head {h // group})")
    return ""


def check_paged(sub, rng, q, pool, scale=None, atol=ATOL):
    call, o = call_paged(sub, q, pool, scale)
    want = reference(q, pool, scale)
    if not matches(o, want, atol=atol * 10) or np.isnan(o).any():
        hint = WATCHED_VALUES_HINT if np.isnan(o).any() and _used_whole(call) else diagnose(sub, q, pool, scale, o, rng)
        close(o, want, call, atol=atol, rtol=RTOL, what="o", hint=hint, nan_hint=hint)
    close(o, want, call, atol=atol, rtol=RTOL, what="o")
    return o


# --- the checks ------------------------------------------------------------------------------


def test_one_sequence(sub, rng):
    """One sequence with its pages in order matches attention over its cached keys, for head dims d = 8, 16 and 5"""
    for d in (8, 16, 5):
        pool = build_pool(rng, [37], 8, 2, d, spare=0, shuffle=False, poison=0.0)
        check_paged(sub, rng, _queries(rng, 1, 4, d), pool)


def test_page_boundaries(sub, rng):
    """seq_len just below, at and just past a page boundary, for page sizes 16, 12 and 5; block tables with a -1 column and without one (a row its pages fill)"""
    for ps, lens in [(16, (15, 16, 17, 1, 32, 33)), (12, (11, 12, 13, 24, 25)), (5, (4, 5, 6, 10, 11))]:
        for n in lens:
            pool = build_pool(rng, [n], ps, 2, 8)
            check_paged(sub, rng, _queries(rng, 1, 4, 8), pool)
            full = np.ascontiguousarray(pool.block_table[:, :-(-n // ps)])  # no -1 entry at all
            pool = Pool(pool.k_pages, pool.v_pages, full, pool.seq_lens, pool.keys, pool.values)
            check_paged(sub, rng, _queries(rng, 1, 4, 8), pool)
    pool = build_pool(rng, [40, 23, 17], 8, 2, 8)  # the longest row full, the others ending in -1
    pool = Pool(pool.k_pages, pool.v_pages, np.ascontiguousarray(pool.block_table[:, :5]), pool.seq_lens,
                pool.keys, pool.values)
    check_paged(sub, rng, _queries(rng, 3, 4, 8), pool)


def test_partial_last_page_poisoned(sub, rng):
    """NaN in the unused slots of each sequence's last page never reaches the result"""
    pool = build_pool(rng, [5, 21, 30, 9], 8, 2, 8, spare=0)
    check_paged(sub, rng, _queries(rng, 4, 4, 8), pool)


def test_unreferenced_pages_poisoned(sub, rng):
    """Pages no sequence references hold NaN and are never read"""
    pool = build_pool(rng, [16, 24, 8], 8, 1, 8, spare=6)
    check_paged(sub, rng, _queries(rng, 3, 2, 8), pool)


def test_pages_out_of_order(sub, rng):
    """The block table maps logical pages to physical pages in any order"""
    pool = build_pool(rng, [40, 23], 4, 2, 8, spare=2)
    while (pool.block_table[:, 1:3] > pool.block_table[:, :2]).all():  # a shuffle that left it in order
        pool = build_pool(rng, [40, 23], 4, 2, 8, spare=2)
    check_paged(sub, rng, _queries(rng, 2, 4, 8), pool)


def test_very_different_lengths(sub, rng):
    """Sequences of very different lengths (1 to 1500 keys) in one batch"""
    pool = build_pool(rng, [1, 300, 17, 2, 1500, 64], 16, 2, 8)
    check_paged(sub, rng, _queries(rng, 6, 4, 8), pool)


def test_shared_prefix(sub, rng):
    """Several sequences share the physical pages of a common prompt prefix"""
    # A long conversation (4500 keys, past a 4096-key sliding window) shares the prompt too.
    pool = build_pool(rng, [40, 35, 57, 4500], 8, 2, 8, shared_prefix_pages=3)
    assert (pool.block_table[:, :3] == pool.block_table[0, :3]).all()
    check_paged(sub, rng, _queries(rng, 4, 4, 8), pool)


def test_gqa_groups(sub, rng):
    """GQA: query head h reads KV head h // (Hq // Hkv), for groups of 2, 4 and 8, and of 3 and 1 (MHA)"""
    for Hq, Hkv in [(4, 2), (8, 2), (16, 2), (12, 3), (6, 2), (15, 5), (4, 4)]:
        pool = build_pool(rng, [19, 26], 8, Hkv, 8)
        check_paged(sub, rng, _queries(rng, 2, Hq, 8, spread=2.0), pool)


def test_mqa(sub, rng):
    """MQA: every query head reads the single KV head (Hkv = 1)"""
    for Hq in (1, 6):
        pool = build_pool(rng, [13, 30], 8, 1, 8)
        check_paged(sub, rng, _queries(rng, 2, Hq, 8, spread=2.0), pool)


def test_explicit_scale(sub, rng):
    """An explicit scale replaces 1/√d, 0.0 and negative values included"""
    pool = build_pool(rng, [20, 11], 8, 2, 8)
    for scale in (0.37, 2.0, 0.0, -0.6):
        check_paged(sub, rng, _queries(rng, 2, 4, 8), pool, scale=scale)


def test_large_scores(sub, rng):
    """Scores of magnitude up to 1e3 neither overflow nor lose accuracy"""
    pool = build_pool(rng, [25, 40], 8, 2, 8)
    q = _queries(rng, 2, 4, 8)
    q = q / np.linalg.norm(q, axis=2, keepdims=True) * 1e3
    check_paged(sub, rng, q, pool, atol=1e-8)


# Finite sentinels, where NaN could be hidden by np.nan_to_num: keys this large dominate every
# softmax they reach (scores near ±1e6), and values this large move o by ~1e6 for any weight
# above 1e-12. Read and masked correctly they weigh exactly 0 and change nothing. Garbage drawn
# like the live keys cannot be told from them by its values: only seq_lens and the table can.
SENTINEL = 1e6


def test_unused_slots_hold_finite_garbage(sub, rng):
    """Slots past seq_len and unreferenced pages hold finite garbage (huge, or drawn like the live keys) that never reaches the result"""
    for lens, ps, hkv, spare, poison in [([5, 21, 30, 9], 8, 2, 4, SENTINEL), ([1, 17, 40], 16, 1, 6, SENTINEL),
                                         ([7, 26, 12], 8, 2, 5, "draws")]:
        pool = build_pool(rng, lens, ps, hkv, 8, spare=spare, poison=poison)
        # the pool's last page (what a -1 table entry reads) is a spare one, full of sentinels
        last = pool.k_pages.shape[0] - 1
        if (pool.block_table == last).any():
            b, p = np.argwhere(pool.block_table == last)[0]
            spare_page = next(i for i in range(last) if not (pool.block_table == i).any())
            for arr in (pool.k_pages, pool.v_pages):
                arr[[last, spare_page]] = arr[[spare_page, last]]
            pool.block_table[pool.block_table == last] = -2
            pool.block_table[pool.block_table == spare_page] = last
            pool.block_table[pool.block_table == -2] = spare_page
        q = _queries(rng, len(lens), 2 * hkv, 8)
        call, o = call_paged(sub, q, pool)
        want = reference(q, pool)
        hint = ""
        if not matches(o, want, atol=ATOL * 10):
            fix = ("gather only the first ceil(seq_len / page_size) pages and cut the keys and values to "
                   "seq_lens[b] rows (finite garbage there has no NaN to show it, and np.nan_to_num hides nothing)")
            hint = "a slot past seq_len or a page outside the block table reached the result: " + fix
            for rule, text in [("whole-pages", "every slot of the last page was read, past seq_len"),
                               ("whole-table", "every entry of the block-table row was read, -1 included "
                                               "(k_pages[-1] is the pool's last page)")]:
                got = gathered(pool, rule)
                if got is not None and matches(o, reference(q, pool, keys=got[0], values=got[1]), atol=1e-6):
                    hint = text + ": " + fix
                    break
        close(o, want, call, atol=ATOL, rtol=RTOL, what="o", hint=hint, nan_hint=hint)


# A block table far wider than any sequence needs (room for long sequences to come): every entry
# past a sequence's pages is -1. Gathering a whole row reads 2^15 pages (k_pages[-1] each time):
# 32 MiB of keys per sequence, and as much of values. The pages a sequence holds are a few KiB.
WIDE_TABLE = 1 << 15
WIDE_BUDGET_BYTES = 12 * 2**20


@pytest.mark.peak_memory
def test_wide_block_table_memory(sub, rng):
    """Only the pages a sequence holds are gathered: a block table 32768 entries wide costs no memory"""
    ps, hkv, d = 16, 1, 8
    pool = build_pool(rng, [20, 37], ps, hkv, d, spare=2)
    table = np.full((2, WIDE_TABLE), -1, dtype=np.int64)
    table[:, :pool.block_table.shape[1]] = pool.block_table
    pool = Pool(pool.k_pages, pool.v_pages, table, pool.seq_lens, pool.keys, pool.values)
    q = _queries(rng, 2, 2, d)
    call = Call("paged_decode", f"q[2x2x{d}], {pool.describe()}")
    peak, result = peak_bytes(quiet_call, sub.paged_decode, call, q.copy(), pool.k_pages.copy(), pool.v_pages.copy(),
                              pool.block_table.copy(), pool.seq_lens.copy(), _hints=WARNING_HINTS)
    row_bytes = WIDE_TABLE * ps * hkv * d * 8
    if peak > WIDE_BUDGET_BYTES:
        fail(f"paged_decode held {peak / 2**20:.1f} MiB at its peak for two sequences of 20 and 37 keys",
             called=str(call), got=f"peak memory {peak / 2**20:.1f} MiB during the call (inputs included)",
             expected=(f"under {WIDE_BUDGET_BYTES / 2**20:.0f} MiB: the live pages are a few KiB; gathering every "
                       f"entry of a table row ({WIDE_TABLE} pages, -1 read as the pool's last page) is "
                       f"{row_bytes / 2**20:.0f} MiB of keys alone"),
             hint="every entry of the block-table row was gathered, -1 included: use only the first "
                  "ceil(seq_len / page_size) entries, block_table[b, :ceil(seq_lens[b] / page_size)]")
    o = array(result, call, shape=(2, 2, d), what="o")
    close(o, reference(q, pool), call, atol=ATOL, rtol=RTOL, what="o",
          hint="memory is fine, but o is wrong; the other checks name the mistake")

# --- which pages are read (observed inside your process) ----------------------------------------


def _pool_between_spares(rng, lens, ps, hkv, d, front, back) -> Pool:
    """A pool whose referenced pages are physical pages front .. front + live - 1 (in shuffled
    order), between unreferenced pages of finite garbage: front of them first, back of them last
    (the last is what a -1 table entry reads). A read of any unreferenced page shows in the log
    as a row outside that range, whatever the indices' order."""
    inner = build_pool(rng, lens, ps, hkv, d, spare=0, poison="draws")
    k, v = ((np.concatenate([rng.normal(size=(front, ps, hkv, d)), arr, rng.normal(size=(back, ps, hkv, d))])
             for arr in (inner.k_pages, inner.v_pages)))
    table = np.where(inner.block_table >= 0, inner.block_table + front, -1)
    return Pool(k, v, table, inner.seq_lens, inner.keys, inner.values)


# Configurations of the watched check: code that reads the whole pool only for some shapes (MQA,
# one sequence, a page size or group that is not a power of two, an explicit scale) meets its own.
# (lens, page_size, Hq, Hkv, d, scale): lens of 32 and 8 end on a page boundary of 8.
WATCHED = [([32, 21, 8, 45], 8, 4, 2, 8, None), ([13, 30, 5], 5, 3, 1, 5, 0.0), ([24], 12, 6, 2, 16, 0.5),
           ([7, 40], 4, 4, 4, 8, None)]


@pytest.mark.observed
def test_reads_only_referenced_pages(sub, rng):
    """Only the pages a sequence references are read: no unreferenced page (before, after or between them), no page a -1 table entry points at (MHA, GQA, MQA; several page sizes)"""
    front, back = 3, 3
    for lens, ps, Hq, hkv, d, scale in WATCHED:
        pool = _pool_between_spares(rng, lens, ps, hkv, d, front, back)
        num_pages = pool.k_pages.shape[0]
        q = _queries(rng, len(lens), Hq, d)
        kw = {} if scale is None else {"scale": scale}
        call = Call("paged_decode", f"q[{len(lens)}x{Hq}x{d}], {pool.describe()}"
                    + (f", scale={scale:.6g}" if scale is not None else ""))
        outcome = observed_call(sub.paged_decode, call, q.copy(), pool.k_pages.copy(), pool.v_pages.copy(),
                                pool.block_table.copy(), pool.seq_lens.copy(), record=RECORD,
                                _hints=WARNING_HINTS, **kw)
        check_reads(call, outcome.reads, pool, span=(front, num_pages - back))  # the referenced pages
        o = array(outcome.result, call, shape=(len(lens), Hq, d), what="o")
        close(o, reference(q, pool, scale), call, atol=ATOL, rtol=RTOL, what="o",
              hint="the other checks name the mistake", nan_hint=WATCHED_VALUES_HINT)
    # Unreferenced pages between the referenced ones: a slab from the first live page to the last
    # reads them, though both its ends are live.
    for lens, ps, Hq, hkv, d, scale, ends_live in WATCHED_INTERLEAVED:
        pool = _pool_interleaved(rng, lens, ps, hkv, d, ends_live)
        q = _queries(rng, len(lens), Hq, d)
        kw = {} if scale is None else {"scale": scale}
        call = Call("paged_decode", f"q[{len(lens)}x{Hq}x{d}], {pool.describe()}"
                    + (f", scale={scale:.6g}" if scale is not None else ""))
        outcome = observed_call(sub.paged_decode, call, q.copy(), pool.k_pages.copy(), pool.v_pages.copy(),
                                pool.block_table.copy(), pool.seq_lens.copy(), record=RECORD,
                                _hints=WARNING_HINTS, **kw)
        check_reads(call, outcome.reads, pool)
        check_no_slabs(call, outcome.reads, pool)
        o = array(outcome.result, call, shape=(len(lens), Hq, d), what="o")
        close(o, reference(q, pool, scale), call, atol=ATOL, rtol=RTOL, what="o",
              hint="the other checks name the mistake", nan_hint=WATCHED_VALUES_HINT)
    # The calls of the checks run before this one, on every other shape and option: the first and
    # last page of each access must be pages a sequence holds.
    for call, reads, pool, seen_by in SEEN_READS:
        if seen_by is sub:
            check_reads(call, reads, pool)


# Configurations where referenced and unreferenced pages alternate: with ends_live False,
# physical page 2i + 1 is live page i and every even page (the first and the last, which a -1
# entry reads, included) is referenced by no sequence; with ends_live True, page 2i is live page
# i, so the pool's first and last pages are live and the unreferenced ones are all inside. Every
# seq_len is even and so is B: a gather of one sequence's pages or tokens (or of the padded
# batch's) then never logs as many rows as the pages it spans (an odd count), which only a slice
# of consecutive pages (or the whole pool) does.
# (lens, page_size, Hq, Hkv, d, scale, ends_live)
WATCHED_INTERLEAVED = [([12, 30, 6, 22], 4, 4, 2, 8, None, False), ([18, 40], 5, 3, 1, 5, -0.5, False),
                       ([20, 8, 34, 14], 6, 6, 3, 8, None, True)]


def _pool_interleaved(rng, lens, ps, hkv, d, ends_live) -> Pool:
    inner = build_pool(rng, lens, ps, hkv, d, spare=0, poison="draws")
    live = inner.k_pages.shape[0]
    first = 0 if ends_live else 1
    k, v = (rng.normal(size=(2 * live - 1 + 2 * first, ps, hkv, d)) for _ in "kv")
    k[first::2][:live], v[first::2][:live] = inner.k_pages, inner.v_pages
    table = np.where(inner.block_table >= 0, 2 * inner.block_table + first, -1)
    return Pool(k, v, table, inner.seq_lens, inner.keys, inner.values)


def check_no_slabs(call, reads, pool) -> None:
    """Fail on an access that took a run of consecutive pages with an unreferenced one inside it
    (a slice k_pages[lo:hi] from a sequence's first page to its last, or the batch's): its first
    and last page are live, so check_reads passes it, but it reads every page between."""
    live = live_pages(pool)
    for entry in reads or []:
        if not (isinstance(entry, list) and len(entry) in (4, 5) and entry[0] in ("k_pages", "v_pages")):
            continue
        name, start, stop, rows = entry[:4]
        dead = [p for p in range(start, stop) if p not in live]
        if stop - start > 1 and rows == stop - start and dead:
            fail(f"a run of consecutive pages of {name} was read, unreferenced pages among them (observed)",
                 called=str(call), got=f"{name}[{start}:{stop}] read ({rows} pages in that access); pages "
                                        f"{dead[:6]}{' …' if len(dead) > 6 else ''} in it are referenced by no sequence",
                 expected=f"only the pages the block tables name: {sorted(live)}",
                 hint=(f"all of {name} was used at once ({name}.reshape, a numpy function over the whole pool), "
                       "which reads the unreferenced pages between the referenced ones"
                       if start == 0 and stop == pool.k_pages.shape[0] else
                       "the pages between a sequence's first and last page (or the batch's) are not its pages: "
                       f"a slice {name}[lo:hi] reads all of them")
                 + f". Gather the pages by number, {name}[block_table[b, :ceil(seq_len / page_size)]]")


@pytest.mark.observed
def test_inputs_untouched(sub, rng):
    """q, k_pages, v_pages, block_table and seq_lens are left as they were: the pool is the cache every later step reads (observed)"""
    # Watched like every other call (the pools come back as the values they hold after the call, NaN
    # poison included), with shared prefix pages, a group, MQA, and the default, a negative and a zero scale.
    for lens, ps, Hq, hkv, d, scale in [([20, 11, 33], 8, 4, 2, 8, None), ([13, 30], 5, 3, 1, 5, -0.6),
                                        ([24, 9], 4, 4, 4, 8, 0.0)]:
        pool = build_pool(rng, lens, ps, hkv, d, shared_prefix_pages=1)
        q = _queries(rng, len(lens), Hq, d)
        before = (q, pool.k_pages, pool.v_pages, pool.block_table, pool.seq_lens)
        kw = {} if scale is None else {"scale": scale}
        call = Call("paged_decode", f"q[{len(lens)}x{Hq}x{d}], {pool.describe()}"
                    + (f", scale={scale:.6g}" if scale is not None else ""))
        after = observed_call(sub.paged_decode, call, *(a.copy() for a in before), record=RECORD,
                              _hints=WARNING_HINTS, return_args=True, **kw).args or []
        for i, label in enumerate(("q", "k_pages", "v_pages", "block_table", "seq_lens")):
            now = after[i] if len(after) > i else None
            if not (isinstance(now, np.ndarray) and now.shape == before[i].shape
                    and np.array_equal(now, before[i], equal_nan=True)):
                fail(f"paged_decode changed its input {label} in place", called=str(call),
                     hint=(f"{label} is the caller's" + (": the pool is the KV cache every later decode step reads, "
                                                         "its prefix pages shared by several sequences"
                                                         if label.endswith("pages") else "") +
                           "; k_pages[p, :rows] is a view, so an in-place operation on it (or on q, or an out= "
                           "into an input) writes through: scale the scores, (K @ q[b, h]) * scale, never an input"))


def _reference_from_arrays(q, k_pages, v_pages, block_table, seq_lens, scale=None):
    """The reference for a call given as the arrays paged_decode takes (the keys read back from the
    pages its block table names)."""
    page = k_pages.shape[1]
    lens = np.asarray(seq_lens, dtype=np.int64)
    keys, values = [], []
    for b, n in enumerate(lens):
        pages = np.asarray(block_table[b][:-(-int(n) // page)], dtype=np.int64)
        keys.append(k_pages[pages].reshape(-1, *k_pages.shape[2:])[:n])
        values.append(v_pages[pages].reshape(-1, *v_pages.shape[2:])[:n])
    return reference(q, Pool(k_pages, v_pages, np.asarray(block_table), lens, keys, values), scale)


# What paged_decode should return, for `drill check --repro` (values only reach the learner).
REFERENCES = {"paged_decode": _reference_from_arrays}
