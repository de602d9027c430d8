"""Where the user stands: each exercise's state and the suggested next step."""

from __future__ import annotations

from dataclasses import dataclass

from drill import catalog
from drill.catalog import Exercise
from drill.store import Store


@dataclass(frozen=True)
class ExerciseState:
    exercise: Exercise
    state: str  # not started | not graded | failing | passed
    attempts: int  # graded runs only: a file that could not be graded is not an attempt
    last: str  # last result in words, '' if none
    passed_checks: int = 0  # in the latest graded run
    total_checks: int = 0


def state_of(store: Store, ex: Exercise) -> ExerciseState:
    runs = store.attempts(ex.key)
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
                         passed, total)


def check_counts(attempt) -> tuple[int, int]:
    """(checks passed, checks in all) of one recorded run; skipped checks count in neither."""
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


def current(store: Store, topic: str | None = None) -> Exercise | None:
    """The first exercise not yet passed, in catalog order (the started topic first)."""
    topics = [topic] if topic else catalog.topic_names()
    for name in topics:
        for ex in catalog.load_topic(name).exercises:
            if not store.passed(ex.key):
                return ex
    return None


def all_passed_step(topic: str) -> str:
    """What to do once every exercise of a topic has passed (rich markup); said the same everywhere."""
    return (f"Every {topic} exercise passed. Next: [accent]drill quiz --followups[/accent] and "
            f"[accent]drill mock {topic}[/accent].")
