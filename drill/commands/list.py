"""drill list: every exercise in one line each: state and how many checks the last run passed."""

from __future__ import annotations

import json

import click
from rich.table import Table

from drill import catalog, progress
from drill.console import console
from drill.store import Store

STYLES = {"passed": "pass", "failing": "fail", "not graded": "error", "not started": "muted"}


def checks_cell(state: progress.ExerciseState) -> str:
    if not state.total_checks:
        return "—"
    return f"{state.passed_checks}/{state.total_checks} passed"


@click.command(name="list")
@click.option("--json", "as_json", is_flag=True, help="Print the list as JSON.")
def command(as_json: bool) -> None:
    """Every exercise with its state and the checks its last graded run passed."""
    with Store() as store:
        states = [progress.state_of(store, ex) for ex in catalog.all_exercises()]
        following = progress.current(store, store.get_setting("topic"))
    if as_json:
        click.echo(json.dumps([{"exercise": s.exercise.key, "file": s.exercise.file, "state": s.state,
                                "checks_passed": s.passed_checks, "checks": s.total_checks,
                                "attempts": s.attempts} for s in states]))
        return
    table = Table(box=None, show_header=True, header_style="muted", pad_edge=False)
    for column in ("", "#", "exercise", "state", "checks", "attempts"):
        table.add_column(column, justify="right" if column in ("checks", "attempts") else "left")
    for s in states:
        style = STYLES[s.state]
        arrow = "→" if following is not None and s.exercise == following else ""
        table.add_row(arrow, s.exercise.number, s.exercise.id, f"[{style}]{s.state}[/{style}]",
                      checks_cell(s), str(s.attempts))
    console.print(table)
