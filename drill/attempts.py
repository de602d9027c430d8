"""Grading attempts: find the file, grade it, record it, and say what to do next.

Shared by `drill check` and `drill watch`.
"""

from __future__ import annotations

from pathlib import Path

from drill import catalog, exitcodes, progress
from drill.grader.result import GradeResult
from drill.store import Store, StoreError


def locate(target: str, store: Store) -> tuple[Path | None, str]:
    """Find the file to grade: a path, else a file of that name (or exercise id) in a workspace."""
    path = Path(target).expanduser()
    if path.exists():
        return path, ""
    ex = progress.resolve(target)
    if "/" not in target or ex:
        for topic in catalog.topic_names():
            home = store.workspace(topic)
            if home is None:
                continue
            for candidate in (home / target, home / ex.file if ex else None):
                if candidate is not None and candidate.is_file():
                    return candidate, ""
    return None, f"no such file: {target}"


def grade_file(path: Path, timeout: float | None, store: Store):
    """Grade `path` and record the attempt. Returns (exercise, result) or (None, reason)."""
    from drill.grader.runner import grade

    ex = catalog.identify(path)
    if ex is None:
        return None, (f"{path.name} is not a drill exercise: it has no '# drill: <topic>/<id>' header "
                      f"and its name matches no exercise (known: {progress.known_ids()})")
    result = grade(ex, path, timeout)
    try:
        store.record_attempt(ex.key, result.status, path.resolve(), result.seconds, result.to_json())
        if result.status != "pass" and ex.cards:
            _bring_cards_forward(store, ex)
    except StoreError as exc:
        # The grade is still shown: only its record is missing.
        result.notes.append(f"not saved to your progress: {exc}")
    return ex, result


def _bring_cards_forward(store: Store, ex: catalog.Exercise) -> None:
    """A failed exercise makes its follow-up cards due now (the quiz module owns scheduling)."""
    from drill.reviews import bring_forward

    bring_forward(store, list(ex.cards))


def next_step(ex: catalog.Exercise, status: str, store: Store) -> str:
    if status == "pass":
        following = progress.current(store, ex.topic)
        tail = (f"next: [accent]drill check {following.file}[/accent]" if following
                else f"every exercise passed: try [accent]drill mock {ex.topic}[/accent]")
        return f"Compare with [accent]drill solution {ex.id}[/accent]; {tail}"
    if status == "fail":
        return f"Stuck? [accent]drill hint {ex.id}[/accent] reveals the next hint."
    return ""


def exit_code(result: GradeResult) -> int:
    return {"pass": exitcodes.OK, "fail": exitcodes.FAILED}.get(result.status, exitcodes.CANNOT)
