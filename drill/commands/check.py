"""drill check FILE: grade a file against its exercise's hidden checks."""

from __future__ import annotations

import json

import click

from drill import exitcodes, progress
from drill.attempts import exit_code, grade_file, locate, next_step
from drill.console import console, fail_line
from drill.store import Store


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
    raise SystemExit(exit_code(result))


def _cannot(reason: str, target: str, as_json: bool) -> None:
    if as_json:
        from drill.grader.result import GradeResult

        click.echo(json.dumps(GradeResult(exercise="", file=target, status="error", message=reason).to_json()))
    else:
        fail_line(reason)
    raise SystemExit(exitcodes.CANNOT)
