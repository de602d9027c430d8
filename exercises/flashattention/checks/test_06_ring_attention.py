"""Hidden checks for 06_ring_attention.py.

Your file runs in W = 2, 3 and 4 processes (gloo on 127.0.0.1), each holding one
contiguous shard of q, k and v. The ranks start once for all checks (_ring_runs.py),
inside the sandbox, each shut in its own folder; every rank's (o, lse) is read back and
compared here with full attention in float64. The communication calls each rank made are
recorded inside the ranks and inspected: advice that can fail a check, never pass one.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from drill.grader import submission
from drill.grader.expect import CheckFailure, close, fail, matches, show

from drill.grader import fixtures

from ._ring_runs import CASES as _SHARED_CASES
from ._ring_runs import (MEMORY_WORLDS, WORLDS, BothMemoryCases, Case, _check_work_is_matmuls, cases_in,
                         check_future_work_skipped, check_rank_memory, combine, group_ranks, launch, partials,
                         shard_of)

# The shared cases, plus one without a mask on a group with gaps: the group's peers must be right
# whether or not causal is set, and its matmul work is the yardstick for the causal "group_gaps".
CASES = _SHARED_CASES[:5] + (
    Case("long_plain", causal=False, n=64, d=16, spread=1.0),
    Case("long_causal", causal=True, n=64, d=16, spread=1.0),
) + _SHARED_CASES[5:-1] + (
    Case("group_plain", causal=False, n=4, d=8, spread=1.0, group=(0, 2, 3), worlds=(3, 4)),
    _SHARED_CASES[-1],
    # Causal too: a rank that gathers every shard only when causal is set must meet the memory check.
    Case("memory_causal", causal=True, n=4, d=65536, spread=1.0, worlds=MEMORY_WORLDS),
)
BY_NAME = {c.name: c for c in CASES}
# (no mask, causal) pairs of the same shapes and group: the causal one must skip future shards.
SKIP_PAIRS = (("plain", "causal"), ("large", "large_causal"), ("group_plain", "group_gaps"), ("long_plain", "long_causal"))
# Pairs whose pointwise work is compared too: shards of n >= 4d, where a future shard done by hand
# (at least 2·n·n·d pointwise products however it is chunked) dwarfs what honest code adds, a merge
# per step (n·d) and masks on visible shards (n·n). A causal rank may output at most POINTWISE_SLACK
# of that least cost per future shard beyond its share of the unmasked total. Measured at [64, 16],
# W = 2 to 4, as a fraction of the least by-hand cost: honest (the solution, every pinned variant,
# merges of a (0, -inf) partial on skipped steps, additive float masks on every visible shard) at
# most 0.20; future shards by hand one column of d, half of d or one query row at a time 1.19 to 1.72.
# The shared shapes (n <= 5, d >= 4) leave no such margin: honest code reaches 1.05 there.
POINTWISE_PAIRS = (("long_plain", "long_causal"),)
POINTWISE_SLACK = 0.5

P2P_SENDS = ("send", "isend", "send_object_list")
P2P_RECVS = ("recv", "irecv", "recv_object_list")
P2P = P2P_SENDS + P2P_RECVS + ("batch_isend_irecv",)
TOL = {"plain": 1e-9, "causal": 1e-9, "large": 1e-7, "large_causal": 1e-7, "future_nan": 1e-9, "group": 1e-9,
       "long_plain": 1e-9, "long_causal": 1e-9}


def make_inputs(world: int) -> dict[str, np.ndarray]:
    """_ring_runs.make_inputs over this file's cases, from the run's secret seed."""
    rng = np.random.default_rng(fixtures.seed(6060 + world))
    arrays = {}
    for case in cases_in(CASES, world):
        s = case.n * len(group_ranks(case, world))
        q = rng.normal(scale=case.spread, size=(s, case.d))
        k = rng.normal(scale=case.spread, size=(s, case.d))
        v = rng.normal(size=(s, case.d))
        if case.poison_last_v:
            v[s - case.n:] = np.nan
        arrays.update({f"{case.name}_q": q, f"{case.name}_k": k, f"{case.name}_v": v})
    return arrays


@pytest.fixture(scope="module")
def runs():
    return launch(submission.loaded()._subject, submission.path(), cases=CASES, make=make_inputs)


# --------------------------------------------------------------------------- helpers


def visible(world: int, n: int, causal: bool) -> np.ndarray:
    """[s, s]: may the query at global position i see the key at j?"""
    pos = np.arange(world * n)
    return pos[None, :] <= pos[:, None] if causal else np.ones((world * n, world * n), dtype=bool)


def _outputs(runs, world: int, case: str) -> list[tuple[np.ndarray, np.ndarray]]:
    """Every rank's (o, lse) for a case as float64 arrays, or a failure saying why there is none."""
    c = BY_NAME[case]
    why = runs.problem(world, case)
    if why:
        fail(why, called=c.call(world, 0))
    out = []
    for rank in range(world):
        event = runs.done(world, rank, case)
        if event.get("outside"):
            out.append((None, None))  # not a member of the case's group: it returned nothing
            continue
        arrays = runs.arrays(world, rank, case)
        call = c.call(world, rank)
        if event.get("types") is None:
            fail("ring_attention must return a pair (o, lse)", called=call, got=f"a {event['returned']}",
                 expected=f"(o, lse): tensors of shapes [{c.n}, {c.d}] and [{c.n}]")
        if "o" not in arrays or "lse" not in arrays:
            fail("o and lse must be torch tensors", called=call, got=f"({', '.join(event['types'])})",
                 expected="(torch.Tensor, torch.Tensor)")
        out.append((arrays["o"], arrays["lse"]))
    return out


def _reference(runs, world: int, case: str, vis: np.ndarray | None = None):
    c = BY_NAME[case]
    q, k, v = runs.full(world, case)
    vis = visible(world, c.n, c.causal) if vis is None else vis
    # NaN V rows (future_nan) are replaced by 0: the ranks checked never see them.
    parts = partials(q, k, np.nan_to_num(v, nan=0.0), c.n, vis)
    return parts, combine(parts)


def _check(got, want, call, what, tol, diagnose) -> None:
    """close(), with the (costly) diagnosis computed only when the values are wrong."""
    try:
        close(got, want, call, atol=tol, rtol=tol, what=what)
    except CheckFailure:
        hint = diagnose() if np.shape(got) == np.shape(want) else ""
        close(got, want, call, atol=tol, rtol=tol, what=what, hint=hint)


def _shard_list(shards) -> str:
    return ", ".join(str(s) for s in shards)


def _which_shards(parts, rows, got, index: int, rank: int, world: int) -> str:
    """Name the shards the result covers if it is attention over a wrong multiset of shards."""
    alive = [s for s, (_, lse) in enumerate(parts) if np.isfinite(lse[rows]).any()]  # shards this rank may see
    for weights in itertools.product((0, 1, 2), repeat=len(alive)):
        if all(w == 1 for w in weights):
            continue
        full = [0] * world
        for s, w in zip(alive, weights):
            full[s] = w
        candidate = combine(parts, full)[index][rows]
        if matches(got, candidate, atol=1e-7):
            missing = [s for s, w in zip(alive, weights) if w == 0]
            twice = [s for s, w in zip(alive, weights) if w == 2]
            words = []
            if missing:
                own = " (its own)" if rank in missing else ""
                words.append(f"leaves out shard {_shard_list(missing)}{own}")
            if twice:
                words.append(f"counts shard {_shard_list(twice)} twice")
            return (f"rank {rank}'s result is attention over the wrong shards: it {' and '.join(words)}. "
                    f"Merge each shard it may see exactly once: its own at step 0, then one per hop "
                    f"({world - 1} hop{'s' if world > 2 else ''} in all)")
    return ""


def _mask_variants(world: int, n: int, rank: int):
    """Wrong causal masks a ring implementation produces, as (visible [s, s], explanation)."""
    pos = np.arange(world * n)
    shard = shard_of(world, n)
    local = pos % n
    i, j = pos[:, None], pos[None, :]
    # Data of shard s handled as if it came from shard 2r - s (the ring turned the other way).
    mirrored = ((2 * rank - shard) % world) * n + local
    return [
        (local[None, :] <= local[:, None],
         "the causal mask uses positions inside the shard: query i of a shard sees key j of every shard when "
         "j <= i. Compare global positions instead: a shard from an earlier rank is visible in full, a later "
         "one not at all, and only the rank's own shard needs the triangle"),
        (mirrored[None, :] <= i,
         "the positions used for the mask belong to a different shard than the K/V actually held: after t hops "
         "the buffer holds the shard of rank (rank - t) mod W when you receive from rank - 1 (or rank + t when "
         "you receive from rank + 1)"),
        ((j <= i) | (shard[None, :] > shard[:, None]),
         "only the rank's own shard is masked: shards from later ranks (entirely in the future) must be "
         "skipped, not used in full"),
        (j < i,
         "the diagonal is masked too: a query sees its own key (j <= i, not j < i)"),
        ((j <= i) & (shard[None, :] == shard[:, None]),
         "only the rank's own shard is used: the shards from earlier ranks are visible in full"),
    ]


def _diagnose(runs, world: int, case: str, rank: int, got: np.ndarray, index: int) -> str:
    """Why rank `rank`'s o (index 0) or lse (index 1) is wrong, if it matches a known mistake."""
    c = BY_NAME[case]
    rows = slice(rank * c.n, (rank + 1) * c.n)
    parts, (o_ref, l_ref) = _reference(runs, world, case)
    if not np.isfinite(got).all() and np.isfinite((o_ref, l_ref)[index][rows]).all():
        if c.spread > 4:
            return ("the merge overflowed: with scores near 1e3, exp(lse) is inf. Weight each part by "
                    "exp(L_i - L) with L = logaddexp(L1, L2) = max + log1p(exp(-|L1 - L2|)); every weight is <= 1")
        return "NaN or inf: a row or block with no visible key gave exp(-inf - (-inf)), or a merge overflowed"
    if c.causal:
        for vis, why in _mask_variants(world, c.n, rank):
            if matches(got, combine(partials(*_inputs(runs, world, case), c.n, vis))[index][rows], atol=1e-7):
                return why
    named = _which_shards(parts, rows, got, index, rank, world)
    if named:
        return named
    if index == 0:
        seen = [p for p in parts if np.isfinite(p[1][rows]).all()]
        if len(seen) > 1 and matches(got, sum(p[0][rows] for p in seen) / len(seen), atol=1e-7):
            return ("the partial outputs were averaged: weight each by exp(L_i - L), its share of the total "
                    "softmax mass, where L = logaddexp over the parts")
        return ""
    q, k, _ = _inputs(runs, world, case)
    scores = np.where(visible(world, c.n, c.causal), (q @ k.T) / math.sqrt(c.d), -np.inf)[rows]
    rowmax = scores.max(axis=1)
    known = [
        (rowmax, "lse is the running max m; the logsumexp is m + log(l)"),
        (l_ref[rows] / math.log(2), "lse is in base 2 (from exp2): multiply by ln 2 for the natural log"),
        (l_ref[rows] - rowmax, "lse is log(l) without the running max added back: L = m + log(l)"),
        (np.exp(l_ref[rows] - rowmax), "that is l, the sum of exponentials; return L = m + log(l)"),
    ]
    known += [(p[1][rows], f"lse is the logsumexp of shard {s} alone: update it at every merge, "
               "L = logaddexp(L, L_block)") for s, p in enumerate(parts) if np.isfinite(p[1][rows]).all()]
    for candidate, why in known:
        if matches(got, candidate, atol=1e-7):
            return why
    return ""


def _inputs(runs, world: int, case: str):
    q, k, v = runs.full(world, case)
    return q, k, np.nan_to_num(v, nan=0.0)


def _compare_case(runs, world: int, case: str, ranks=None) -> None:
    c = BY_NAME[case]
    outs = _outputs(runs, world, case)
    _, (o_ref, l_ref) = _reference(runs, world, case)
    for rank in (range(world) if ranks is None else ranks):
        o, lse = outs[rank]
        rows = slice(rank * c.n, (rank + 1) * c.n)
        call = c.call(world, rank)
        _check(o, o_ref[rows], call, f"rank {rank}'s o", TOL[case],
               lambda: _diagnose(runs, world, case, rank, o, 0))
        _check(lse, l_ref[rows], call, f"rank {rank}'s lse", TOL[case],
               lambda: _diagnose(runs, world, case, rank, lse, 1))


def _completed(runs, world: int) -> list[str]:
    return [c.name for c in CASES if world in c.worlds and not runs.problem(world, c.name)]


# --------------------------------------------------------------------------- checks


def test_ranks_finish(runs):
    """Every rank finishes: no deadlock, no error, no rank left waiting"""
    for world in WORLDS:
        why = runs.problem(world)
        if why:
            fail(why, called=f"ring_attention on each of {world} ranks, for {len(CASES)} cases")


@pytest.mark.observed
def test_point_to_point(runs):
    """K/V shards travel by point-to-point send/recv, not by collectives"""
    ran = False
    for world in WORLDS:
        for rank in range(world):
            for op in runs.ops(world, rank):
                if op["op"] not in P2P:
                    fail(f"rank {rank} called dist.{op['op']} (W = {world}, case '{op['case']}')",
                         called=BY_NAME[op["case"]].call(world, rank), got=f"dist.{op['op']}",
                         expected="only isend/irecv, batch_isend_irecv or send/recv",
                         hint="ring attention passes each K/V shard to the next rank, one hop per step, so a rank "
                              "holds one remote shard at a time; a collective gathers every shard everywhere at "
                              "once, the memory ring attention exists to avoid")
        if "plain" not in _completed(runs, world):
            continue
        ran = True
        for rank in range(world):
            received = _receives(runs.ops(world, rank, "plain"))
            if len(received) < world - 1:
                fail(f"rank {rank} received {len(received)} message(s) with W = {world}",
                     called=BY_NAME["plain"].call(world, rank), got=f"{len(received)} receive(s)",
                     expected=f"at least {world - 1}: one K/V shard per hop",
                     hint="without a mask every rank needs all W shards: its own plus W-1 that arrive "
                          "one hop at a time")
    if not ran:
        fail(runs.problem(WORLDS[0], "plain") or "no case finished", called="ring_attention on each rank")


def _sends(ops) -> list:
    out = [op.get("peer") for op in ops if op["op"] in P2P_SENDS]
    for op in ops:
        out += [peer for name, peer in op.get("ops", []) if name == "isend"]
    return out


def _receives(ops) -> list:
    out = [op.get("peer") for op in ops if op["op"] in P2P_RECVS]
    for op in ops:
        out += [peer for name, peer in op.get("ops", []) if name == "irecv"]
    return out


@pytest.mark.observed
def test_ring_neighbours(runs):
    """Each rank sends to one ring neighbour only and receives from the other only"""
    checked = False
    for world in WORLDS:
        if world < 3 or "plain" not in _completed(runs, world):
            continue
        checked = True
        for rank in range(world):
            ops = [op for c in CASES if c.group is None for op in runs.ops(world, rank, c.name)]
            to, frm = set(_sends(ops)), set(_receives(ops))
            if not to and not frm:
                fail(f"rank {rank} of {world} made no point-to-point send or receive",
                     called=BY_NAME["plain"].call(world, rank), got="no isend/irecv/send/recv",
                     expected=f"sends to {(rank + 1) % world}, receives from {(rank - 1) % world} (or the reverse)",
                     hint="pass the K/V shards around the ring with isend/irecv or batch_isend_irecv")
            neighbours = {(rank + 1) % world, (rank - 1) % world}
            ok = len(to) == 1 and len(frm) == 1 and to <= neighbours and frm <= neighbours and to != frm
            if not ok:
                fail(f"rank {rank} of {world} sent to rank(s) {sorted(to, key=str)} and received from "
                     f"{sorted(frm, key=str)}", called=BY_NAME["plain"].call(world, rank),
                     got=f"sends to {sorted(to, key=str)}, receives from {sorted(frm, key=str)}",
                     expected=f"sends to {(rank + 1) % world} and receives from {(rank - 1) % world} (or the reverse)",
                     hint="in a ring each rank forwards the shard it holds to its next neighbour and gets the "
                          "previous neighbour's, so after W-1 hops every shard has visited every rank; sending "
                          "your shard straight to every rank is an all-gather in disguise"
                     + ("; receive with an explicit src" if None in frm else ""))
    if not checked:
        fail(runs.problem(3, "plain") or "no case finished", called="ring_attention on each rank")
    _group_neighbours(runs)


def _group_neighbours(runs) -> None:
    """The same inside an explicit group of 3 or more: a member sends to the next member and receives
    from the previous one only (peers named by global rank, or by group rank through group_dst/group_src)."""
    for world in WORLDS:
        for c in CASES:
            members = group_ranks(c, world)
            if c.group is None or world not in c.worlds or len(members) < 3 or runs.problem(world, c.name):
                continue
            m = len(members)
            for at, rank in enumerate(members):
                ops = runs.ops(world, rank, c.name)
                to, frm = set(_sends(ops)), set(_receives(ops))
                ring = False
                for name in (lambda g: members[g], lambda g: g):  # global ranks, or group ranks
                    neighbours = {name((at + 1) % m), name((at - 1) % m)}
                    ring = ring or (len(to) == 1 and len(frm) == 1 and to <= neighbours and frm <= neighbours
                                    and to != frm)
                if not ring:
                    fail(f"rank {rank} (group rank {at} of {m}) sent to {sorted(to, key=str)} and received from "
                         f"{sorted(frm, key=str)}", called=c.call(world, rank),
                         got=f"sends to {sorted(to, key=str)}, receives from {sorted(frm, key=str)}",
                         expected=f"sends to global rank {members[(at + 1) % m]} and receives from "
                                  f"{members[(at - 1) % m]} (or the reverse): its ring neighbours in the group",
                         hint="inside a group the ring runs over the group's members in group order: each member "
                              "forwards the shard it holds to the next member only; sending your shard to every "
                              "member is an all-gather in disguise")


def test_shapes(runs):
    """Each rank returns its own rows: o of shape [s/W, d] and lse of shape [s/W]"""
    c = BY_NAME["plain"]
    for world in WORLDS:
        outs = _outputs(runs, world, "plain")
        for rank, (o, lse) in enumerate(outs):
            call = c.call(world, rank)
            if o.shape != (c.n, c.d):
                fail("o has the wrong shape", called=call, got=f"shape {o.shape}", expected=f"shape {(c.n, c.d)}",
                     hint="return only this rank's rows of the output" if o.shape[:1] == (c.n * world,) else "")
            if lse.shape != (c.n,):
                hint = "one number per row: drop the trailing dimension of size 1" if lse.shape == (c.n, 1) else ""
                fail("lse has the wrong shape", called=call, got=f"shape {lse.shape}", expected=f"shape {(c.n,)}",
                     hint=hint)


@pytest.mark.parametrize("world", WORLDS, ids=lambda w: f"W={w}")
def test_full_attention(runs, world):
    """Without a mask, every rank's o and lse match full attention"""
    _compare_case(runs, world, "plain")


@pytest.mark.parametrize("world", WORLDS, ids=lambda w: f"W={w}")
def test_causal(runs, world):
    """Causal: each query sees exactly the keys at global positions up to its own"""
    _compare_case(runs, world, "causal")


def test_large_logits(runs):
    """Scores of about ±1e3 keep o and lse finite and exact"""
    for world in WORLDS:
        for case in ("large", "large_causal"):
            _compare_case(runs, world, case)


def test_skips_future_shards(runs):
    """Causal: a shard entirely in a rank's future is skipped, not computed and masked"""
    c = BY_NAME["future_nan"]
    for world in WORLDS:
        outs = _outputs(runs, world, "future_nan")
        for rank in range(world - 1):
            o, lse = outs[rank]
            if not np.isfinite(o).all():
                fail(f"rank {rank}'s o contains NaN", called=c.call(world, rank) + "; the last shard's V is NaN",
                     got=show(o), expected="finite values: the NaN shard lies entirely after this rank's queries",
                     hint="the rank computed with a shard that starts after all of its queries and masked it "
                          "away; a fully masked block contributes nothing, so skip it (src > rank). That skip "
                          "is what saves about half the work of causal ring attention")
        _compare_case(runs, world, "future_nan", ranks=range(world - 1))
        check_future_work_skipped(runs, world, BY_NAME["plain"], BY_NAME["causal"], "the attention")
    # Every shape and group, not only the one above: skipping only where the work is counted is no skip.
    for world in WORLDS:
        for plain, causal in SKIP_PAIRS[1:]:
            if world in BY_NAME[plain].worlds:
                _check_skip_pair(runs, world, BY_NAME[plain], BY_NAME[causal])
    # Work outside matmuls too, where it can be told apart: a future shard done by hand in small pointwise
    # pieces (no matmul for the FLOP count, no product as large as n·n·d) still outputs 2·n·n·d elements.
    for world in WORLDS:
        for plain, causal in POINTWISE_PAIRS:
            if world in BY_NAME[plain].worlds:
                for name in (plain, causal):
                    _compare_case(runs, world, name)
                _check_pointwise_skip(runs, world, BY_NAME[plain], BY_NAME[causal])


def _check_skip_pair(runs, world: int, plain_case, causal_case) -> None:
    """check_future_work_skipped for any pair of cases of the same shapes and group: group rank `at` of m
    sees the shards of group ranks 0 to `at`, so about (at + 1)/m of the unmasked matmul work."""
    for case in (plain_case, causal_case):
        _outputs(runs, world, case.name)  # the case finished on every member (or fails saying why)
    members = group_ranks(causal_case, world)
    for rank in members:
        for case in (plain_case, causal_case):
            _check_work_is_matmuls(runs.done(world, rank, case.name) or {}, case, world, rank, "the attention")
    for at, rank in enumerate(members[:-1]):
        plain, causal = (runs.done(world, rank, c.name).get("flops") for c in (plain_case, causal_case))
        if not plain or causal is None:
            fail(f"rank {rank}'s matmul work could not be counted (W = {world})", called=plain_case.call(world, rank),
                 got=f"{plain!r} FLOPs counted without a mask, {causal!r} with causal=True",
                 expected="the block maths as torch matmuls (@), which torch's FLOP counter sees",
                 hint="compute the scores and the weighted sum on torch tensors with @ (q @ k.T, p @ v): the "
                      "check counts each rank's matmul work to see that future shards are skipped")
        if causal > plain * (at + 1.5) / len(members):
            fail(f"rank {rank} did {causal / plain:.0%} of the unmasked matmul work with causal=True (W = {world}, "
                 f"shards [{causal_case.n}, {causal_case.d}])", called=causal_case.call(world, rank),
                 got=f"{causal} FLOPs causal, {plain} without a mask",
                 expected=f"about {at + 1}/{len(members)} of it: its queries see the shards of "
                          f"{'group ' if causal_case.group else ''}ranks 0 to {at} only",
                 hint="skip every K/V shard from a later rank (src > rank) whatever the shapes, the group or the "
                      "values: a fully masked block contributes nothing, and the skip is what saves about half the "
                      "work of causal ring attention")


def _check_pointwise_skip(runs, world: int, plain_case, causal_case) -> None:
    """Group rank `at` of m outputs at most its (at + 1)/m share of the unmasked pointwise total, plus
    POINTWISE_SLACK of the least by-hand cost (2·n·n·d) of each of its m - 1 - at future shards."""
    members = group_ranks(causal_case, world)
    m, least = len(members), 2 * causal_case.n * causal_case.n * causal_case.d
    for at, rank in enumerate(members[:-1]):
        plain, causal = (runs.done(world, rank, c.name).get("pointwise_total") for c in (plain_case, causal_case))
        if not isinstance(plain, int) or not isinstance(causal, int):
            fail(f"rank {rank}'s pointwise work could not be recorded (W = {world})", called=causal_case.call(world, rank),
                 got=f"{plain!r} elements without a mask, {causal!r} with causal=True",
                 expected="the record the harness keeps during the call")
        future = m - 1 - at
        allowed = plain * (at + 1) / m + POINTWISE_SLACK * future * least
        if causal > allowed:
            fail(f"rank {rank} output {causal} elements from pointwise torch ops with causal=True, {plain} without a "
                 f"mask (W = {world}, shards [{causal_case.n}, {causal_case.d}])", called=causal_case.call(world, rank),
                 got=f"{causal - plain * (at + 1) / m:.0f} elements beyond its {at + 1}/{m} share of the unmasked work",
                 expected=f"at most {POINTWISE_SLACK * future * least:.0f}: a merge per step and a mask are cheap, "
                          f"while a future shard computed by hand ({future} here) outputs "
                          f"at least 2·n·n·d = {least} products",
                 hint="a K/V shard from a later rank (src > rank) is fully masked for this rank's queries: skip its "
                      "scores and weighted sum altogether, whether written with @ or as elementwise products summed "
                      "piece by piece; the skip is what saves about half the work of causal ring attention")


@pytest.mark.observed
def test_inputs_unchanged(runs):
    """q, k and v are left unchanged"""
    finished = False
    for world in WORLDS:
        for case in _completed(runs, world):
            finished = True
            for rank in range(world):
                changed = runs.done(world, rank, case).get("changed")
                if changed:
                    fail(f"rank {rank}'s {' and '.join(changed)} changed during the call (W = {world})",
                         called=BY_NAME[case].call(world, rank), got=f"{', '.join(changed)} overwritten",
                         expected="q, k and v as they were passed in",
                         hint="receive into buffers of your own (torch.empty_like), never into the caller's "
                              "tensors: the caller still owns its shard")
    if not finished:
        fail(runs.problem(WORLDS[0], "plain") or "no case finished", called="ring_attention on each rank")


def test_explicit_group(runs):
    """With an explicit process group of some of the ranks, only its members take part, in its order"""
    for world, name in ((3, "group"), (4, "group"), (3, "group_gaps"), (4, "group_gaps"), (3, "group_plain"),
                        (4, "group_plain")):
        c = BY_NAME[name]
        members = group_ranks(c, world)
        why = runs.problem(world, name)
        if why:
            hung = any(w in why for w in ("ranks stuck", "deadlocked", "hung", "not part of group"))
            fail(why, called=c.call(world, members[0]),
                 hint="" if not hung else "only the group's members call ring_attention here: take rank and size from "
                      "dist.get_rank(group) and dist.get_world_size(group), and name each peer by its global rank "
                      "(dist.get_global_rank(group, r)) with the group passed to every send and receive; the "
                      "members need not be consecutive ranks")
        outs = _outputs(runs, world, name)
        q, k, v = runs.full(world, name)
        _, (o_ref, l_ref) = (None, combine(partials(q, k, v, c.n, visible(len(members), c.n, c.causal))))
        for at, rank in enumerate(members):
            o, lse = outs[rank]
            rows = slice(at * c.n, (at + 1) * c.n)
            hint = (f"rank {rank} is rank {at} of the group: take rank and size from dist.get_rank(group) and "
                    "dist.get_world_size(group), and name peers by their global rank "
                    "(dist.get_global_rank(group, r)) in every send and receive")
            for got, want, what in ((o, o_ref, "o"), (lse, l_ref, "lse")):
                if got is None or np.shape(got) != np.shape(want[rows]):
                    fail(f"rank {rank}'s {what} has the wrong shape", called=c.call(world, rank),
                         got=f"shape {np.shape(got)}", expected=f"shape {np.shape(want[rows])}")
                close(got, want[rows], c.call(world, rank), atol=TOL["group"], rtol=TOL["group"],
                      what=f"rank {rank}'s {what}", hint=hint)


def test_memory_per_rank(runs):
    """No rank's peak memory grows with the ring (rings of 4 and 8, shards of 2 MiB, with and without causal): no rank holds every K/V shard"""
    for world in MEMORY_WORLDS:
        for name in ("memory", "memory_causal"):
            c = BY_NAME[name]
            outs = _outputs(runs, world, name)
            _, (o_ref, l_ref) = _reference(runs, world, name)
            for rank, (o, lse) in enumerate(outs):
                rows = slice(rank * c.n, (rank + 1) * c.n)
                close(o, o_ref[rows], c.call(world, rank), atol=1e-9, rtol=1e-9, what=f"rank {rank}'s o")
                close(lse, l_ref[rows], c.call(world, rank), atol=1e-9, rtol=1e-9, what=f"rank {rank}'s lse")
    check_rank_memory(runs, BothMemoryCases(BY_NAME["memory"]), "the K and V shards of every rank")
