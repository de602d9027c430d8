"""The Triton decode exercise (flashattention/triton-decode) through the real grader: its speed check.

Correctness of the solution, the stub and the planted kernels is covered for every exercise
by test_exercises.py and test_planted.py. Here: the speed check. Without a GPU it skips,
saying why. On a GPU (marker `gpu`, run by kernels/benchmarks/suite.py) the solution passes it with
the GB/s table in its notes, and a correct kernel with one split and two-row blocks fails
only that check.
"""

from __future__ import annotations

import shutil

import pytest
from grading import ROOT, grade_path

SOLUTION = ROOT / "solutions" / "flashattention" / "10_triton_decode.py"
HAS_GPU = shutil.which("nvidia-smi") is not None
GPU_TIMEOUT = 900  # a bare machine compiles the kernels first


def _summary(result) -> str:
    lines = [f"{result.status}: {result.message}"]
    lines += [f"  {c.status} {c.name}: {c.message.splitlines()[0] if c.message else ''}" for c in result.checks
              if c.status != "pass"]
    return "\n".join(lines + result.notes)


def slow_kernel_source() -> str:
    """The solution with one split per head and two-row blocks on one warp: right, and far too slow."""
    text = SOLUTION.read_text(encoding="utf-8")
    for old, new in [
        ("BLOCK_N, num_warps, num_stages = 64, 4, 3", "BLOCK_N, num_warps, num_stages = 2, 1, 1"),
        ("    if num_splits is None:\n", "    num_splits = num_splits or 1\n    if num_splits is None:\n"),
    ]:
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    return text


@pytest.mark.skipif(HAS_GPU, reason="on a GPU machine the solution is graded in GPU mode")
def test_speed_check_skips_without_a_gpu_saying_why():
    result = grade_path(SOLUTION)
    assert result.status == "pass", _summary(result)
    speed = [c for c in result.checks if c.name.startswith("Speed")]
    assert len(speed) == 1 and speed[0].status == "skip", _summary(result)
    assert "no CUDA GPU" in speed[0].message, speed[0].message


@pytest.mark.skipif(HAS_GPU, reason="the GPU test grades it in full")
def test_slow_kernel_is_correct_under_the_interpreter(tmp_path):
    """The slow kernel must differ from the solution in speed only (checked cheaply on a CPU)."""
    target = tmp_path / "10_triton_decode.py"
    target.write_text(slow_kernel_source(), encoding="utf-8")
    result = grade_path(target)
    assert result.status == "pass", _summary(result)


@pytest.mark.gpu
def test_gpu_solution_passes_with_the_gbs_table():
    result = grade_path(SOLUTION, timeout=GPU_TIMEOUT)
    assert result.status == "pass", _summary(result)
    rows = [n for n in result.notes if n.count(" | ") == 5]
    assert len(rows) == 3, result.notes  # header + 2 sizes
    assert sum("not judged" in n for n in result.notes) < 2, result.notes  # at least one size judged


@pytest.mark.gpu
def test_gpu_slow_kernel_fails_only_the_speed_check(tmp_path):
    target = tmp_path / "10_triton_decode.py"
    target.write_text(slow_kernel_source(), encoding="utf-8")
    result = grade_path(target, timeout=GPU_TIMEOUT)
    failed = [c.name for c in result.checks if c.status != "pass"]
    assert failed == ["Speed: GB/s of K and V read, against the reference decode kernel"], _summary(result)
    assert "below" in next(c for c in result.checks if c.status != "pass").message
