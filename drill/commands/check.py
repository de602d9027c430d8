"""drill check FILE: grade a file against its exercise's hidden checks."""

from __future__ import annotations

import json

import click
from rich.text import Text

from drill import catalog
from drill.attempts import exit_code, file_to_grade, grade_file, next_step, shown_path
from drill.console import console
from drill.errors import cannot
from drill.options import json_option
from drill.store import Store


def error_document(reason: str, given: dict) -> dict:
    """--json when nothing could be graded: the result document with status error."""
    from drill.grader.result import GradeResult

    return GradeResult(exercise="", file=given.get("target") or "", status="error", message=reason).to_json()


def _prepare_whatif(ex, path, result, keyword, piped: bool) -> bool:
    """After a full pass of a NumPy exercise in a terminal, grade its what-if mutants behind the prompt."""
    if piped or keyword or result.status != "pass" or ex.needs != "cpu" or path.name != ex.file:
        return False
    from drill import whatif_prepare

    return whatif_prepare.start(path)


@click.command(name="check")
@click.argument("target", metavar="[FILE]", required=False)
@json_option("Print one JSON document instead of the report.", error_document=error_document)
@click.option("--timeout", type=click.FloatRange(min=1), default=None,
              help=f"Seconds before grading stops (default: the exercise's own limit: "
                   f"{catalog.timeouts_in_words()}).")
@click.option("-k", "keyword", metavar="EXPR",
              help="Run only the checks whose names have these whole words (any case; and, or, not "
                   "and parentheses combine them, as in pytest -k); not saved to progress.")
@click.option("--first-failure", "-x", is_flag=True, help="Stop at the first failing check.")
@click.option("--repro", is_flag=True,
              help="On a failure, write repro_<file>.py beside FILE: it replays the failing call with its inputs "
                   "and compares with the expected values, for your editor or debugger.")
@click.option("--seed", type=click.IntRange(min=0, max=2**63 - 1), default=None, metavar="N",
              help="Replay a run's random inputs (the seed is in --json and in --repro's script); "
                   "such a run is not saved to progress.")
def command(target: str, as_json: bool, timeout: float | None, keyword: str | None,
            first_failure: bool, repro: bool, seed: int | None) -> None:
    """Grade FILE (or an exercise id) against its hidden checks.

    A name or id is looked for in the folder you stand in, then in the current
    topic's workspace. Without FILE, grade the current exercise.

    Exit code 0: every check passed; 1: some failed; 2: the file could not be graded.
    """
    with Store() as store:
        path, reason = file_to_grade(target, store)
        if path is None:
            cannot(reason)
        if keyword is not None:
            from drill.selection import SelectionError, parse

            try:
                parse(keyword)
            except SelectionError as exc:
                cannot(str(exc))
        ex, result = grade_file(path, timeout, store, keyword=keyword, first_failure=first_failure, repro=repro,
                                seed=seed)
        if ex is None:
            cannot(result, target=target or path.name)
        if as_json:
            click.echo(json.dumps(result.to_json()))
        else:
            from drill.report import report

            piped = not console.is_terminal
            console.print(report(result, f"{ex.key}  ({shown_path(path)})", plain=piped), soft_wrap=piped)
            step = "" if keyword or path.name != ex.file else next_step(ex, result.status, store)
            if step:
                console.print(step, soft_wrap=piped)
            if _prepare_whatif(ex, path, result, keyword, piped):
                console.print(Text(f"what-if questions about this file are being graded in the background: "
                                   f"drill whatif {shown_path(path)}", style="muted"))
    raise SystemExit(exit_code(result))

