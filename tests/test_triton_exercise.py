"""The Triton exercise (flashattention/triton-forward) through the real grader.

Without a GPU: the worker gets TRITON_INTERPRET=1, the solution passes with the fp16/bf16
and speed checks skipped (saying why), and the stub fails as "not written yet".
On a GPU (marker `gpu`, run by kernels/benchmarks/suite.py): the solution passes every check with
the TFLOP/s table in its notes, planted kernels fail their checks (including the GPU-only
ones named by `# expect-fail-gpu:` lines), and a slow but correct kernel fails only the
speed check.
"""

from __future__ import annotations

import shutil

import pytest
from grading import ROOT, expected_failures, grade_path

from drill import catalog
from drill.grader import runner

TOPIC = catalog.load_topic("flashattention")
EXERCISE = TOPIC.get("triton-forward")
SOLUTION = ROOT / "solutions" / "flashattention" / "07_triton_forward.py"
STUB = ROOT / "exercises" / "flashattention" / "07_triton_forward.py"
PLANTED = ROOT / "tests" / "planted" / "flashattention" / "triton-forward"
HAS_GPU = shutil.which("nvidia-smi") is not None
# A bare GPU machine compiles a few dozen kernels on the first run: far past the
# exercise's own limit (EXERCISE.timeout). Later runs hit Triton's on-disk cache.
GPU_TIMEOUT = 900


def _summary(result) -> str:
    lines = [f"{result.status}: {result.message}"]
    lines += [f"  {c.status} {c.name}: {c.message.splitlines()[0] if c.message else ''}" for c in result.checks
              if c.status != "pass"]
    return "\n".join(lines + result.notes)


def test_subject_runs_triton_interpreter_when_no_gpu(monkeypatch):
    monkeypatch.setattr(runner, "nvidia_driver_present", lambda: False)
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    assert runner.subject_env(EXERCISE)["TRITON_INTERPRET"] == "1"
    assert "TRITON_INTERPRET" not in runner.subject_env(TOPIC.get("online-softmax"))


def test_subject_leaves_triton_alone_on_a_gpu(monkeypatch):
    monkeypatch.setattr(runner, "nvidia_driver_present", lambda: True)
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    assert "TRITON_INTERPRET" not in runner.subject_env(EXERCISE)


@pytest.mark.skipif(HAS_GPU, reason="on a GPU machine the solution is graded in GPU mode")
def test_solution_passes_under_interpreter_and_says_speed_was_not_measured():
    result = grade_path(SOLUTION)
    assert result.status == "pass", _summary(result)
    skipped = {c.name: c.message for c in result.checks if c.status == "skip"}
    speed = [message for name, message in skipped.items() if name.startswith("Speed")]
    assert speed and "speed not measured" in speed[0] and "no CUDA GPU" in speed[0], skipped
    assert all(name.startswith(("Speed", "Low precision")) for name in skipped), skipped
    assert any("interpreter" in note for note in result.notes), result.notes
    assert result.seconds < 60


def test_stub_fails_every_check_as_not_written_yet():
    result = grade_path(STUB, timeout=GPU_TIMEOUT if HAS_GPU else None)
    assert result.status == "fail", _summary(result)
    for check in result.checks:
        assert check.status in ("fail", "skip"), check.name
        if check.status == "fail":
            assert "not written yet" in check.message, (check.name, check.message)


# --------------------------------------------------------------------------- GPU


def gpu_expected_failures(path) -> list[str]:
    lines = path.read_text(encoding="utf-8").splitlines()[:30]
    return [line.split(":", 1)[1].strip() for line in lines if line.startswith("# expect-fail-gpu:")]


@pytest.mark.gpu
def test_gpu_solution_passes_every_check_with_speed_figures():
    # The speed verdict itself is left to the suite's triton_exercise step, which runs alone:
    # here other tests may share the GPU (pytest-xdist) and skew one timing against another.
    result = grade_path(SOLUTION, timeout=GPU_TIMEOUT)
    not_passed = [c.name for c in result.checks if c.status != "pass" and not c.name.startswith("Speed")]
    assert not not_passed, _summary(result)
    assert any(note.startswith("B H S D causal") for note in result.notes), result.notes
    assert sum(note.count(" | ") == 6 for note in result.notes) == 4, result.notes  # header + 3 sizes
    assert any("max error vs float64" in note for note in result.notes), result.notes
    assert any(note.startswith("ceilings measured in this run: ") for note in result.notes), result.notes
    light = [note for note in result.notes if "speed of light: floors matmul" in note]
    assert light and all(" binds; yours" in note and "reference at " in note for note in light), result.notes


# A few planted kernels on the GPU: the ones whose failure path differs there (a grid of
# zero programs, a compile error, fp16 rounding next to a real mistake).
GPU_PLANTED = ["grid_too_small", "acc_not_rescaled", "head_dim_hardcoded", "keys_past_s_not_masked"]


@pytest.mark.gpu
@pytest.mark.parametrize("name", GPU_PLANTED)
def test_gpu_planted_kernel_fails_its_checks(name):
    path = PLANTED / f"{name}.py"
    result = grade_path(path, timeout=GPU_TIMEOUT)
    assert result.status == "fail", _summary(result)
    failed = [c.name for c in result.checks if c.status == "fail"]
    for prefix in expected_failures(path) + gpu_expected_failures(path):
        assert any(n.startswith(prefix) for n in failed), f"{name} should fail '{prefix}'\n{_summary(result)}"


def slow_kernel_source() -> str:
    """The solution with tiny blocks and full-precision fp32 matmuls: right, and far too slow."""
    text = SOLUTION.read_text(encoding="utf-8")
    for old, new in [
        ("s = tl.dot(q, tl.trans(k)) * sm_scale",
         's = tl.dot(q.to(tl.float32), tl.trans(k.to(tl.float32)), input_precision="ieee") * sm_scale'),
        ("tl.dot(p.to(v.dtype), v)", 'tl.dot(p, v.to(tl.float32), input_precision="ieee")'),
        ("BLOCK_M, BLOCK_N = 128, 64", "BLOCK_M, BLOCK_N = 16, 16"),
        ("num_warps, num_stages = (4, 3) if D <= 64 else (8, 2)", "num_warps, num_stages = 1, 1"),
    ]:
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    return text


def test_slow_kernel_is_correct_under_the_interpreter(tmp_path):
    """The slow kernel must differ from the solution in speed only (checked cheaply on a CPU)."""
    if HAS_GPU:
        pytest.skip("the GPU test grades it in full")
    target = tmp_path / "07_triton_forward.py"
    target.write_text(slow_kernel_source(), encoding="utf-8")
    result = grade_path(target)
    assert result.status == "pass", _summary(result)


@pytest.mark.gpu
def test_gpu_slow_kernel_fails_only_the_speed_check(tmp_path):
    target = tmp_path / "07_triton_forward.py"
    target.write_text(slow_kernel_source(), encoding="utf-8")
    result = grade_path(target, timeout=GPU_TIMEOUT)
    failed = [c.name for c in result.checks if c.status != "pass"]
    assert failed == ["Speed against the reference kernel and SDPA"], _summary(result)
    assert "below" in result.checks[[c.name for c in result.checks].index(failed[0])].message
    # the report names the ceiling each size is bound by, and the slow kernel sits far under it
    shares = [int(note.split(" binds; yours at ")[1].split("%")[0]) for note in result.notes
              if " binds; yours at " in note]
    assert shares and max(shares) < 20, result.notes
