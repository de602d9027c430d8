"""Grading attempts: find the file, grade it, record it, and say what to do next.

Shared by `drill check` and `drill watch`.
"""

from __future__ import annotations

import os
from pathlib import Path

from drill import catalog, exitcodes, paths, progress, userfile
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
        return None, f"no such file: {target}" + _did_you_mean(target, store)
    names = [target] + ([ex.file] if ex else [])
    for folder in search_folders(store):
        for name in names:
            if (folder / name).is_file():
                return folder / name, ""
    return None, f"no such file: {target}" + _did_you_mean(target, store)


def _did_you_mean(target: str, store: Store) -> str:
    """'; did you mean 03_flash_forward.py?' for a mistyped file name or exercise id ('' if nothing is close)."""
    import difflib

    given = Path(target)
    folder = given.parent if str(given.parent) not in ("", ".") else None
    names: set[str] = set()
    for place in ([folder] if folder else search_folders(store)):
        try:
            names |= {p.name for p in place.expanduser().glob("*.py")}
        except OSError:
            continue
    if folder is None:
        names |= {ex.file for ex in catalog.all_exercises()} | {ex.id for ex in catalog.all_exercises()}
    close = difflib.get_close_matches(given.name, sorted(names), n=1, cutoff=0.6)
    if not close:
        return ""
    suggestion = str(folder / close[0]) if folder else close[0]
    return f"; did you mean {paths.shown(suggestion)}?"


def shown_path(path: Path) -> str:
    """A graded file as the report names it: relative to the folder you stand in when it is inside it,
    else the full path (with ~ for the home folder), so a file found in a workspace elsewhere says where."""
    full = Path(os.path.abspath(path))
    try:
        return paths.shown(full.relative_to(Path.cwd()))
    except ValueError:
        pass
    home = Path.home()
    try:
        return paths.shown(Path("~") / full.relative_to(home))
    except ValueError:
        return paths.shown(full)


def name_mismatch(path: Path, ex: catalog.Exercise) -> str:
    """The warning for a file whose header and name disagree ('' when they agree). The header decides
    which exercise it is; a wrong name is most often a file saved under the wrong name."""
    if path.name == ex.file:
        return ""
    named = next((other for other in catalog.all_exercises() if other.file == path.name), None)
    if named is None:
        return ""
    return (f"warning: {paths.shown(path.name)} is named for {named.number} {named.id}, but its header says "
            f"{ex.key}: graded as {ex.number} {ex.id} (the header decides). Saved under the wrong name?")


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

    `keyword` (a -k expression, drill.selection) and `first_failure` go to the grader as they are.
    Only a run of every check on a file named as the exercise's own file (03_flash_forward.py)
    is saved to the progress: passing some checks (-k) is not passing the exercise, and a scratch
    copy with the same header must not move its count.
    """
    from drill.grader.runner import grade

    ex = catalog.identify(path)
    if ex is None:
        try:  # a FIFO, a device or a huge file: say that, not "no header"
            userfile.read_bytes(path)
        except userfile.UnreadableFile as exc:
            return None, str(exc)
        return None, (f"{paths.shown(path.name)} is not a drill exercise: it has no "
                      "'# drill: <topic>/<id>' header "
                      f"and its name matches no exercise (known: {catalog.known_ids()})")
    before = _bytes_or_none(path)
    result = grade(ex, path, timeout, keyword=keyword, first_failure=first_failure, repro=repro, seed=seed)
    mismatch = name_mismatch(path, ex)
    if mismatch:
        result.notes.insert(0, mismatch)
    if seed is not None:
        # Inputs the file could know in advance prove nothing: a replay is for debugging only.
        result.notes.append(f"graded with the seed you gave (--seed {seed}): a replay, not saved to your progress")
        return ex, result
    if keyword:
        if result.status != "error":
            result.notes.append(f"-k {keyword}: only the selected checks ran, and this run is not saved to "
                                f"your progress; drill check {paths.shown(path.name)} runs them all.")
        return ex, result
    if path.name != ex.file:
        if not mismatch:
            result.notes.append(f"not saved to your progress: only a file named {ex.file} counts for {ex.id} "
                                f"({paths.shown(path.name)} is graded as a scratch copy)")
        else:
            result.notes.append(f"not saved to your progress: only a file named {ex.file} counts for {ex.id}")
        return ex, result
    try:
        store.record_attempt(ex.key, result.status, path.resolve(), result.seconds, result.to_json())
        if result.status != "pass" and ex.cards:
            _bring_cards_forward(store, ex)
        if result.status == "pass" and ex.needs == "cpu" and before is not None and before == _bytes_or_none(path):
            # The pass is the what-if baseline: `drill whatif` then starts on the mutants at once.
            from drill import whatif

            store.save_mutant_outcome(whatif.file_key(before, ex), whatif.ORIGINAL, ex.key,
                                      whatif.outcome_of(result).to_json())
    except StoreError as exc:
        # The grade is still shown: only its record is missing.
        result.notes.append(f"not saved to your progress: {exc}")
    return ex, result


def _bytes_or_none(path: Path) -> bytes | None:
    from drill import userfile

    try:
        return userfile.read_bytes(path)
    except (userfile.UnreadableFile, OSError):
        return None


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
