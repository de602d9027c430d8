"""Hidden checks for 12_ring_backward.py.

Your file runs in W = 2, 3 and 4 processes (gloo on 127.0.0.1), each holding one contiguous
shard of q, k, v, o, do and lse as 06's forward left them. The ranks start once for all
checks (_ring_runs.py, the same harness as 06), inside the sandbox, each shut in its own
folder; every rank's (dq, dk, dv) is read back and compared here with the gradients of full
attention computed in float64. The communication calls each rank made are recorded inside
the ranks and inspected: advice that can fail a check, never pass one.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pytest

from drill.grader import fixtures, submission
from drill.grader.expect import CheckFailure, close, fail, matches, show

from ._ring_runs import (MEMORY_WORLDS, WORLDS, BothMemoryCases, Case, cases_in, check_future_work_skipped,
                         check_rank_memory, group_ranks, launch)

NAMES = ("q", "k", "v", "o", "lse", "do")
GRADS = ("dq", "dk", "dv")
P2P_SENDS = ("send", "isend", "send_object_list")
P2P_RECVS = ("recv", "irecv", "recv_object_list")
P2P = P2P_SENDS + P2P_RECVS + ("batch_isend_irecv",)


@dataclass(frozen=True)
class BackwardCase(Case):
    # o and lse handed in are not the forward's (lse + 1, o nudged): the contract's formulas with the values
    # given have a known answer, which code that recomputes the statistics misses.
    given_stats: bool = False

    def call(self, world: int, rank: int) -> str:
        members = group_ranks(self, world)
        group = "None" if self.group is None else f"new_group({members})"
        return (f"ring_attention_backward(q, k, v, o, lse, do, group={group}, causal={self.causal}) on rank "
                f"{rank} of {world}, shards [{self.n}, {self.d}] of a sequence of {self.n * len(members)}")


CASES = (
    # n = 8: a broadcast product of a shard (n·n·d) is then 4× the largest pointwise result honest
    # code makes (a packed [K, V, dK, dV] buffer, 4·n·d), so _check_work_is_matmuls can tell them apart.
    BackwardCase("plain", causal=False, n=8, d=8, spread=1.0),
    BackwardCase("causal", causal=True, n=8, d=8, spread=1.0),
    BackwardCase("large", causal=False, n=3, d=4, spread=32.0),  # scores of about ±1e3
    BackwardCase("large_causal", causal=True, n=3, d=4, spread=32.0),
    BackwardCase("future_nan", causal=True, n=3, d=4, spread=1.0, poison_last_v=True),
    BackwardCase("given_stats", causal=False, n=4, d=8, spread=1.0, given_stats=True),
    BackwardCase("given_stats_causal", causal=True, n=4, d=8, spread=1.0, given_stats=True),
    # Last: code that ignores `group` hangs here, after every other case has finished.
    BackwardCase("group", causal=True, n=3, d=8, spread=1.0, group=(1, 2, 3)),
    # Members with gaps ([0, 2] of 3, [0, 2, 3] of 4): group rank r + 1 is not global rank r + 1.
    BackwardCase("group_gaps", causal=True, n=3, d=8, spread=1.0, group=(0, 2, 3), worlds=(3, 4)),
    BackwardCase("memory", causal=False, n=4, d=65536, spread=1.0, worlds=MEMORY_WORLDS),
    # Causal too: a causal rank may gather every shard where an unmasked one passes them on.
    BackwardCase("memory_causal", causal=True, n=4, d=65536, spread=1.0, worlds=MEMORY_WORLDS),
)
BY_NAME = {c.name: c for c in CASES}
TOL = {"plain": 1e-9, "causal": 1e-9, "large": 1e-7, "large_causal": 1e-7, "future_nan": 1e-9, "group": 1e-9,
       "group_gaps": 1e-9, "memory": 1e-9, "memory_causal": 1e-9, "given_stats": 1e-9, "given_stats_causal": 1e-9}
# The least matmul work one shard's share takes: five [n, n, d] products (S, dV, dP, dQ, dK) at
# 2·n·n·d FLOPs each. The unmasked work may be at most WORK_SLACK times that per shard visited.
MATMULS_PER_SHARD = 5
WORK_SLACK = 2.0
# With causal=True the work may be at most CAUSAL_SLACK times that per shard not skipped: the unmasked
# bound alone would let spare unmasked work (up to WORK_SLACK) pay for future shards under the ratio.
CAUSAL_SLACK = 1.25


# --------------------------------------------------------------------------- float64 reference


def visible(s: int, causal: bool) -> np.ndarray:
    pos = np.arange(s)
    return pos[None, :] <= pos[:, None] if causal else np.ones((s, s), dtype=bool)


def forward(q, k, v, vis):
    """(o, lse) of full attention in float64."""
    scores = np.where(vis, (q @ k.T) / math.sqrt(q.shape[1]), -np.inf)
    m = scores.max(axis=1)
    p = np.exp(scores - m[:, None])
    lse = m + np.log(p.sum(axis=1))
    return np.exp(scores - lse[:, None]) @ v, lse


def gradients(q, k, v, o, lse, do, vis, n: int, lse_mode: str = "global", d_mode: str = "global"):
    """(dq, dk, dv) of full attention, each [s, d]; the modes give known-wrong variants.

    lse_mode "shard": probabilities normalised within each K/V shard (the shard's own lse).
    d_mode "zero": D left out; "block": D = rowsum(dO ∘ P_blk V_blk), the shard's partial output.
    """
    scale = 1.0 / math.sqrt(q.shape[1])
    scores = np.where(vis, (q @ k.T) * scale, -np.inf)
    dq, dk, dv = np.zeros_like(q), np.zeros_like(k), np.zeros_like(v)
    delta = (do * o).sum(axis=1)
    for start in range(0, k.shape[0], n):
        cols = slice(start, start + n)
        s = scores[:, cols]
        if lse_mode == "shard":
            m = s.max(axis=1)
            safe = np.where(np.isfinite(m), m, 0.0)
            total = np.exp(s - safe[:, None]).sum(axis=1)
            with np.errstate(divide="ignore"):
                ref = np.where(total > 0, safe + np.log(np.where(total > 0, total, 1.0)), np.inf)
        else:
            ref = lse
        with np.errstate(invalid="ignore"):
            p = np.where(np.isfinite(s), np.exp(s - ref[:, None]), 0.0)
        d = {"global": delta, "zero": np.zeros_like(delta), "block": (do * (p @ v[cols])).sum(axis=1)}[d_mode]
        ds = p * (do @ v[cols].T - d[:, None])
        dv[cols] += p.T @ do
        dq += (ds @ k[cols]) * scale
        dk[cols] += (ds.T @ q) * scale
    return dq, dk, dv


def make_inputs(world: int) -> dict[str, np.ndarray]:
    # From the run's secret seed: a rank cannot rebuild the other ranks' shards from its own.
    rng = np.random.default_rng(fixtures.seed(1212 + world))
    arrays = {}
    for case in cases_in(CASES, world):
        s = case.n * len(group_ranks(case, world))
        q = rng.normal(scale=case.spread, size=(s, case.d))
        k = rng.normal(scale=case.spread, size=(s, case.d))
        v = rng.normal(size=(s, case.d))
        do = rng.normal(size=(s, case.d))
        o, lse = forward(q, k, v, visible(s, case.causal))
        if case.given_stats:
            lse, o = lse + 1.0, o + 0.25 * rng.normal(size=o.shape)
        if case.poison_last_v:
            v[s - case.n:] = np.nan  # o and lse stay finite: only a rank that reads this V sees NaN
        arrays.update({f"{case.name}_{t}": x for t, x in zip(NAMES, (q, k, v, o, lse, do))})
    return arrays


@pytest.fixture(scope="module")
def runs():
    return launch(submission.loaded()._subject, submission.path(), cases=CASES, make=make_inputs,
                  function="ring_attention_backward", names=NAMES, outputs=GRADS)


# --------------------------------------------------------------------------- helpers


def _inputs(runs, world: int, case: str):
    q, k, v, o, lse, do = runs.full(world, case)
    return q, k, np.nan_to_num(v, nan=0.0), o, lse, do


def _reference(runs, world: int, case: str, **modes):
    c = BY_NAME[case]
    q = runs.full(world, case)[0]
    return gradients(*_inputs(runs, world, case), visible(q.shape[0], c.causal), c.n, **modes)


def _outputs(runs, world: int, case: str) -> dict[int, tuple]:
    """Each taking part rank's (dq, dk, dv) as float64 arrays, or a failure saying why there is none."""
    c = BY_NAME[case]
    members = group_ranks(c, world)
    why = runs.problem(world, case)
    if why:
        fail(why, called=c.call(world, members[0]))
    out = {}
    for rank in members:
        event = runs.done(world, rank, case)
        arrays = runs.arrays(world, rank, case)
        call = c.call(world, rank)
        if event.get("types") is None:
            fail("ring_attention_backward must return a triple (dq, dk, dv)", called=call,
                 got=f"a {event.get('returned')}", expected=f"(dq, dk, dv): three tensors of shape [{c.n}, {c.d}]")
        if any(g not in arrays for g in GRADS):
            fail("dq, dk and dv must be torch tensors", called=call, got=f"({', '.join(event['types'])})",
                 expected="(torch.Tensor, torch.Tensor, torch.Tensor)")
        out[rank] = tuple(arrays[g] for g in GRADS)
    return out


def _rows(case, world: int, rank: int) -> slice:
    at = group_ranks(case, world).index(rank)
    return slice(at * case.n, (at + 1) * case.n)


def _diagnose(runs, world: int, case: str, rank: int, index: int, got: np.ndarray) -> str:
    """Why rank `rank`'s dq (0), dk (1) or dv (2) is wrong, if it matches a known mistake."""
    c = BY_NAME[case]
    members = group_ranks(c, world)
    size, at = len(members), members.index(rank)
    rows = _rows(c, world, rank)
    ref = _reference(runs, world, case)
    name = GRADS[index]
    if index > 0:
        # The gradient of another shard: the accumulator ended on the wrong rank.
        for other in range(size):
            if other != at and matches(got, ref[index][other * c.n:(other + 1) * c.n], atol=1e-7):
                if other == (at + 1) % size:
                    return (f"rank {rank}'s {name} is the gradient of the shard that was visiting it at the last "
                            "step (the one that started on the next rank): the accumulated dK/dV were left where "
                            "they were. They travel with their shard, so after the W-th step they need one more hop, "
                            "to rank + 1, which brings every shard's gradients home")
                return (f"rank {rank}'s {name} is the gradient of the shard of group rank {other}: the gradients "
                        "went round the ring the wrong way. Send the accumulated dK/dV on in the direction their "
                        "K/V came from (to rank + 1 when K/V arrive from rank - 1), one hop per step, so that "
                        "after W hops they are back on the rank that owns the shard")
        outs = _outputs(runs, world, case)
        total = sum(outs[m][index] for m in members)
        if all(outs[m][index].shape == got.shape for m in members) and matches(
                total, sum(ref[index][i * c.n:(i + 1) * c.n] for i in range(size)), atol=1e-7):
            return (f"every share of {name} was computed, but added to the wrong shard's gradient: the sum over "
                    "all ranks is right, the split is not. The dK/dV accumulated for a shard must travel with that "
                    "shard's K/V, the same way round (to rank + 1 when K/V come from rank - 1), and reach its "
                    "owner after W hops")
        q, k, v, o, lse, do = _inputs(runs, world, case)
        own = np.zeros_like(q)
        own[rows] = 1.0
        # Only this rank's own queries contributed: the gradients never travelled.
        local = gradients(q, k, v, o * own, lse, do * own, visible(q.shape[0], c.causal), c.n)
        if matches(got, local[index][rows], atol=1e-7):
            return (f"rank {rank}'s {name} holds only what its own queries contribute: the gradient of a K/V shard "
                    "sums over the queries of every rank. Accumulate dK/dV for the visiting shard and send them "
                    "on with it, so each rank's queries add their share")
    for modes, why in (
        ({"lse_mode": "shard"}, "the probabilities were rebuilt with the lse of the shard being visited, as if each "
         "shard were the whole sequence; P = exp(S - lse) must use the lse of the whole row, the one 06 returned "
         "(it is an input: do not recompute it from one shard)"),
        ({"d_mode": "block"}, "D was computed from the visiting shard's partial output P_blk V_blk; D = rowsum(dO ∘ O) "
         "uses the final O of the whole row (the input o), once, before the ring starts"),
        ({"d_mode": "zero"}, "D = rowsum(dO ∘ O) is missing: dS = P ∘ (dP - D), not P ∘ dP"),
    ):
        if matches(got, _reference(runs, world, case, **modes)[index][rows], atol=1e-7):
            return why
    return ""


def _compare_case(runs, world: int, case: str, ranks=None) -> None:
    c = BY_NAME[case]
    outs = _outputs(runs, world, case)
    ref = _reference(runs, world, case)
    for rank in (group_ranks(c, world) if ranks is None else ranks):
        rows = _rows(c, world, rank)
        for index, name in enumerate(GRADS):
            got, want = outs[rank][index], ref[index][rows]
            what = f"rank {rank}'s {name}"
            if got.shape != want.shape:
                fail(f"{what} has the wrong shape", called=c.call(world, rank), got=f"shape {got.shape}",
                     expected=f"shape {want.shape}: the gradient of this rank's own shard only")
            nan_hint = ""
            if c.poison_last_v and index > 0:  # only the last shard's own dk, dv meet its NaN V
                nan_hint = (f"shard {rank}'s {name} never meets the last shard's V (the NaN one), so this rank "
                            "returned, or added in, another shard's gradient: dK and dV travel with their shard "
                            "and must end on the rank that owns it")
            try:
                close(got, want, c.call(world, rank), atol=TOL[case], rtol=TOL[case], what=what, nan_hint=nan_hint)
            except CheckFailure:
                close(got, want, c.call(world, rank), atol=TOL[case], rtol=TOL[case], what=what,
                      hint=_diagnose(runs, world, case, rank, index, got), nan_hint=nan_hint)


def _default_cases():
    return [c.name for c in CASES if c.group is None]


def _completed(runs, world: int) -> list[str]:
    return [name for name in _default_cases() if not runs.problem(world, name)]


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


# --------------------------------------------------------------------------- checks


def _check_unmasked_work(runs, world: int) -> None:
    """The skip is judged against the unmasked case's work: that work must be about one shard's share
    per shard visited, or padding it with spare matmuls would make room for future shards."""
    c = BY_NAME["plain"]
    least = world * MATMULS_PER_SHARD * 2 * c.n * c.n * c.d
    for rank in range(world - 1):
        plain = (runs.done(world, rank, "plain") or {}).get("flops")
        if plain and plain > WORK_SLACK * least:
            fail(f"rank {rank} did {plain / least:.1f} times the matmul work the unmasked gradients need "
                 f"(W = {world})", called=c.call(world, rank), got=f"{plain} FLOPs",
                 expected=f"at most {WORK_SLACK:g} x {least}: {world} shards, each five [{c.n}, {c.n}, {c.d}] "
                          "products (S, dV, dP, dQ, dK)",
                 hint="the future-shard check compares the causal work with the unmasked work, so that work "
                      "must be the block maths only: no repeated or spare matmuls")


def _check_causal_work(runs, world: int) -> None:
    """Every causal case (each shape, group and value range) holds a rank to the work of the shards it
    must visit, counted from the least work itself: the ratio to the unmasked work cannot show a skip
    when the unmasked side carries spare matmuls, and the plain and causal pair is one shape only."""
    for c in (c for c in cases_in(CASES, world) if c.causal):
        per_shard = MATMULS_PER_SHARD * 2 * c.n * c.n * c.d
        for at, rank in enumerate(group_ranks(c, world)):
            done = runs.done(world, rank, c.name) or {}
            causal, converted = done.get("flops"), done.get("converted")
            if isinstance(converted, int) and converted >= c.n * c.d:
                fail(f"rank {rank} handed {converted} tensor elements to NumPy or Python lists (W = {world})",
                     called=c.call(world, rank), got=f"{converted} elements converted (.numpy(), np.asarray, .tolist())",
                     expected="none: the block maths stay on torch tensors",
                     hint="compute the scores and the gradients with torch matmuls (@): work done in NumPy is "
                          "invisible to the FLOP count that shows a causal rank skipping future shards")
            allowed = CAUSAL_SLACK * per_shard * (at + 1)
            if causal and causal > allowed:
                fail(f"rank {rank} did {causal / per_shard:.2f} shards' worth of matmul work with causal=True "
                     f"(W = {world}, case '{c.name}')", called=c.call(world, rank), got=f"{causal} FLOPs",
                     expected=f"at most {CAUSAL_SLACK:g} x {per_shard} for each of the {at + 1} shard(s) of "
                              f"{'group ' if c.group else ''}ranks 0 to {at} (five [{c.n}, {c.n}, {c.d}] products "
                              "each): only those are visible to its queries",
                     hint="every K/V shard from a later rank is fully masked for this rank's queries: skip the "
                          "gradients for it (src > rank) whatever the shapes, the group or the values, instead of "
                          "computing them and masking them away, and do no spare matmuls, with or without a mask")


def test_ranks_finish(runs):
    """Every rank finishes: no deadlock, no error, no rank left waiting"""
    for world in WORLDS:
        why = runs.problem(world)
        if why:
            fail(why, called=f"ring_attention_backward on each of {world} ranks, for {len(CASES)} cases")


@pytest.mark.observed
def test_point_to_point(runs):
    """K/V shards and their gradients travel by point-to-point send/recv, not by collectives"""
    ran = False
    for world in WORLDS:
        for rank in range(world):
            for op in runs.ops(world, rank):
                if op["op"] not in P2P:
                    fail(f"rank {rank} called dist.{op['op']} (W = {world}, case '{op['case']}')",
                         called=BY_NAME[op["case"]].call(world, rank), got=f"dist.{op['op']}",
                         expected="only isend/irecv, batch_isend_irecv or send/recv",
                         hint="a collective (an all-reduce of dK/dV, an all-gather of K/V) puts every shard or "
                              "every gradient on every rank at once; in the ring each shard's dK/dV ride along with "
                              "it, one hop per step, and reach their owner at the end")
        if "plain" not in _completed(runs, world):
            continue
        ran = True
        for rank in range(world):
            received = _receives(runs.ops(world, rank, "plain"))
            if len(received) < world:
                fail(f"rank {rank} received {len(received)} message(s) with W = {world}",
                     called=BY_NAME["plain"].call(world, rank), got=f"{len(received)} receive(s)",
                     expected=f"at least {world}: W - 1 K/V shards, and the gradients of its own shard coming home",
                     hint="without a mask every rank's queries touch every shard; its own shard's dK/dV collect "
                          "contributions on every rank and come back to it at the end")
    if not ran:
        fail(runs.problem(WORLDS[0], "plain") or "no case finished", called="ring_attention_backward on each rank")


@pytest.mark.observed
def test_ring_neighbours(runs):
    """Each rank sends to one ring neighbour only and receives from the other only"""
    checked = False
    for world in WORLDS:
        if world < 3 or "plain" not in _completed(runs, world):
            continue
        checked = True
        for rank in range(world):
            ops = [op for name in _default_cases() for op in runs.ops(world, rank, name)]
            to, frm = set(_sends(ops)), set(_receives(ops))
            neighbours = {(rank + 1) % world, (rank - 1) % world}
            if not (len(to) == 1 and len(frm) == 1 and to <= neighbours and frm <= neighbours and to != frm):
                fail(f"rank {rank} of {world} sent to rank(s) {sorted(to, key=str)} and received from "
                     f"{sorted(frm, key=str)}", called=BY_NAME["plain"].call(world, rank),
                     got=f"sends to {sorted(to, key=str)}, receives from {sorted(frm, key=str)}",
                     expected=f"sends to {(rank + 1) % world} and receives from {(rank - 1) % world} (or the reverse)",
                     hint="K/V and their accumulated gradients travel together, in one direction: each rank "
                          "forwards what it holds to one neighbour and takes the next from the other. Sending the "
                          "gradients back the other way, or straight to their owner, breaks the ring"
                     + ("; receive with an explicit src" if None in frm else ""))
    if not checked:
        fail(runs.problem(3, "plain") or "no case finished", called="ring_attention_backward on each rank")
    # An explicit group's ring runs over its members, in group order (peers named by global rank, or
    # by group rank through group_dst / group_src).
    for world in WORLDS:
        for case in (c for c in cases_in(CASES, world) if c.group is not None):
            members = group_ranks(case, world)
            size = len(members)
            if size < 3 or runs.problem(world, case.name):
                continue
            for at, rank in enumerate(members):
                ops = runs.ops(world, rank, case.name)
                to, frm = set(_sends(ops)), set(_receives(ops))
                ring = [({members[(at + 1) % size]}, {members[(at - 1) % size]}),
                        ({(at + 1) % size}, {(at - 1) % size})]
                if not any(to in (a, b) and frm in (a, b) and to != frm for a, b in ring):
                    fail(f"rank {rank} (group rank {at} of {members}, W = {world}) sent to rank(s) "
                         f"{sorted(to, key=str)} and received from {sorted(frm, key=str)}",
                         called=case.call(world, rank),
                         got=f"sends to {sorted(to, key=str)}, receives from {sorted(frm, key=str)}",
                         expected=f"sends to {members[(at + 1) % size]} and receives from "
                                  f"{members[(at - 1) % size]} (or the reverse): its neighbours in the group's ring",
                         hint="with an explicit group the ring runs over the group's members in group order; "
                              "K/V and their accumulated dK/dV travel to the next member, one hop per step: "
                              "sending a shard's gradients straight to its owner is not a ring")


def test_shapes(runs):
    """Each rank returns the gradients of its own shards: dq, dk and dv of shape [s/W, d]"""
    c = BY_NAME["plain"]
    for world in WORLDS:
        for rank, grads in _outputs(runs, world, "plain").items():
            for name, g in zip(GRADS, grads):
                if g.shape != (c.n, c.d):
                    fail(f"{name} has the wrong shape", called=c.call(world, rank), got=f"shape {g.shape}",
                         expected=f"shape {(c.n, c.d)}",
                         hint="return only this rank's rows" if g.shape[:1] == (c.n * world,) else "")


@pytest.mark.parametrize("world", WORLDS, ids=lambda w: f"W={w}")
def test_full_attention_gradients(runs, world):
    """Without a mask, every rank's dq, dk and dv match full attention's gradients"""
    _compare_case(runs, world, "plain")


@pytest.mark.parametrize("world", WORLDS, ids=lambda w: f"W={w}")
def test_causal(runs, world):
    """Causal: the gradients of attention where each query sees the keys up to its global position"""
    _compare_case(runs, world, "causal")


def test_large_logits(runs):
    """Scores of about ±1e3 keep every gradient finite and exact"""
    for world in WORLDS:
        for case in ("large", "large_causal"):
            try:
                _compare_case(runs, world, case)
            except CheckFailure as failure:
                outs = _outputs(runs, world, case)
                if any(not np.isfinite(g).all() for grads in outs.values() for g in grads):
                    raise CheckFailure(failure.summary, called=failure.called, got=failure.got,
                                       expected=failure.expected,
                                       hint="NaN or inf with scores near 1e3: rebuild P as exp(S - lse) with the "
                                            "row's lse (every entry is then at most 1), never exp(S) / exp(lse)") \
                        from None
                raise


def test_skips_future_shards(runs):
    """Causal: a shard entirely in a rank's future is skipped, not computed and masked"""
    c = BY_NAME["future_nan"]
    for world in WORLDS:
        outs = _outputs(runs, world, "future_nan")
        for rank in range(world - 1):
            dq = outs[rank][0]
            if not np.isfinite(dq).all():
                fail(f"rank {rank}'s dq contains NaN", called=c.call(world, rank) + "; the last shard's V is NaN",
                     got=show(dq), expected="finite values: the NaN shard lies entirely after this rank's queries",
                     hint="the rank computed dP = dO Vᵀ with a shard that starts after all of its queries and "
                          "masked P afterwards; skip such a shard (src > rank): no scores, no gradient, but still "
                          "pass it (and its gradients) on")
        _compare_case(runs, world, "future_nan", ranks=range(world - 1))
        _check_unmasked_work(runs, world)
        _check_causal_work(runs, world)
        check_future_work_skipped(runs, world, BY_NAME["plain"], BY_NAME["causal"], "the gradients")


def test_uses_given_o_and_lse(runs):
    """The given o and lse are used: P = exp(S - lse) and D = rowsum(do ∘ o), nothing recomputed (causal too)"""
    for world in WORLDS:
        for case in ("given_stats", "given_stats_causal"):
            try:
                _compare_case(runs, world, case)
            except CheckFailure as failure:
                if runs.problem(world, case):
                    raise
                raise CheckFailure(failure.summary, called=failure.called + " with lse + 1 and o perturbed",
                                   got=failure.got, expected=failure.expected,
                                   hint=_ignored_stats(runs, world, case) or failure.hint) from None


def _ignored_stats(runs, world: int, case: str) -> str:
    """Name the input a rank recomputed, if its gradients equal those from the forward's own o or lse."""
    c = BY_NAME[case]
    q, k, v, o, lse, do = _inputs(runs, world, case)
    vis = visible(q.shape[0], c.causal)
    o_true, lse_true = forward(q, k, v, vis)
    outs = _outputs(runs, world, case)
    for o_used, lse_used, why in (
            (o, lse_true, "the gradients ignore the lse given (it was recomputed): rebuild P = exp(S - lse) from the "
                          "lse passed in, the one 06 returned; recomputing it is a second forward pass"),
            (o_true, lse, "D ignores the o given (o was recomputed): D = rowsum(do ∘ o) with the o passed in"),
            (o_true, lse_true, "the gradients ignore the o and lse given: use P = exp(S - lse) and "
                               "D = rowsum(do ∘ o) with them, not a forward pass of your own")):
        want = gradients(q, k, v, o_used, lse_used, do, vis, c.n)
        if all(matches(outs[r][i], want[i][_rows(c, world, r)], atol=1e-7) for r in outs for i in range(3)):
            return why
    return ""


def test_explicit_group(runs):
    """With an explicit process group of some of the ranks, only its members take part, in its order"""
    for world in (3, 4):
        for name in ("group", "group_gaps"):
            c = BY_NAME[name]
            members = group_ranks(c, world)
            why = runs.problem(world, name)
            if why:
                hung = any(w in why for w in ("ranks stuck", "deadlocked", "hung", "not part of group"))
                fail(why, called=c.call(world, members[0]),
                     hint="" if not hung else "only the group's members call ring_attention_backward here: take rank "
                          "and size from dist.get_rank(group) and dist.get_world_size(group), and name each peer by "
                          "its global rank (dist.get_global_rank(group, r)) with the group passed to every send and "
                          "receive; the members need not be consecutive ranks")
            _compare_case(runs, world, name)


@pytest.mark.observed
def test_inputs_unchanged(runs):
    """q, k, v, o, lse and do are left unchanged"""
    finished = False
    for world in WORLDS:
        # Every finished case, the explicit groups too (there, only the group's members take part).
        for c in (c for c in cases_in(CASES, world) if not runs.problem(world, c.name)):
            finished = True
            for rank in group_ranks(c, world):
                changed = runs.done(world, rank, c.name).get("changed")
                if changed:
                    fail(f"rank {rank}'s {' and '.join(changed)} changed during the call (W = {world})",
                         called=c.call(world, rank), got=f"{', '.join(changed)} overwritten",
                         expected="the inputs as they were passed in",
                         hint="receive into buffers of your own (torch.empty_like) and accumulate into fresh "
                              "tensors: the caller still owns its shards")
    if not finished:
        fail(runs.problem(WORLDS[0], "plain") or "no case finished", called="ring_attention_backward on each rank")


def test_memory_per_rank(runs):
    """No rank's peak memory grows with the ring (rings of 4 and 8, shards of 2 MiB, with and without causal): no rank holds every shard or gradient"""
    for world in MEMORY_WORLDS:
        _compare_case(runs, world, "memory")
        _compare_case(runs, world, "memory_causal")
    check_rank_memory(runs, BothMemoryCases(BY_NAME["memory"]), "the K and V shards (or their gradients) of every rank")

