"""Round-trip timing (drill/grader/roundtrip.py), as 07's speed check and `drill bench --kernel` use it.

On a CPU, through a real sandboxed subject with a plain-torch kernel: the seeds cannot be
predicted by the subject (a file that answers ahead for the seeds it could guess never
gets a hit), every timed output is checked, the figures come from this side, and nothing of
the user's file runs while the transfer is calibrated.
"""

from __future__ import annotations

import random
import secrets
import textwrap

import numpy as np
import pytest

from drill.grader import roundtrip
from drill.grader.expect import CheckFailure
from drill.grader.proxy import Subject, SubmissionProxy

torch = pytest.importorskip("torch")
from drill.exercises.flashattention.checks import _triton_forward_support as tf  # noqa: E402

SHAPE = (1, 2, 32, 16)  # B, H, S, D: small enough for a CPU


def test_fresh_seeds_come_from_the_os_random_source(monkeypatch):
    drawn = iter(range(100, 200))
    monkeypatch.setattr(secrets, "randbits", lambda bits: next(drawn) if bits == roundtrip.SEED_BITS else -1)
    assert roundtrip.fresh_seeds(3) == [100, 101, 102]


def test_fresh_seeds_do_not_follow_any_seeded_generator():
    def seeds_after_seeding():
        random.seed(0)
        np.random.seed(0)
        torch.manual_seed(0)
        return roundtrip.fresh_seeds(8)

    first, second = seeds_after_seeding(), seeds_after_seeding()
    assert first != second
    assert len(set(first + second)) == 16
    assert all(0 <= s < 2**63 for s in first + second)


# A kernel that remembers answers for the seeds it can guess (the next few after each one it
# sees: what sequential seeds such as 7000 + i would give away) and says when a guess paid off.
PREDICTING = textwrap.dedent('''
    import sys

    import torch
    import torch.nn.functional as F

    CACHE = {}


    def _answer(seed, shape, dtype, device, causal):
        import _triton_probe  # the probe sits beside the subject: the file can draw what it draws

        q, k, v = _triton_probe.seeded_inputs(shape, dtype, seed, device)
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)


    def flash_attention(q, k, v, causal=False, sm_scale=None):
        spec = sys._getframe(1).f_locals["spec"]  # the probe's request, seed included
        seed = int(spec["seed"])
        if seed in CACHE:
            print("HIT", seed)
            return CACHE.pop(seed)
        for guess in range(seed + 1, seed + 12):
            CACHE[guess] = _answer(guess, tuple(q.shape), q.dtype, str(q.device), causal)
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
''')

HONEST = textwrap.dedent('''
    import torch.nn.functional as F


    def flash_attention(q, k, v, causal=False, sm_scale=None):
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=sm_scale)
''')

# Right on the first call (the warm-up), wrong from then on: only checking every output catches it.
RIGHT_ONCE = textwrap.dedent('''
    import torch
    import torch.nn.functional as F

    CALLS = []


    def flash_attention(q, k, v, causal=False, sm_scale=None):
        CALLS.append(1)
        if len(CALLS) == 1:
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
        return torch.zeros_like(q)
''')


# Keeps the machine busy whenever it is not answering a call: left running, it would slow the
# calibration's calls and so shrink its own figure (round trip minus transfer).
HOGGING = textwrap.dedent('''
    import threading

    import torch.nn.functional as F


    def _spin():
        while True:
            sum(range(10000))


    threading.Thread(target=_spin, daemon=True).start()


    def flash_attention(q, k, v, causal=False, sm_scale=None):
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=sm_scale)
''')


def _subjects(tmp_path, source: str):
    path = tmp_path / "kernel.py"
    path.write_text(source, encoding="utf-8")
    subject = Subject(path, ["flash_attention"], scratch_root=tmp_path / "scratch", hidden=[], memory_mb=16384)
    subject.start()
    assert not subject.load_error, subject.load_error
    user = SubmissionProxy(subject)
    return user, tf.null_subject(user)


def _reference(q, k, v, causal):
    return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)


def _time(tmp_path, source: str, calls: int = 4):
    user, calibration = _subjects(tmp_path, source)
    SubmissionProxy.outputs.clear()
    try:
        return tf.time_seeded(user, calibration, SHAPE, torch.bfloat16, True, _reference, "flash_attention(test)",
                              calls=calls, device="cpu"), "".join(SubmissionProxy.outputs)
    finally:
        calibration._subject.close()
        user._subject.close()


@pytest.mark.slow
def test_a_file_cannot_answer_ahead_for_the_seeds_it_is_given(tmp_path):
    timing, printed = _time(tmp_path, PREDICTING)
    assert "HIT" not in printed, printed
    assert timing.max_error == 0.0 and timing.round_trip > 0 and timing.transfer > 0


@pytest.mark.slow
def test_the_predicting_file_would_win_with_sequential_seeds(tmp_path, monkeypatch):
    """The test above can fail: with seeds like 7000 + i the cached answers are used."""
    monkeypatch.setattr(roundtrip, "fresh_seeds", lambda count: [7000 + i for i in range(count)])
    _, printed = _time(tmp_path, PREDICTING)
    assert printed.count("HIT") >= 3, printed


@pytest.mark.slow
def test_every_timed_output_is_checked(tmp_path):
    with pytest.raises(CheckFailure) as failure:
        _time(tmp_path, RIGHT_ONCE)
    assert "o is wrong" in failure.value.summary


@pytest.mark.slow
def test_calibration_runs_drills_null_kernel_not_the_users(tmp_path):
    user, calibration = _subjects(tmp_path, HONEST)
    try:
        assert calibration._subject.user_file == tf.NULL_KERNEL
        assert calibration._subject.helpers == [tf.PROBE] and calibration._subject.cuda == user._subject.cuda
        assert calibration._subject.scratch_root == user._subject.scratch_root / "calibration"
    finally:
        calibration._subject.close()
        user._subject.close()


@pytest.mark.slow
def test_nothing_of_the_users_file_runs_while_the_transfer_is_calibrated(tmp_path, monkeypatch):
    user, calibration = _subjects(tmp_path, HOGGING)
    alive_during_calibration = []
    timed = tf.timed_round_trips

    def watching(proxy, *args, **kwargs):
        if proxy is calibration:
            alive_during_calibration.append(user._subject.alive)
        return timed(proxy, *args, **kwargs)

    monkeypatch.setattr(tf, "timed_round_trips", watching)
    try:
        timing = tf.time_seeded(user, calibration, SHAPE, torch.bfloat16, True, _reference, "flash_attention(test)",
                                calls=3, device="cpu")
        assert alive_during_calibration == [False, False], alive_during_calibration
        assert not user._subject.alive  # nor while the caller times the references next
        assert timing.round_trip > 0 and timing.transfer > 0
    finally:
        calibration._subject.close()
        user._subject.close()


def test_a_speed_check_with_no_judged_size_is_skipped_not_passed():
    # Every size within the transfer's noise: the check says so instead of passing.
    with pytest.raises(pytest.skip.Exception, match="speed not judged"):
        roundtrip.require_judged(0)
    assert roundtrip.require_judged(1) is None


def test_host_reads_in_a_launcher_are_named_in_the_hint():
    with pytest.raises(CheckFailure) as host:
        tf.check_no_torch_compute({"torch_compute": ["max", "__int__"]}, "flash_decode(...)", "o")
    assert "int(seq_lens.max())" in host.value.hint
    with pytest.raises(CheckFailure) as matmul:
        tf.check_no_torch_compute({"torch_compute": ["matmul"]}, "flash_decode(...)", "o")
    assert "on the host" not in matmul.value.hint
