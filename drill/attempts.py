"""Grading attempts: find the file, grade it, record it, and say what to do next.

Shared by `drill check` and `drill watch`.
"""

from __future__ import annotations

from pathlib import Path

from drill import catalog, exitcodes, paths, progress
from drill.grader.result import GradeResult
from drill.store import Store, StoreError


def locate(target: str, store: Store) -> tuple[Path | None, str]:
    """Find the file to grade: a path; else, by file name or exercise id, the folder you stand in,
    then the current topic's workspace, then the other topics' workspaces."""
    path = Path(target).expanduser()
    if path.exists():
        return path, ""
    ex = catalog.resolve(target)
    if "/" in target and not ex:
        return None, f"no such file: {target}"
    names = [target] + ([ex.file] if ex else [])
    for folder in search_folders(store):
        for name in names:
            if (folder / name).is_file():
                return folder / name, ""
    return None, f"no such file: {target}"


def file_to_grade(target: str | None, store: Store) -> tuple[Path | None, str]:
    """The file `drill check` and `drill watch` grade: TARGET as `locate` finds it, else the
    current exercise in its topic's workspace (the started topic first). (None, reason) if none."""
    if target:
        path, reason = locate(target, store)
        if path is not None and path.is_dir():
            return None, f"{target} is a directory; name one exercise file in it"
        return path, reason
    for topic in topics_started_first(store):
        home = store.workspace(topic)
        if home is None:
            continue
        ex = progress.current(store, topic)
        if ex is None:
            return None, f"every {topic} exercise has passed; name a file"
        path = home / ex.file
        if not path.is_file():
            return None, f"{path} is missing; run drill start {topic} again to restore it"
        return path, ""
    first = (catalog.topic_names() or ["TOPIC"])[0]
    return None, f"no workspace yet: run drill start {first} first, or name a file"


def search_folders(store: Store) -> list[Path]:
    """Where a bare name is looked for, in order: here, the current topic's workspace, the rest."""
    folders = [Path.cwd()]
    for topic in topics_started_first(store):
        home = store.workspace(topic)
        if home is not None and home not in folders:
            folders.append(home)
    return folders


def topics_started_first(store: Store) -> list[str]:
    """Every topic, the one last started first."""
    chosen = store.get_setting("topic")
    topics = catalog.topic_names()
    return ([chosen] if chosen in topics else []) + [t for t in topics if t != chosen]


def grade_file(path: Path, timeout: float | None, store: Store, keyword: str | None = None,
               first_failure: bool = False, repro: bool = False, seed: int | None = None):
    """Grade `path` and record the attempt. Returns (exercise, result) or (None, reason).

    `keyword` (a pytest -k expression) and `first_failure` go to the grader as they are. A run
    of selected checks (-k) is not saved: passing some checks is not passing the exercise.
    """
    from drill.grader.runner import grade

    ex = catalog.identify(path)
    if ex is None:
        return None, (f"{paths.shown(path.name)} is not a drill exercise: it has no "
                      "'# drill: <topic>/<id>' header "
                      f"and its name matches no exercise (known: {catalog.known_ids()})")
    result = grade(ex, path, timeout, keyword=keyword, first_failure=first_failure, repro=repro, seed=seed)
    if seed is not None:
        # Inputs the file could know in advance prove nothing: a replay is for debugging only.
        result.notes.append(f"graded with the seed you gave (--seed {seed}): a replay, not saved to your progress")
        return ex, result
    if keyword:
        result.notes.append(f"only the checks matching -k {keyword!r} ran; this run is not saved "
                            "to your progress")
        return ex, result
    try:
        store.record_attempt(ex.key, result.status, path.resolve(), result.seconds, result.to_json())
        if result.status != "pass" and ex.cards:
            _bring_cards_forward(store, ex)
    except StoreError as exc:
        # The grade is still shown: only its record is missing.
        result.notes.append(f"not saved to your progress: {exc}")
    return ex, result


def _bring_cards_forward(store: Store, ex: catalog.Exercise) -> None:
    """A failed exercise makes its follow-up cards due now (drill/reviews.py schedules them)."""
    from drill.reviews import bring_forward

    bring_forward(store, list(ex.cards))


def next_step(ex: catalog.Exercise, status: str, store: Store) -> str:
    if status == "pass":
        following = progress.current(store, ex.topic)
        compare = f"Compare with [accent]drill solution {ex.id}[/accent]"
        if following is None:
            return f"{compare}. {progress.all_passed_step(ex.topic)}"
        return f"{compare}; next: [accent]drill check {following.file}[/accent]"
    if status == "fail":
        return f"Stuck? [accent]drill hint {ex.id}[/accent] reveals the next hint."
    return ""


def exit_code(result: GradeResult) -> int:
    return {"pass": exitcodes.OK, "fail": exitcodes.FAILED}.get(result.status, exitcodes.CANNOT)
