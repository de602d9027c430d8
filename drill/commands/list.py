"""drill list: every exercise in one line each: its state and the checks its latest run passed."""

from __future__ import annotations

import json

import click
from rich.table import Table

from drill import catalog, progress
from drill.console import console, fitting
from drill.store import Store

STYLES = {"passed": "pass", "failing": "fail", "not graded": "error", "not started": "muted"}


def state_cell(state: progress.ExerciseState) -> str:
    style = "warn" if state.state_text != state.state else STYLES[state.state]
    return f"[{style}]{state.state_text}[/{style}]"


@click.command(name="list")
@click.option("--json", "as_json", is_flag=True, help="Print the list as JSON (the same document as drill status --json).")
def command(as_json: bool) -> None:
    """Every exercise with its state and the checks its latest run passed.

    Only runs of every check on the exercise's own file count (not -k runs, not
    scratch copies), so this count is the one the latest report ended with.
    """
    with Store() as store:
        states = [progress.state_of(store, ex) for ex in catalog.all_exercises()]
        following = progress.current(store, store.get_setting("topic"))
    if as_json:
        click.echo(json.dumps(progress.document(states, following)))
        return
    def build(count: int, measuring: bool = False) -> Table:
        # Too narrow for every column: attempts go, rather than ids and states cut with an ellipsis.
        columns = ["", "#", "exercise", "state", "checks passed", "attempts"][:count]
        table = Table(box=None, show_header=True, header_style="muted", pad_edge=False)
        for column in columns:
            table.add_column(column, justify="right" if column in ("checks passed", "attempts") else "left",
                             no_wrap=True)
        for s in states:
            arrow = "→" if following is not None and s.exercise == following else ""
            row = [arrow, s.exercise.number, s.exercise.id, state_cell(s), s.checks_text, str(s.attempts)]
            table.add_row(*row[:count])
        return table

    table = fitting(build, (6, 5))
    console.print(table)
