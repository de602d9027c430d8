"""drill status: every exercise, its state, and the suggested next step."""

from __future__ import annotations

import json

import click
from rich.table import Table
from rich.text import Text

from drill import catalog, progress
from drill.console import console
from drill.store import Store

STYLES = {"passed": "pass", "failing": "fail", "not graded": "error", "not started": "muted"}


@click.command(name="status")
@click.option("--json", "as_json", is_flag=True, help="Print the progress as JSON.")
def command(as_json: bool) -> None:
    """Show progress on every exercise and the next step."""
    with Store() as store:
        topic = store.get_setting("topic")
        states = [progress.state_of(store, ex) for ex in catalog.all_exercises()]
        following = progress.current(store, topic)
        workspace = store.workspace(topic) if topic else None
    if as_json:
        click.echo(json.dumps({"exercises": [
            {"exercise": s.exercise.key, "state": s.state, "attempts": s.attempts, "last": s.last}
            for s in states], "next": following.key if following else None}))
        return
    table = Table(title="Progress", title_justify="left")
    for column in ("#", "exercise", "needs", "state", "attempts", "last result"):
        table.add_column(column)
    for s in states:
        table.add_row(s.exercise.number, s.exercise.id, s.exercise.needs,
                      f"[{STYLES[s.state]}]{s.state}[/{STYLES[s.state]}]", str(s.attempts), Text(s.last or "—"))
    console.print(table)
    if workspace is None:
        console.print(f"Next: [accent]drill start {topic or catalog.topic_names()[0]}[/accent] lays out the exercises.")
    elif following:
        console.print(f"Next: edit [accent]{workspace / following.file}[/accent], then "
                      f"[accent]drill check {following.file}[/accent].")
    else:
        console.print(progress.all_passed_step(topic))
