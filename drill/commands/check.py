"""drill check FILE: grade a file against its exercise's hidden checks."""

from __future__ import annotations

import json
from pathlib import Path

import click

from drill import catalog, exitcodes, progress
from drill.console import console, fail_line
from drill.store import Store


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
    store.record_attempt(ex.key, result.status, str(path.resolve()), result.seconds, result.to_json())
    if result.status != "pass" and ex.cards:
        _bring_cards_forward(store, ex)
    return ex, result


def _bring_cards_forward(store: Store, ex: catalog.Exercise) -> None:
    """A failed exercise makes its follow-up cards due now (the quiz module owns scheduling)."""
    try:
        from drill.reviews import bring_forward
    except ImportError:
        return
    bring_forward(store, list(ex.cards))


def next_step(ex: catalog.Exercise, status: str, store: Store) -> str:
    if status == "pass":
        following = progress.current(store, ex.topic)
        tail = (f"next: [accent]drill check {following.file}[/accent]" if following
                else "every exercise passed: try [accent]drill mock flashattention[/accent]")
        return f"Compare with [accent]drill solution {ex.id}[/accent]; {tail}"
    if status == "fail":
        return f"Stuck? [accent]drill hint {ex.id}[/accent] reveals the next hint."
    return ""


@click.command(name="check")
@click.argument("target", metavar="[FILE]", required=False)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON document instead of the report.")
@click.option("--timeout", type=click.FloatRange(min=1), default=None,
              help="Seconds before grading stops (default: the exercise's, 60 s for most).")
def command(target: str, as_json: bool, timeout: float | None) -> None:
    """Grade FILE (or an exercise id, in the workspace) against its hidden checks.

    Without FILE, grade the current exercise's file in the workspace.

    Exit code 0: every check passed; 1: some failed; 2: the file could not be graded.
    """
    with Store() as store:
        if target is None:
            current = progress.current(store, store.get_setting("topic"))
            if current is None:
                _cannot("every exercise is passed; name a file to check it again", "", as_json)
            if store.workspace(current.topic) is None:
                _cannot(f"no workspace yet: run `drill start {current.topic}`, or name a file", "", as_json)
            target = current.file
        path, reason = locate(target, store)
        if path is not None and path.is_dir():
            path, reason = None, f"{target} is a directory; name one exercise file in it"
        if path is None:
            _cannot(reason, target, as_json)
        ex, result = grade_file(path, timeout, store)
        if ex is None:
            _cannot(result, target, as_json)
        if as_json:
            click.echo(json.dumps(result.to_json()))
        else:
            from drill.render import report

            console.print(report(result, f"{ex.key}  ({path.name})"))
            step = next_step(ex, result.status, store)
            if step:
                console.print(step)
    raise SystemExit({"pass": exitcodes.OK, "fail": exitcodes.FAILED}.get(result.status, exitcodes.CANNOT))


def _cannot(reason: str, target: str, as_json: bool) -> None:
    if as_json:
        from drill.grader.result import GradeResult

        click.echo(json.dumps(GradeResult(exercise="", file=target, status="error", message=reason).to_json()))
    else:
        fail_line(reason)
    raise SystemExit(exitcodes.CANNOT)
