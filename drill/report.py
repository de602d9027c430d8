"""Rich renderings of grading results, shared by `check` and `watch`.

One mistake often fails many checks with the same likely mistake; the report says
it once, under the first check it explains, and marks the other checks with its
number ([1]), so a stub or a single slip stays a screenful. On a terminal the report is
a panel; piped, it is plain lines that the caller prints with soft_wrap, so prose
is never cut at a width.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rich.console import Group, RenderableType
from rich.markup import escape
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from drill.words import plural
from drill.grader.result import CheckResult, GradeResult

MARKS = {"pass": ("✔", "pass"), "fail": ("✘", "fail"), "skip": ("–", "muted"),
         "not-run": ("·", "muted")}
TITLES = {"pass": "[pass]PASSED[/pass]", "fail": "[fail]FAILED[/fail]", "error": "[error]NOT GRADED[/error]"}
# A run of the checks -k selected passed or failed only those: the title says how many ran.
SELECTED_TITLES = {"pass": "[pass]passed[/pass]", "fail": "[fail]failed[/fail]", "error": "[error]not graded[/error]"}
DETAIL_LABELS = ("called", "yours", "expected", "likely mistake")


@dataclass
class Diagnosis:
    """One likely mistake and the checks it explains (the first one's details are shown)."""
    number: int
    first: CheckResult
    others: list[CheckResult] = field(default_factory=list)


def diagnosis_key(check: CheckResult) -> str:
    """What makes two failures 'the same mistake': the named likely mistake when there is one,
    else the message without the per-call lines (inputs and values differ from check to check)."""
    hint = (check.details or {}).get("hint") or next(
        (line.partition(": ")[2] for line in check.message.splitlines() if line.startswith("likely mistake: ")),
        "")
    if hint:
        return "hint:" + hint
    kept = [line for line in check.message.splitlines()
            if line.partition(": ")[0] not in ("called", "yours", "expected")]
    return "text:" + "\n".join(kept)


def group_diagnoses(checks: list[CheckResult]) -> dict[int, Diagnosis]:
    """Diagnoses keyed by the index of the check whose details are shown (the first it explains)."""
    by_key: dict[str, Diagnosis] = {}
    shown: dict[int, Diagnosis] = {}
    for index, check in enumerate(checks):
        if check.status not in ("fail", "skip", "not-run") or not check.message:
            continue
        key = check.status + "\0" + diagnosis_key(check)
        if key in by_key:
            by_key[key].others.append(check)
        else:
            by_key[key] = shown[index] = Diagnosis(0, check)
    # Only a diagnosis that explains several checks needs a number to point at: 1, 2, ...
    shared = [d for d in shown.values() if d.others]
    for number, diagnosis in enumerate(shared, start=1):
        diagnosis.number = number
    return shown


PRINTED_LINES = 8


def printed(output: str) -> Text:
    """What the user's code printed during one check: labelled, and bounded to a few lines."""
    lines = output.rstrip().splitlines()
    text = Text("your code printed:", style="muted")
    for line in lines[:PRINTED_LINES]:
        text.append("\n  " + line[:200])
    if len(lines) > PRINTED_LINES:
        text.append(f"\n  … {plural(len(lines) - PRINTED_LINES, 'more line')}", style="muted")
    return text


def report(result: GradeResult, title: str, plain: bool = False) -> RenderableType:
    """The report for one `drill check`: a line per check, each diagnosis once.

    plain=True (output to a file or pipe): no frame and no table, so nothing is cut or wrapped;
    print it with soft_wrap=True.
    """
    shown = group_diagnoses(result.checks)
    number_of = {id(c): d.number for d in shown.values() for c in d.others}
    rows: list[tuple[Text, Text, str]] = []
    for index, check in enumerate(result.checks):
        mark, style = MARKS.get(check.status, ("?", "muted"))
        name = Text(check.name)
        if check.kind == "observed":
            name.append("  (observed)", style="muted")  # seen from inside your process: advice, not proof
        if id(check) in number_of:
            name.append(f"  [{number_of[id(check)]}]", style="muted")  # short: long names must not wrap
        rows.append((Text(mark, style=style), name, f"{check.seconds:.2f}s"))
        if index in shown:
            rows.append((Text(""), _details(shown[index]), ""))
        if check.output.strip():
            rows.append((Text(""), printed(check.output), ""))
    parts: list[RenderableType] = []
    if rows:
        parts.append(_plain_rows(rows) if plain else _table(rows))
    summary_style = {"pass": "pass", "fail": "fail"}.get(result.status, "error")
    parts.append(Text(""))
    parts.append(Text(result.message, style=summary_style))
    if result.output.strip() and result.status == "error":
        parts.append(Text("what your code printed (last lines):", style="muted"))
        parts.append(Text(result.output.strip()[-800:], style="muted"))
    if result.traceback:
        parts.append(_frames(result.traceback))
    for note in result.notes:
        parts.append(Text(note, style="warn" if note.startswith("warning: ") else "muted"))
    missing = [f"{layer}: {how}" for layer, how in result.layers.items() if not how.startswith("held")]
    if missing:
        parts.append(Text("not contained here: " + "; ".join(missing), style="muted"))
    heading = (f"{_status_title(result)} · {escape(title)}" if result.selection and result.status != "error"
               else f"{_status_title(result)} {escape(title)}")
    tail = f"{result.seconds:.1f}s" + (f" · sandbox: {result.sandbox}" if result.sandbox else "")
    if plain:
        return Group(Text.from_markup(f"{heading}  [muted]{escape(tail)}[/muted]"), *parts)
    return _Framed(heading, tail, parts)


class _Framed:
    """The report in a panel titled with the verdict and the file; on a terminal too narrow for that
    title, the title becomes the panel's first line, wrapped at spaces (a border title is cut mid-word)."""

    def __init__(self, heading: str, tail: str, parts: list[RenderableType]):
        self.heading, self.tail, self.parts = heading, tail, parts

    def __rich_console__(self, console, options):
        title = Text.from_markup(self.heading)
        if title.cell_len + 6 <= options.max_width:
            yield Panel(Group(*self.parts), title=self.heading, title_align="left", subtitle=self.tail,
                        subtitle_align="right")
            return
        yield Panel(Group(title, *self.parts), subtitle=self.tail, subtitle_align="right")


def _status_title(result: GradeResult) -> str:
    """PASSED / FAILED / NOT GRADED; for a -k run, '3 of 23 checks selected: passed'."""
    chosen = result.selection
    if chosen and result.status in ("pass", "fail"):
        return (f"{chosen.get('selected')} of {plural(int(chosen.get('of') or 0), 'check')} "
                f"selected: {SELECTED_TITLES[result.status]}")
    return TITLES[result.status]


def _frames(traceback: str) -> Text:
    """The learner's own frames as Python prints them: 'File "PATH", line N, in f', the source line
    (and a caret under a syntax error), the paths highlighted."""
    text = Text()
    for i, line in enumerate(traceback.rstrip("\n").splitlines()):
        if i:
            text.append("\n")
        if line.lstrip().startswith('File "'):
            text.append(line, style="muted")
        else:
            text.append(line)
    return text


def _table(rows: list[tuple[Text, Text, str]]) -> Table:
    table = Table.grid(padding=(0, 1))
    table.add_column(width=1)
    table.add_column()
    table.add_column(justify="right", style="muted")
    for row in rows:
        table.add_row(*row)
    return table


def _plain_rows(rows: list[tuple[Text, Text, str]]) -> Text:
    out = Text()
    for mark, body, seconds in rows:
        if out:
            out.append("\n")
        if mark.plain:
            out.append_text(mark)
            out.append(" ")
            out.append_text(body)
            out.append(f"  {seconds}", style="muted")
        else:
            for i, line in enumerate(body.split()):
                out.append(("\n" if i else "") + "    ")
                out.append_text(line)
    return out


def _details(diagnosis: Diagnosis) -> Text:
    check = diagnosis.first
    text = Text()
    if diagnosis.others:
        text.append(f"[{diagnosis.number}] ", style="accent")
    for i, line in enumerate(check.message.splitlines()):
        if i:
            text.append("\n")
        label, sep, rest = line.partition(": ")
        if sep and label in DETAIL_LABELS:
            text.append(f"{label}: ", style="accent" if label == "likely mistake" else "muted")
            text.append(rest)
        else:
            text.append(line, style="muted" if check.status == "skip" else "")
    frames = (check.details or {}).get("traceback", "")
    if frames.strip():
        text.append("\n")
        text.append_text(_frames(frames))
    if diagnosis.others:
        text.append(f"\n[{diagnosis.number}] also explains the {plural(len(diagnosis.others), 'check')} "
                    f"marked [{diagnosis.number}] below", style="muted")
    return text
