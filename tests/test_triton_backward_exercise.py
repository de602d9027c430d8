"""The Triton backward exercise (flashattention/triton-backward) through the real grader.

Correctness of the solution, the stub and the planted kernels under the interpreter is covered
for every exercise by test_exercises.py and test_planted.py. Here:
  * without a GPU: the solution passes with the fp16/bf16 and speed checks skipped, saying why,
    and the GPU-only planted kernels (tests/planted/.../triton-backward/gpu/) pass, so that on
    a GPU they differ from the solution only in what the GPU checks measure;
  * on a GPU (marker `gpu`, run by kernels/benchmarks/suite.py): the solution passes with the
    TFLOP/s table in its notes, some planted kernels fail their checks there too, and each
    GPU-only planted kernel fails exactly the checks its `# expect-fail-gpu:` lines name.
"""

from __future__ import annotations

import shutil

import pytest
from grading import ROOT, expected_failures, grade_path

SOLUTION = ROOT / "solutions" / "flashattention" / "11_triton_backward.py"
PLANTED = ROOT / "tests" / "planted" / "flashattention" / "triton-backward"
GPU_ONLY = sorted((PLANTED / "gpu").glob("*.py"))
HAS_GPU = shutil.which("nvidia-smi") is not None
GPU_TIMEOUT = 900  # a bare machine compiles the kernels first


def _summary(result) -> str:
    lines = [f"{result.status}: {result.message}"]
    lines += [f"  {c.status} {c.name}: {c.message.splitlines()[0] if c.message else ''}" for c in result.checks
              if c.status != "pass"]
    return "\n".join(lines + result.notes)


def gpu_expected_failures(path) -> list[str]:
    lines = path.read_text(encoding="utf-8").splitlines()[:30]
    return [line.split(":", 1)[1].strip() for line in lines if line.startswith("# expect-fail-gpu:")]


def test_gpu_only_planted_files_name_gpu_checks():
    assert len(GPU_ONLY) >= 2
    for path in GPU_ONLY:
        assert path.read_text(encoding="utf-8").startswith("# drill: flashattention/triton-backward\n"), path
        names = gpu_expected_failures(path)
        assert names and all(n.startswith(("Low precision", "Speed")) for n in names), (path.name, names)


@pytest.mark.skipif(HAS_GPU, reason="on a GPU machine the solution is graded in GPU mode")
def test_solution_passes_under_interpreter_and_says_speed_was_not_measured():
    result = grade_path(SOLUTION)
    assert result.status == "pass", _summary(result)
    skipped = {c.name: c.message for c in result.checks if c.status == "skip"}
    speed = [message for name, message in skipped.items() if name.startswith("Speed")]
    assert speed and "speed not measured" in speed[0] and "no CUDA GPU" in speed[0], skipped
    assert all(name.startswith(("Speed", "Low precision")) for name in skipped), skipped
    assert any("interpreter" in note for note in result.notes), result.notes


@pytest.mark.skipif(HAS_GPU, reason="the GPU tests grade them in full")
@pytest.mark.parametrize("path", GPU_ONLY, ids=lambda p: p.stem)
def test_gpu_only_planted_kernel_is_correct_under_the_interpreter(path):
    """Each differs from the solution only in what fp32 cannot show (precision, speed)."""
    result = grade_path(path)
    assert result.status == "pass", _summary(result)


# --------------------------------------------------------------------------- GPU


@pytest.mark.gpu
def test_gpu_solution_passes_every_check_with_speed_figures():
    # The speed verdict itself is left to the suite's triton_backward step, which runs alone:
    # here other tests may share the GPU (pytest-xdist) and skew one timing against another.
    result = grade_path(SOLUTION, timeout=GPU_TIMEOUT)
    not_passed = [c.name for c in result.checks if c.status != "pass" and not c.name.startswith("Speed")]
    assert not not_passed, _summary(result)
    assert any(note.startswith("B H S D causal") for note in result.notes), result.notes
    assert sum(note.count(" | ") == 6 for note in result.notes) == 4, result.notes  # header + 3 sizes
    assert any("max error vs float64" in note for note in result.notes), result.notes
    assert any(note.startswith("ceilings measured in this run: ") for note in result.notes), result.notes
    assert any(" binds; yours" in note and "reference at " in note for note in result.notes), result.notes


# Planted kernels whose failure path may differ on a GPU (compiled code, fp16 rounding beside the mistake).
GPU_PLANTED = ["grid_floor", "loads_not_masked", "neg_inf_lse_not_handled", "delta_left_out", "causal_off_by_one"]


@pytest.mark.gpu
@pytest.mark.parametrize("name", GPU_PLANTED)
def test_gpu_planted_kernel_fails_its_checks(name):
    path = PLANTED / f"{name}.py"
    result = grade_path(path, timeout=GPU_TIMEOUT)
    assert result.status == "fail", _summary(result)
    failed = [c.name for c in result.checks if c.status == "fail"]
    for prefix in expected_failures(path):
        assert any(n.startswith(prefix) for n in failed), f"{name} should fail '{prefix}'\n{_summary(result)}"


@pytest.mark.gpu
@pytest.mark.parametrize("path", GPU_ONLY, ids=lambda p: p.stem)
def test_gpu_only_planted_kernel_fails_only_its_gpu_checks(path):
    result = grade_path(path, timeout=GPU_TIMEOUT)
    failed = sorted({c.name.split(" [", 1)[0] for c in result.checks if c.status != "pass"})
    wanted = gpu_expected_failures(path)
    assert all(any(n.startswith(w) for n in failed) for w in wanted), _summary(result)
    if all(w.startswith("Speed") for w in wanted):  # a correct, slow kernel fails nothing else
        assert all(n.startswith("Speed") for n in failed), _summary(result)
