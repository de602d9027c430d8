"""drill status: every exercise, its state, the suggested next step and the PyTorch build found."""

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
@click.option("--json", "as_json", is_flag=True,
              help="Print the progress as JSON (drill list --json's document, with the workspace and PyTorch).")
def command(as_json: bool) -> None:
    """Show progress on every exercise, the next step and which PyTorch build is installed.

    The counts are those of `drill list`: the latest run of every check on each
    exercise's own file.
    """
    from drill.install_hint import torch_build, torch_report, triton_version

    with Store() as store:
        topic = store.get_setting("topic")
        states = [progress.state_of(store, ex) for ex in catalog.all_exercises()]
        following = progress.current(store, topic)
        workspace = store.workspace(topic) if topic else None
    if as_json:
        build = torch_build()
        click.echo(json.dumps({
            **progress.document(states, following),
            "workspace": str(workspace) if workspace else None,
            "torch": None if build is None else {"version": build.version, "build": build.kind, "cuda": build.cuda},
            "triton": triton_version(),
        }))
        return
    table = Table(title="Progress", title_justify="left")
    for column in ("#", "exercise", "needs", "state", "checks passed", "attempts"):
        table.add_column(column, no_wrap=True, justify="right" if column in ("checks passed", "attempts")
                         else "left")
    table.add_column("last result")
    for s in states:
        style = "warn" if s.state_text != s.state else STYLES[s.state]
        table.add_row(s.exercise.number, s.exercise.id, Text(progress.needs_in_words(s.exercise, short=True)),
                      f"[{style}]{s.state_text}[/{style}]", s.checks_text, str(s.attempts), Text(s.last or "—"))
    console.print(table)
    line, warning = torch_report()
    console.print(Text(line, style="muted"), soft_wrap=not console.is_terminal)
    if warning:
        console.print(Text("Note: " + warning, style="warn"), soft_wrap=not console.is_terminal)
    if workspace is None:
        console.print(f"Next: [accent]drill start {topic or catalog.topic_names()[0]}[/accent] lays out the exercises.")
    elif following:
        console.print(f"Workspace: [accent]{workspace}[/accent] (bare names given to drill check are looked for "
                      "in the folder you stand in, then here)", soft_wrap=not console.is_terminal)
        console.print(f"Next: edit [accent]{workspace / following.file}[/accent], then "
                      f"[accent]drill check {following.file}[/accent].", soft_wrap=not console.is_terminal)
    else:
        console.print(progress.all_passed_step(topic))
