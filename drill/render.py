"""Rich renderings of grading results, shared by `check` and `watch`."""

from __future__ import annotations

from rich.console import Group
from rich.markup import escape
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from drill.grader.result import GradeResult

MARKS = {"pass": ("✔", "pass"), "fail": ("✘", "fail"), "skip": ("–", "muted"),
         "not-run": ("·", "muted")}
TITLES = {"pass": "[pass]PASSED[/pass]", "fail": "[fail]FAILED[/fail]", "error": "[error]NOT GRADED[/error]"}


def report(result: GradeResult, title: str) -> Panel:
    """The report for one `drill check`: a line per check, diagnoses under the failures."""
    parts = []
    if result.checks:
        table = Table.grid(padding=(0, 1))
        table.add_column(width=1)
        table.add_column()
        table.add_column(justify="right", style="muted")
        previous = None
        for check in result.checks:
            mark, style = MARKS.get(check.status, ("?", "muted"))
            table.add_row(Text(mark, style=style), Text(check.name), f"{check.seconds:.2f}s")
            if check.status in ("fail", "skip", "not-run") and check.message:
                # A stub fails every check the same way: say it once.
                same = check.message == previous
                table.add_row("", Text("(same as above)", style="muted") if same
                              else _diagnosis(check.message, check.status), "")
                previous = check.message
        parts.append(table)
    summary_style = {"pass": "pass", "fail": "fail"}.get(result.status, "error")
    parts.append(Text(""))
    parts.append(Text(result.message, style=summary_style))
    if result.output.strip() and result.status == "error":
        parts.append(Text("what your code printed (last lines):", style="muted"))
        parts.append(Text(result.output.strip()[-800:], style="muted"))
    for note in result.notes:
        parts.append(Text(note, style="muted"))
    return Panel(Group(*parts), title=f"{TITLES[result.status]} {escape(title)}", title_align="left",
                 subtitle=f"{result.seconds:.1f}s · sandbox: {result.sandbox}", subtitle_align="right")


def _diagnosis(message: str, status: str) -> Text:
    text = Text()
    for i, line in enumerate(message.splitlines()):
        if i:
            text.append("\n")
        label, sep, rest = line.partition(": ")
        if sep and label in ("called", "yours", "expected", "likely mistake"):
            text.append(f"{label}: ", style="accent" if label == "likely mistake" else "muted")
            text.append(rest)
        else:
            text.append(line, style="muted" if status == "skip" else "")
    return text
