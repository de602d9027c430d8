"""Timing the user's code from the trusted side: whole round trips into the subject.

The user's code runs in the sandboxed subject, so nothing it measures about itself can be
believed. The trusted side times whole calls instead (request out, work in the subject,
result back) and subtracts what the same round trip costs a do-nothing function in a
clean subject (`calibration_subject`): what is left is the user's work, within the
transfer's noise.

Each timed call asks for inputs drawn inside the subject from a seed sent with the
request (no large arrays travel to it), and every output is checked on the trusted side
against the same inputs drawn here. Seeds come from `fresh_seeds`, the operating
system's random source: the user's code, which sees each seed only when its call
arrives, cannot compute answers ahead for the calls still to come (fixed or sequential
seeds would let a warm-up call fill a cache that makes the timed calls free).

Used by 07's speed check (exercises/flashattention/checks/_triton_forward_support.py)
and by `drill bench --kernel` (drill/grader/bench_user.py). Torch-free: the caller draws the
inputs and checks the outputs.
"""

from __future__ import annotations

import secrets
import time
from pathlib import Path
from typing import Callable

from drill.grader.proxy import Outcome, Subject

SEED_BITS = 63  # torch's manual_seed takes any non-negative int64


def fresh_seeds(count: int) -> list[int]:
    """`count` seeds the subject cannot predict (secrets: the OS's random source, never a seeded PRNG)."""
    return [secrets.randbits(SEED_BITS) for _ in range(count)]


def calibration_subject(user: Subject, clean_file: Path, functions: list[str] | None = None) -> Subject:
    """A second subject like `user` (same containment, environment and helpers) running `clean_file`,
    drill's own do-nothing function, never the user's: the user's code cannot slow it down to make
    its own time look shorter. Started on its first call; close it when done."""
    clean = Subject(Path(clean_file), list(functions or user.functions), scratch_root=user.scratch_root / "calibration",
                    hidden=user.hidden, memory_mb=user.memory_mb, cap_address_space=user.cap_address_space,
                    env=user.env, cuda=user.cuda)
    clean.helpers = list(user.helpers)
    return clean


def timed_round_trips(call: Callable[[int], Outcome], seeds: list[int],
                      check: Callable[[int, Outcome], None] | None = None) -> float:
    """Median ms of `call(seed)` over `seeds`, each call timed whole here.

    `check(seed, outcome)` sees every output, outside the timed part; it raises to stop.
    """
    times = []
    for seed in seeds:
        started = time.perf_counter()
        outcome = call(seed)
        times.append((time.perf_counter() - started) * 1e3)
        if check is not None:
            check(seed, outcome)
    times.sort()
    return times[len(times) // 2]


def within_noise(round_trip_ms: float, transfer_ms: float) -> bool:
    """Whether the transfer is over half the round trip: the difference is then within its noise
    (seen on an H200: 1-5 ms of kernel in 60-120 ms of transfer)."""
    return transfer_ms > 0.5 * round_trip_ms


def require_judged(judged_rows: int) -> None:
    """Skip a speed check none of whose sizes stood out of the transfer's noise: a pass there
    would claim a speed that was never measured (seen on an H100: every row of a kernel at
    0.07-0.32x the reference was in noise)."""
    if not judged_rows:
        import pytest  # the grader's checks run under pytest; this module is imported outside it too

        pytest.skip("speed not judged: at every size the transfer was over half the round trip, so your "
                    "kernel's own time was within its noise (see the table)")
