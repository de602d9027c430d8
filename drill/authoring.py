"""Author checks: what every exercise must satisfy before a learner sees it.

Shared by the project's tests (tests/test_exercises.py, tests/test_planted.py) and by
`drill dev check`, so both judge an exercise by the same rules:

- its catalog entry has a stub, a solution, a checks file and at least two hints;
- stub and solution mirror each other (header line, TODO only in the stub, signatures);
- the stub fails its checks and the solution passes them;
- every planted wrong implementation (tests/planted/<topic>/<id>/*.py) is rejected by the
  checks it names on its `# expect-fail:` lines, and every check is failed by some planted file.

Each function returns a list of problems in words; an empty list means the rule holds.
"""

from __future__ import annotations

import ast
import shutil
from collections import defaultdict
from pathlib import Path
from typing import TYPE_CHECKING

from drill import paths

if TYPE_CHECKING:
    from drill.catalog import Exercise
    from drill.grader.result import GradeResult

MIN_HINTS = 2
MIN_PLANTED = 6  # wrong implementations per exercise; fewer rarely covers every check


def planted_root() -> Path | None:
    """tests/planted of the source checkout drill runs from (absent from an installed drill)."""
    root = paths.exercises_root().resolve().parent / "tests" / "planted"
    return root if root.is_dir() else None


def planted_files(root: Path, ex: Exercise | None = None) -> list[Path]:
    """The planted files of one exercise, or of every exercise under root."""
    pattern = f"{ex.topic}/{ex.id}/*.py" if ex is not None else "*/*/*.py"
    return sorted(root.glob(pattern))


def expected_failures(path: Path) -> list[str]:
    """The check-name prefixes a planted file must fail (its `# expect-fail:` lines)."""
    lines = path.read_text(encoding="utf-8").splitlines()[:30]
    return [line.split(":", 1)[1].strip() for line in lines if line.startswith("# expect-fail:")]


def base_name(check_name: str) -> str:
    """A check's name without its parametrised variant (' [id]')."""
    return check_name.split(" [", 1)[0]


def grade_copy(ex: Exercise, source: Path, folder: Path, seed: int | None = None) -> GradeResult:
    """Grade `source` as the learner would hand it in: copied under the exercise's file name."""
    from drill.grader.runner import grade

    target = folder / ex.file
    shutil.copy(source, target)
    return grade(ex, target, seed=seed)


# -- the rules ---------------------------------------------------------------------------


def layout_problems(ex: Exercise) -> list[str]:
    """Files present, enough hints, and stub and solution mirroring each other."""
    missing = [f"no {what} {path}" for what, path in
               (("stub", ex.stub_path), ("solution", ex.solution_path), ("checks file", ex.checks_path))
               if not path.is_file()]
    problems = [f"{ex.key}: {m}" for m in missing]
    if len(ex.hints) < MIN_HINTS:
        problems.append(f"{ex.key}: needs at least {MIN_HINTS} hints, has {len(ex.hints)}")
    if ex.stub_path.is_file() and ex.solution_path.is_file():
        problems += mirror_problems(ex, ex.stub_path.read_text(encoding="utf-8"),
                                    ex.solution_path.read_text(encoding="utf-8"))
    return problems


def mirror_problems(ex: Exercise, stub: str, solution: str) -> list[str]:
    problems = []
    header = f"# drill: {ex.key}"
    for what, text in (("stub", stub), ("solution", solution)):
        if header not in text.splitlines()[:1]:
            problems.append(f"{ex.key}: the {what}'s first line must be '{header}'")
    if "# TODO" not in stub or "raise NotImplementedError" not in stub:
        problems.append(f"{ex.key}: the stub needs '# TODO' markers and 'raise NotImplementedError'")
    if "TODO" in solution:
        problems.append(f"{ex.key}: the solution still has a TODO")
    stub_sigs, solution_sigs = _signatures(stub), _signatures(solution)
    for name in ex.functions:
        if name not in stub_sigs:
            problems.append(f"{ex.key}: the stub lacks {name}")
        elif stub_sigs[name] != solution_sigs.get(name):
            problems.append(f"{ex.key}: {name} has different signatures in stub and solution")
    return problems


def _signatures(text: str) -> dict[str, list[str]]:
    return {node.name: [a.arg for a in node.args.args] for node in ast.parse(text).body
            if isinstance(node, ast.FunctionDef) and not node.name.startswith("_")}


def stub_problems(ex: Exercise, result: GradeResult) -> list[str]:
    """The untouched stub fails every check it runs, saying it is not written yet."""
    if result.status != "fail":
        return [f"{ex.key}: the stub should fail, got {result.status}: {result.message}"]
    if not result.checks or any(c.status not in ("fail", "skip", "not-run") for c in result.checks):
        passed = [c.name for c in result.checks if c.status == "pass"]
        return [f"{ex.key}: the stub passes checks {passed}"]
    if not any("not written yet" in c.message for c in result.checks):
        return [f"{ex.key}: no check tells the learner the stub is not written yet"]
    return []


def solution_problems(ex: Exercise, result: GradeResult) -> list[str]:
    """The reference solution passes every check."""
    if result.status == "pass":
        return []
    failing = [(c.name, c.message) for c in result.checks if c.status != "pass"]
    return [f"{ex.key}: the solution does not pass: {failing or result.message}"]


def planted_file_problems(path: Path, result: GradeResult) -> list[str]:
    """A planted file is rejected, by (at least) the checks its expect-fail lines name."""
    expected = expected_failures(path)
    if not expected:
        return [f"{path.name} names no check it must fail (# expect-fail: ...)"]
    if result.status not in ("fail", "error"):
        return [f"{path.name} passed: {result.message}"]
    failed = [c.name for c in result.checks if c.status == "fail"]
    problems = []
    for prefix in expected:
        if not any(name.startswith(prefix) for name in failed):
            problems.append(f"{path.name} should fail '{prefix}' (seed {result.seed}: drill check {path} "
                            f"--seed {result.seed} replays it), failed: {failed or result.message}")
    problems += [f"{c.name} failed {path.name} without a message" for c in result.checks
                 if c.status == "fail" and not c.message]
    return problems


def coverage_problems(ex: Exercise, solution: GradeResult, planted: list[Path]) -> list[str]:
    """Every check that runs on the solution is named by some planted file's expect-fail line."""
    names = {base_name(c.name) for c in solution.checks if c.status != "skip"}
    covered: dict[str, list[str]] = defaultdict(list)
    for path in planted:
        for prefix in expected_failures(path):
            for name in names:
                if name.startswith(prefix):
                    covered[name].append(path.name)
    problems = []
    missing = sorted(names - set(covered))
    if missing:
        problems.append(f"{ex.key}: no planted file fails these checks: {missing}")
    if len(planted) < MIN_PLANTED:
        problems.append(f"{ex.key}: only {len(planted)} planted wrong implementations (want {MIN_PLANTED})")
    return problems


def check_exercise(ex: Exercise, planted: Path | None, folder: Path, say=lambda line: None) -> list[str]:
    """Every rule for one exercise, grading in `folder`; `say` hears progress lines."""
    problems = layout_problems(ex)
    if problems:
        return problems  # grading files that are missing or malformed would only repeat it
    say(f"{ex.key}: grading the stub")
    problems += stub_problems(ex, grade_copy(ex, ex.stub_path, folder))
    say(f"{ex.key}: grading the solution")
    solution = grade_copy(ex, ex.solution_path, folder)
    problems += solution_problems(ex, solution)
    files = planted_files(planted, ex) if planted is not None else []
    for path in files:
        say(f"{ex.key}: grading planted {path.name}")
        problems += [f"{ex.key}: {p}" for p in planted_file_problems(path, grade_copy(ex, path, folder))]
    if planted is None:
        problems.append(f"{ex.key}: no tests/planted folder here (run from drill's source checkout)")
    else:
        problems += coverage_problems(ex, solution, files)
    return problems
