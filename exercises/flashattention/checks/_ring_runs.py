"""Start the ring-attention ranks once per grading and explain what happened in them.

Not collected by pytest (leading underscore). `launch` makes a scratch folder holding
copies of _ring_harness.py, sandbox.py and the user's file, with one folder per rank that
holds that rank's shards only, and runs the harness there under the subject's sandbox
(drill.grader.proxy.Subject.run_script): the harness forks W gloo ranks per world size,
each an untrusted subject. Once the whole tree has ended, it reads every rank's (o, lse)
back (regular .npy files, size-capped, no pickle) and returns a `Runs` object the checks
query: per world size, per rank, per case, the (o, lse) a rank returned, the
communication calls it made, or why it has no result.

Trust: the inputs and the float64 reference live here; each (o, lse) is compared with the
reference, so no value passes unless it is right. The events (which calls a rank made,
whether it changed its inputs, FLOPs) are reported from inside the ranks: they can fail a
check, never turn a wrong value into a pass. A rank that hides a collective from the
recorder and still computes the right values is not caught by these observations.
"""

from __future__ import annotations

import json
import math
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from drill.grader import fixtures, sandbox, usertrace
from drill.grader.expect import fail
from drill.grader.proxy import load_array, read_regular

HARNESS = Path(__file__).with_name("_ring_harness.py")
SUMMARY_LIMIT_BYTES = 8 * 1024 * 1024
RESULT_LIMIT_BYTES = 1024 * 1024  # one rank's o or lse: a few hundred floats
WORLDS = (2, 3, 4)
# Rings of 4 and of 8 with shards of 2 MiB: a rank that passes shards on holds as much in either,
# one that gathers every K/V shard holds 2·4 more in the larger; the kernel counts each peak.
MEMORY_WORLDS = (4, 8)
# Shards a rank may add from the smaller ring to the larger. Measured with 2 MiB shards: honest
# rings of 06 and 12 -0.7 to -0.3, 06's all-gather through the process-group object +7.6, 12's
# full-size dK/dV summed with all_reduce +7.7.
MEMORY_GROWTH = 2
PROGRESS_LIMIT_S = 10.0  # no rank finished a case for this long: the ranks are stuck
LAUNCH_LIMIT_S = 100.0  # the whole launcher, a backstop only


@dataclass(frozen=True)
class Case:
    name: str
    causal: bool
    n: int  # rows per rank
    d: int
    spread: float  # q and k entries ~ N(0, spread²): scores ~ N(0, spread⁴)
    poison_last_v: bool = False  # the last shard's V is NaN: only a rank that uses it sees NaN
    group: tuple | None = None  # the global ranks of an explicit process group (None: the default group)
    worlds: tuple = WORLDS  # the world sizes that run this case

    @property
    def shard_bytes(self) -> int:
        return self.n * self.d * 8

    def call(self, world: int, rank: int) -> str:
        members = group_ranks(self, world)
        group = "None" if self.group is None else f"new_group({members})"
        return (f"ring_attention(q, k, v, group={group}, causal={self.causal}) on rank {rank} of {world}, "
                f"shards [{self.n}, {self.d}] of a sequence of {self.n * len(members)}")


CASES = (
    Case("plain", causal=False, n=5, d=8, spread=1.0),
    Case("causal", causal=True, n=5, d=8, spread=1.0),
    Case("large", causal=False, n=4, d=4, spread=32.0),  # scores of about ±1e3
    Case("large_causal", causal=True, n=4, d=4, spread=32.0),
    Case("future_nan", causal=True, n=3, d=4, spread=1.0, poison_last_v=True),
    # Last: code that ignores `group` hangs here, after every other case has finished.
    Case("group", causal=True, n=4, d=8, spread=1.0, group=(1, 2, 3)),
    # Members with gaps ([0, 2] of 3, [0, 2, 3] of 4): group rank r + 1 is not global rank r + 1.
    Case("group_gaps", causal=True, n=4, d=8, spread=1.0, group=(0, 2, 3), worlds=(3, 4)),
    Case("memory", causal=False, n=4, d=65536, spread=1.0, worlds=MEMORY_WORLDS),
)
BY_NAME = {c.name: c for c in CASES}


def make_inputs(world: int) -> dict[str, np.ndarray]:
    # From the run's secret seed: a rank cannot rebuild the other ranks' shards from its own.
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


class Runs:
    """Everything the ranks reported, for every world size."""

    def __init__(self, inputs: dict, summary: dict | None, results: dict, launch_error: str = "",
                 cases=CASES, function: str = "ring_attention", names: str | tuple = "qkv"):
        self.inputs = inputs
        self.cases, self.function, self.names = tuple(cases), function, tuple(names)
        self.by_name = {c.name: c for c in self.cases}
        self.results = results  # (world, rank, case) -> {"o": array, "lse": array}, read by the grader
        self.launch_error = launch_error
        self.worlds = {}
        for w in (summary or {}).get("worlds", []) if isinstance(summary, dict) else []:
            if isinstance(w, dict) and w.get("world") in inputs and isinstance(w.get("ranks", []), list):
                w["ranks"] = [[e for e in events if isinstance(e, dict)] if isinstance(events, list) else []
                              for events in w.get("ranks", [])]
                self.worlds[w["world"]] = w

    # ---- raw access

    def events(self, world: int, rank: int) -> list[dict]:
        ranks = self.worlds.get(world, {}).get("ranks", [])
        return ranks[rank] if rank < len(ranks) else []

    def done(self, world: int, rank: int, case: str) -> dict | None:
        for e in self.events(world, rank):
            if e.get("event") == "case_done" and e.get("case") == case:
                return e
        return None

    def arrays(self, world: int, rank: int, case: str) -> dict[str, np.ndarray]:
        return self.results.get((world, rank, case), {})

    def peak_bytes(self, world: int, rank: int) -> int | None:
        """The rank's peak resident memory over its life, as the kernel counted it (the launcher's wait4)."""
        peaks = self.worlds.get(world, {}).get("peaks", [])
        value = peaks[rank] if isinstance(peaks, list) and rank < len(peaks) else None
        return value if isinstance(value, int) else None

    def peak_before_user(self, world: int, rank: int) -> int | None:
        """The rank's peak before the user's file was imported: its shards, torch and gloo."""
        first = next((e for e in self.events(world, rank) if e.get("event") == "measure"), {})
        value = first.get("peak")  # later "measure" events could come from the user's code: never read
        return value if isinstance(value, int) else None

    def ops(self, world: int, rank: int, case: str | None = None) -> list[dict]:
        """Recorded communication calls (entries only), optionally of one case."""
        return [e for e in self.events(world, rank)
                if "op" in e and e.get("phase") != "exit" and (case is None or e.get("case") == case)]

    def full(self, world: int, case: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return tuple(self.inputs[world][f"{case}_{t}"] for t in self.names)

    # ---- why a case has no result

    def problem(self, world: int, case: str | None = None) -> str:
        """'' if every rank finished `case` (or everything, for None); else the reason, for the learner."""
        run = self.worlds.get(world)
        if run is None:
            return self.launch_error or f"the ranks for W = {world} were never started"
        if case is not None and all(self.done(world, r, case) for r in range(world)):
            return ""
        if case is None and run["status"] == "ok":
            return ""
        return self._explain(world, run)

    def _explain(self, world: int, run: dict) -> str:
        if run["status"] == "skipped":
            return (f"not run with W = {world}: the ranks hung with W = {run['after']}, "
                    f"so larger rings were not tried. {self._explain(run['after'], self.worlds[run['after']])}")
        for rank, events in enumerate(run["ranks"]):
            for e in events:
                kind = e.get("event")
                if kind == "load_error":
                    return f"with W = {world}, rank {rank} could not import your file: {_exc(e)}"
                if kind == "init_error":
                    return (f"with W = {world}, rank {rank} could not join the gloo process group ({_exc(e)}); "
                            "this is a problem of the machine or of drill, not of your code")
                if kind == "case_error":
                    if e["type"] == "NotImplementedError":
                        return (f"not written yet: {self.function} raises NotImplementedError{_where(e)}; "
                                "replace the TODO")
                    return (f"with W = {world}, rank {rank} raised {e['type']}"
                            f"{': ' + e['message'] if e['message'] else ''}{_where(e)} in the case "
                            f"'{e['case']}' ({_case_words(e['case'], self.by_name)})")
                if kind == "died":
                    return (f"with W = {world}, rank {rank} ended abruptly (os._exit, a crash, or out of memory) "
                            "before it finished")
        if run["status"] == "init_timeout":
            return f"with W = {world}, the ranks did not all join the process group within the time allowed"
        if run["status"] == "stuck":
            return self._deadlock(world, run)
        return f"with W = {world}, the ranks did not finish (status {run['status']})"

    def _deadlock(self, world: int, run: dict) -> str:
        last_ops = []
        cases = self.cases
        finished_by_all = len(cases)
        for events in run["ranks"]:
            done = {e["case"] for e in events if e.get("event") == "case_done"}
            finished_by_all = min(finished_by_all, next((i for i, c in enumerate(cases) if c.name not in done),
                                                        len(cases)))
            last_ops.append(_open_blocking([e for e in events if "op" in e]))
        stuck_case = cases[finished_by_all].name if finished_by_all < len(cases) else None
        where = f" in the case '{stuck_case}' ({_case_words(stuck_case, self.by_name)})" if stuck_case else ""
        head = f"ranks deadlocked: with W = {world}, the ranks made no progress for {PROGRESS_LIMIT_S:g} s{where}"
        if all(op in ("send", "send_object_list") for op in last_ops):
            return (head + "; every rank is inside a blocking dist.send, and none has posted a receive. "
                    "A blocking send waits until the peer receives (gloo always; NCCL for large tensors), "
                    "so a ring where every rank sends first never moves: use isend/irecv or batch_isend_irecv")
        if all(op in ("recv", "recv_object_list") for op in last_ops):
            return (head + "; every rank is inside a blocking dist.recv, waiting for a message nobody sent: "
                    "post the sends before (or together with) the receives, e.g. with batch_isend_irecv")
        blocked = ", ".join(f"rank {r}: {op or 'not in send/recv'}" for r, op in enumerate(last_ops))
        head = head.replace("ranks deadlocked", "ranks stuck", 1)
        return (head + f" ({blocked}). Either some rank waits for a message no other rank sends (every isend "
                "needs a matching irecv on the neighbour, same count, same order, and every request must be "
                "waited on), or a loop never ends")


def _open_blocking(op_events: list[dict]) -> str | None:
    """The blocking send/recv a rank entered and never left, if any."""
    depth = {}
    last = None
    for e in op_events:
        if e.get("phase") == "enter":
            depth[e["op"]] = depth.get(e["op"], 0) + 1
            last = e["op"]
        elif e.get("phase") == "exit":
            depth[e["op"]] = depth.get(e["op"], 0) - 1
    return last if last and depth.get(last, 0) > 0 else None


def _exc(e: dict) -> str:
    return f"{e['type']}{': ' + e['message'] if e.get('message') else ''}{_where(e)}"


def _where(e: dict) -> str:
    return f" (your file, line {e['line']})" if e.get("line") else ""


def _case_words(name: str, by_name=None) -> str:
    c = (BY_NAME if by_name is None else by_name).get(name)
    if c is None:
        return name
    bits = ["causal" if c.causal else "no mask", f"[{c.n}, {c.d}] per rank"]
    if c.spread > 4:
        bits.append("scores of about ±1e3")
    if c.poison_last_v:
        bits.append("the last shard's V is NaN")
    if getattr(c, "group", None) is not None:
        bits.append(f"an explicit process group of ranks {list(c.group)}")
    return ", ".join(bits)


def launch(subject, user_file: str, cases=CASES, make=None, function: str = "ring_attention",
           names: str | tuple = "qkv", outputs: tuple = ("o", "lse")) -> Runs:
    """Lay out the scratch folder, run the harness in the sandbox, read what the ranks left.

    `make(world)` gives the full arrays `{case}_{name}` (rows = positions); a case with a `group`
    (global ranks) shards its sequence over the group's members only, in group order."""
    worlds = sorted({w for case in cases for w in case.worlds})
    inputs = {w: (make or make_inputs)(w) for w in worlds}
    work = subject.script_scratch("ring")
    shutil.copyfile(HARNESS, work / HARNESS.name)
    for module in ("sandbox", "seccomp", "namespaces"):
        shutil.copyfile(Path(sandbox.__file__).with_name(f"{module}.py"), work / f"{module}.py")
    shutil.copyfile(Path(usertrace.__file__), work / "usertrace.py")
    source = Path(user_file).read_bytes()
    name = Path(user_file).name
    for w, arrays in inputs.items():
        for rank in range(w):
            folder = work / "ranks" / f"W{w}_r{rank}"
            folder.mkdir(parents=True)
            (folder / name).write_bytes(source)
            shards = {}
            for case in cases_in(cases, w):
                members = group_ranks(case, w)
                if rank not in members:
                    continue
                at = members.index(rank)
                rows = slice(at * case.n, (at + 1) * case.n)
                shards.update({f"{case.name}_{t}": arrays[f"{case.name}_{t}"][rows] for t in names})
                for key in outputs:  # the only files a rank may write (it may create none)
                    (folder / f"out_{case.name}_{key}.npy").touch()
            np.savez(folder / "inputs.npz", **shards)
    plan = {"worlds": worlds, "progress_limit_s": PROGRESS_LIMIT_S, "user_file": name,
            "function": function, "inputs": list(names), "outputs": list(outputs),
            "file_limit": {str(w): _result_limit(cases_in(cases, w)) for w in worlds},
            "cases": [{"name": c.name, "causal": c.causal, "group": _group_spec(c), "worlds": list(c.worlds)}
                      for c in cases]}
    (work / "plan.json").write_text(json.dumps(plan), encoding="utf-8")
    code, tail = subject.run_script(work, HARNESS.name, [str(work)], LAUNCH_LIMIT_S, sockets=True)
    error = ""
    if code is None:
        error = f"the ranks did not finish within {LAUNCH_LIMIT_S:g} s"
    elif code != 0:
        last = tail.strip().splitlines()[-1:] or ["?"]
        error = f"the ranks could not be started (a problem in drill or its torch install): {last[0][:300]}"
    summary = None
    raw = read_regular(work / "summary.json", SUMMARY_LIMIT_BYTES)
    if raw is not None:
        try:
            summary = json.loads(raw)
        except ValueError:
            summary = None
    results = {}
    for w in worlds:
        for rank in range(w):
            folder = work / "ranks" / f"W{w}_r{rank}"
            for case in cases_in(cases, w):
                found = {key: load_array(folder / f"out_{case.name}_{key}.npy", _result_limit([case]))
                         for key in outputs}
                results[(w, rank, case.name)] = {k: a.astype(np.float64) for k, a in found.items()
                                                 if a is not None and a.dtype.kind in "fiu"}
    return Runs(inputs, summary, results, error, cases, function, names)


def check_rank_memory(runs: Runs, case, gathered: str) -> None:
    """Verified: a rank of the larger ring holds at most MEMORY_GROWTH shards more than the most any rank
    of the smaller one held. Each figure is a rank's peak over its life less the peak it had
    reached before the user's file was imported, both kept by the kernel; an honest ring holds
    the same whatever its size, so no allowance for the user's own buffers is needed."""
    mib = case.shard_bytes / 2**20
    held = {}
    for world in MEMORY_WORLDS:
        for rank in range(world):
            peak, before = runs.peak_bytes(world, rank), runs.peak_before_user(world, rank)
            if peak is None or before is None:
                fail(f"rank {rank}'s peak memory could not be measured (the rank reported none before your file "
                     "was imported), so this check cannot pass", called=case.call(world, rank))
            held[world, rank] = (peak - before) / case.shard_bytes
    small, large = MEMORY_WORLDS
    base = max(held[small, r] for r in range(small))
    rank = max(range(large), key=lambda r: held[large, r])
    if held[large, rank] - base > MEMORY_GROWTH:
        fail(f"rank {rank} of {large} held {held[large, rank]:.1f} shards' worth ({held[large, rank] * mib:.0f} MiB) "
             f"above its own inputs, against at most {base:.1f} for a rank of {small}: its memory grows with the ring",
             called=case.call(large, rank), got=f"{held[large, rank] - base:+.1f} shards from {small} ranks to {large}",
             expected=f"at most {MEMORY_GROWTH:+g}: a rank holds its own shards and those in flight, however many ranks",
             hint=f"each rank added to the ring adds its shard to every rank's memory: {gathered} are all held at "
                  "once, as after an all-gather, the memory ring attention exists to avoid. Pass each shard on "
                  "once it is used, and keep no list of received shards")


class BothMemoryCases:
    """An unmasked and a causal memory case as one, for check_rank_memory: a rank's peak covers its whole
    life, so a rank that gathers every shard in either case shows in it."""

    def __init__(self, plain: Case):
        self.plain, self.shard_bytes = plain, plain.shard_bytes

    def call(self, world: int, rank: int) -> str:
        return self.plain.call(world, rank).replace("causal=False", "causal=False, then causal=True")


def cases_in(cases, world: int) -> list:
    """The cases a world of this size runs."""
    return [c for c in cases if world in c.worlds]


def _result_limit(cases) -> int:
    """The largest result file a rank may write for these cases: one shard and a .npy header."""
    return max([RESULT_LIMIT_BYTES] + [c.shard_bytes + 4096 for c in cases])


def check_future_work_skipped(runs, world: int, plain_case, causal_case, work: str) -> None:
    """Causal ring: rank r's queries see the shards of ranks 0 to r only, so with future shards
    skipped it does about (r + 1)/W of its unmasked matmul work (the last rank has none to skip).
    The count sees torch's matmuls only, so work done elsewhere fails first: a pointwise product
    as large as a shard's scores times d (a matmul by broadcasting), or tensors handed to NumPy.
    `work` names the block maths in the hints ("the weighted sum", "the gradients")."""
    plain_call, causal_call = plain_case.call, causal_case.call
    for rank in range(world):
        for case in (plain_case, causal_case):
            _check_work_is_matmuls(runs.done(world, rank, case.name) or {}, case, world, rank, work)
    for rank in range(world - 1):
        plain, causal = (runs.done(world, rank, case).get("flops") for case in ("plain", "causal"))
        if not plain or causal is None:  # fails closed: work that cannot be counted cannot show the skip
            fail(f"rank {rank}'s matmul work could not be counted (W = {world})", called=plain_call(world, rank),
                 got=f"{plain!r} FLOPs counted without a mask, {causal!r} with causal=True",
                 expected="the block maths as torch matmuls (@), which torch's FLOP counter sees",
                 hint=f"compute the scores and {work} on torch tensors with @ (q @ k.T, p @ v), not with "
                      "elementwise products summed or in NumPy: the check counts each rank's matmul work to see "
                      "that future shards are skipped")
        if causal > plain * (rank + 1.5) / world:
            fail(f"rank {rank} did {causal / plain:.0%} of the unmasked matmul work with causal=True (W = {world})",
                 called=causal_call(world, rank), got=f"{causal} FLOPs causal, {plain} without a mask",
                 expected=f"about {rank + 1}/{world} of it: rank {rank}'s queries see the shards of ranks 0 to "
                          f"{rank} only",
                 hint=f"every K/V shard from a later rank is fully masked for this rank's queries: skip {work} for "
                      "it (src > rank) instead of computing it and masking it away, on every rank; that skip is "
                      "what saves about half the work of causal ring attention")


def _check_work_is_matmuls(done: dict, case, world: int, rank: int, work: str) -> None:
    """One rank's call did its block maths as torch matmuls, which the FLOP count sees (the harness's
    _WorkOutsideMatmuls record; a missing record fails, as one a rank undid would)."""
    largest, converted = done.get("largest_pointwise"), done.get("converted")
    called = case.call(world, rank)
    if not isinstance(largest, int) or not isinstance(converted, int):
        fail(f"rank {rank}'s work outside matmuls could not be recorded (W = {world})", called=called,
             got=f"largest pointwise result {largest!r}, elements converted {converted!r}",
             expected="the record the harness keeps during the call")
    product = case.n * case.n * case.d  # a shard's scores, each with its d products kept
    if converted >= case.n * case.d:
        fail(f"rank {rank} handed {converted} tensor elements to NumPy or Python lists (W = {world})", called=called,
             got=f"{converted} elements converted (.numpy(), np.asarray, .tolist())",
             expected="none: the block maths stay on torch tensors",
             hint=f"compute the scores and {work} with torch matmuls (@): work done in NumPy is invisible to the "
                  "FLOP count that shows a causal rank skipping future shards")
    if largest >= product:
        fail(f"rank {rank} built a pointwise result of {largest} elements, a shard's {case.n}x{case.n} scores "
             f"times d = {case.d} (W = {world})", called=called,
             got=f"a pointwise torch result of {largest} elements",
             expected=f"under {product}: products summed by a matmul, not broadcast then summed",
             hint=f"compute the scores and {work} with @ (q @ k.T, p @ v), not q[:, None] * k[None] summed: "
                  "torch's FLOP counter sees matmuls only, and the future-shard check counts them")


def group_ranks(case, world: int) -> list[int]:
    """The global ranks that take part in a case, in group order (every rank unless it names a group)."""
    group = getattr(case, "group", None)
    return list(range(world)) if group is None else [g for g in group if g < world]


def _group_spec(case):
    group = getattr(case, "group", None)
    return None if group is None else list(group)


# --------------------------------------------------------------------------- float64 attention


def shard_of(world: int, n: int) -> np.ndarray:
    """Shard index of every global position."""
    return np.repeat(np.arange(world), n)


def partials(q, k, v, n: int, visible: np.ndarray):
    """Per key shard: (O_s [s, d], L_s [s]) of every query over that shard's visible keys."""
    scores = (q @ k.T) / math.sqrt(q.shape[1])
    parts = []
    for start in range(0, k.shape[0], n):
        cols = slice(start, start + n)
        s = np.where(visible[:, cols], scores[:, cols], -np.inf)
        m = s.max(axis=1)
        safe = np.where(np.isfinite(m), m, 0.0)
        with np.errstate(under="ignore"):
            e = np.exp(s - safe[:, None])
            total = e.sum(axis=1)
            with np.errstate(divide="ignore"):
                lse = np.where(total > 0, safe + np.log(np.where(total > 0, total, 1.0)), -np.inf)
            o = (e / np.where(total > 0, total, 1.0)[:, None]) @ v[cols]
        parts.append((o, lse))
    return parts


def combine(parts, weights=None):
    """Attention over the union of the parts, each counted weights[i] times (0 leaves it out)."""
    weights = [1] * len(parts) if weights is None else weights
    ls = np.stack([L + math.log(w) if w > 0 else np.full_like(L, -np.inf) for (o, L), w in zip(parts, weights)])
    m = ls.max(axis=0)
    safe = np.where(np.isfinite(m), m, 0.0)
    with np.errstate(under="ignore", divide="ignore"):
        e = np.exp(ls - safe)  # [parts, s]
        total = e.sum(axis=0)
        lse = np.where(total > 0, safe + np.log(np.where(total > 0, total, 1.0)), -np.inf)
        o = sum(e[i][:, None] * parts[i][0] for i in range(len(parts))) / np.where(total > 0, total, 1.0)[:, None]
    return o, lse
