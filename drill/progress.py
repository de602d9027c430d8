"""Where the user stands: each exercise's state and the suggested next step."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import PurePath

from drill import catalog
from drill.catalog import Exercise
from drill.store import Store


@dataclass(frozen=True)
class ExerciseState:
    """One exercise's progress, the same in `drill list`, `drill status` and their --json.

    Only runs of every check on the exercise's own file (03_flash_forward.py, in any folder)
    count: `drill check` saves no other run, and older records of scratch copies are left out.
    """
    exercise: Exercise
    state: str  # not started | not graded | failing | passed (passed once: the solution is open)
    attempts: int  # graded runs only: a file that could not be graded is not an attempt
    last: str  # last result in words, '' if none
    passed_checks: int = 0  # in the latest graded run: the one count, as its report said it
    total_checks: int = 0  # the checks that apply on this machine (skipped ones left out)
    latest: str = ""  # the latest graded run: pass | fail ('' if none)

    @property
    def checks_text(self) -> str:
        """'12/17': checks passed of the checks that apply, in the latest graded run ('—' if none)."""
        return f"{self.passed_checks}/{self.total_checks}" if self.total_checks else "—"

    @property
    def state_text(self) -> str:
        """The state in words; a pass followed by a failing run says both."""
        if self.state == "passed" and self.latest == "fail":
            return "passed, now failing"
        return self.state

    def to_json(self) -> dict:
        ex = self.exercise
        return {"exercise": ex.key, "number": ex.number, "id": ex.id, "file": ex.file, "needs": ex.needs,
                "state": self.state, "latest": self.latest or None, "checks_passed": self.passed_checks,
                "checks": self.total_checks, "attempts": self.attempts, "last": self.last or None}


# What each kind of exercise needs, in the words the workspace README and `drill status` use.
NEEDS_WORDS = {
    "cpu": "NumPy (any CPU)",
    "dist": "PyTorch (the CPU build is enough)",
    "gpu": "PyTorch and Triton (a GPU, or Triton's interpreter on a CPU)",
}


NEEDS_SHORT = {"cpu": "NumPy", "dist": "PyTorch", "gpu": "PyTorch, Triton"}


def needs_in_words(ex: Exercise, short: bool = False) -> str:
    return (NEEDS_SHORT if short else NEEDS_WORDS).get(ex.needs, ex.needs)


def counted(ex: Exercise, attempt) -> bool:
    """A recorded run that counts for the exercise: one of a file with the exercise's own name."""
    return PurePath(attempt.file).name == ex.file


def state_of(store: Store, ex: Exercise) -> ExerciseState:
    runs = [a for a in store.attempts(ex.key) if counted(ex, a)]
    if not runs:
        return ExerciseState(ex, "not started", 0, "")
    last = runs[-1]
    graded = [a for a in runs if a.status != "error"]
    if any(a.status == "pass" for a in graded):
        state = "passed"
    elif graded:
        state = "failing"
    else:
        state = "not graded"  # every run was an error: the file never ran its checks
    passed, total = check_counts(graded[-1]) if graded else (0, 0)
    return ExerciseState(ex, state, len(graded), f"{last.status}: {last.result.get('message', '')}",
                         passed, total, graded[-1].status if graded else "")


def document(states: list[ExerciseState], following: Exercise | None) -> dict:
    """The --json of `drill list` and `drill status`: the same shape for the same facts."""
    return {"exercises": [s.to_json() for s in states], "next": following.key if following else None}


def check_counts(attempt) -> tuple[int, int]:
    """(checks passed, checks that apply) of one recorded run; skipped checks count in neither.
    The same count as the run's report ('12 of 17 checks passed', drill.grader.runner.summary)."""
    checks = [c for c in attempt.result.get("checks", []) if c.get("status") != "skip"]
    passed = sum(1 for c in checks if c.get("status") == "pass")
    # A "N more" row stands for N checks that never ran.
    total = sum(_row_count(c) for c in checks)
    return passed, total


def _row_count(check: dict) -> int:
    if check.get("status") == "not-run":
        head = str(check.get("name", "")).split(" ", 1)[0]
        return int(head) if head.isdigit() else 1
    return 1


def passed(store: Store, ex: Exercise) -> bool:
    """A counted run of the exercise passed."""
    return store.passed(ex.key) and any(a.status == "pass" and counted(ex, a) for a in store.attempts(ex.key))


def current(store: Store, topic: str | None = None) -> Exercise | None:
    """The first exercise not yet passed, in catalog order (the started topic first)."""
    topics = [topic] if topic else catalog.topic_names()
    for name in topics:
        for ex in catalog.load_topic(name).exercises:
            if not passed(store, ex):
                return ex
    return None


def all_passed_step(topic: str) -> str:
    """What to do once every exercise of a topic has passed (rich markup); said the same everywhere."""
    return (f"Every {topic} exercise passed. Next: [accent]drill quiz --followups[/accent] and "
            f"[accent]drill mock {topic}[/accent].")
