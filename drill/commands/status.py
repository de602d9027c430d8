"""drill status: every exercise, its state, the suggested next step and the PyTorch build found."""

from __future__ import annotations

import json

import click
from rich import box
from rich.table import Table
from rich.text import Text

from drill import catalog, progress
from drill.console import console, fitting
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
    def build(count: int, measuring: bool = False) -> Table:
        # Columns leave from the right when the terminal is too narrow: last result, needs, attempts.
        columns = ["#", "exercise", "state", "checks passed", "attempts", "needs", "last result"][:count]
        table = Table(title="Progress", title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
        for column in columns:
            if column == "last result":
                # The one column that wraps, at spaces.
                table.add_column(column, ratio=1, min_width=24, max_width=24 if measuring else None)
                continue
            header = "passed" if column == "checks passed" and count <= 4 else column
            table.add_column(header, no_wrap=True, justify="right" if column in ("checks passed", "attempts")
                             else "left")
        for s in states:
            style = "warn" if s.state_text != s.state else STYLES[s.state]
            row = [s.exercise.number, s.exercise.id, f"[{style}]{s.state_text}[/{style}]", s.checks_text,
                   str(s.attempts), progress.needs_in_words(s.exercise, short=True), Text(s.last or "—")]
            table.add_row(*row[:count])
        return table

    table = fitting(build, (7, 6, 5, 4))
    wide = len(table.columns) == 7
    console.print(table)
    if not wide and following is not None:
        last = next(s.last for s in states if s.exercise == following)
        if last:
            console.print(Text(f"Last result of {following.number}: {last}", style="muted"),
                          soft_wrap=not console.is_terminal)
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
