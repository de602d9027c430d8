"""drill whatif [FILE | EXERCISE]: "what happens if this line were different?" about your own code.

drill mutates your passing file (drill/mutate.py), grades each mutant with the hidden
checks in the sandbox, several at once (drill/whatif.py), and asks you to predict each
outcome before it shows the real one. The first question comes as soon as its mutant is
graded; the rest grade behind it. Without a terminal, predictions are read from standard
input, one number per line (empty: "don't know"); end of input ends the session.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import click
from rich.markup import escape
from rich.text import Text

from drill import catalog, userfile
from drill.console import boxed, console, err_console, interactive
from drill.errors import cannot
from drill.options import json_option
from drill.paths import shown
from drill.store import Store
from drill.words import plural

QUESTIONS = 10  # mutants in one session unless --limit says otherwise
JSON_SCHEMA = 1


def error_document(reason: str, given: dict) -> dict:
    return {"schema": JSON_SCHEMA, "status": "error", "message": reason, "file": given.get("target") or ""}


@click.command(name="whatif")
@click.argument("target", metavar="[FILE | EXERCISE]", required=False)
@json_option("Print every mutant with its diff and graded outcome (no questions).", error_document=error_document)
@click.option("--limit", type=click.IntRange(min=1), default=None,
              help=f"At most this many mutants (default: {QUESTIONS} questions; every mutant with --json).")
@click.option("--jobs", type=click.IntRange(1, 16), default=None,
              help="Mutants graded at once (default 2).")
@click.option("--timeout", type=click.FloatRange(min=1), default=None,
              help="Seconds before a mutant's grading stops (default 10: a mutant may loop forever).")
def command(target: str | None, as_json: bool, limit: int | None, jobs: int | None, timeout: float | None) -> None:
    """Predict what happens to your passing FILE when one line changes.

    Each question shows one change to your own code (a dropped rescale, exp2 for exp,
    < for <=, ...) and asks what the hidden checks now say; the answer is what grading
    that mutant in the sandbox really did. Without FILE: the exercise you passed last.
    """
    from drill import mutate, whatif

    with Store() as store:
        path = _target(target, store)
        ex = catalog.identify(path)
        if ex is None:
            cannot(f"{shown(path.name)} is not a drill exercise (no '# drill: <topic>/<id>' header)", target=str(path))
        if ex.needs != "cpu":
            cannot(f"what-if questions cover the NumPy exercises; {ex.id} runs {ex.needs} code, "
                   "whose grading takes too long to repeat for every mutant")
        try:
            raw = userfile.read_bytes(path)
            source = raw.decode("utf-8")
            found = mutate.mutants(source)
        except userfile.UnreadableFile as exc:
            cannot(str(exc))
        except (UnicodeDecodeError, SyntaxError, ValueError) as exc:
            cannot(f"{shown(path.name)} cannot be parsed ({exc}); fix it and pass drill check first")
        chosen = mutate.spread(found, limit if limit is not None else (None if as_json else QUESTIONS))
        key = whatif.file_key(raw, ex)
        cached = store.mutant_outcomes(key)
        grading = whatif.Grading(ex, chosen, cached, timeout or whatif.MUTANT_TIMEOUT_S, jobs or whatif.JOBS)
        try:
            baseline = _baseline(store, key, ex, source, cached, as_json)
            if baseline.status != "survives":
                cannot(f"{shown(path.name)} does not pass its checks yet (it {baseline.label()}); what-if questions "
                       f"start from a passing file: drill check {shown(path.name)}")
            if not chosen:
                cannot(f"no line of {shown(path.name)} has a change drill knows how to make")
            run = Run(store, key, ex.key, grading)
            if as_json:
                _print_json(run, ex, path, chosen)
            else:
                _session(run, ex, path, chosen, baseline)
        finally:
            grading.close()


# -- finding the file -----------------------------------------------------------

def _target(target: str | None, store: Store) -> Path:
    from drill.attempts import locate

    if target:
        path, reason = locate(target, store)
        if path is None:
            cannot(reason, target=target)
        if path.is_dir():
            cannot(f"{target} is a directory; name one exercise file in it", target=target)
        return path
    last = None
    for ex in catalog.all_exercises():
        for attempt in store.attempts(ex.key):
            if attempt.status == "pass" and Path(attempt.file).is_file() and (last is None or attempt.at >= last.at):
                last = attempt
    if last is None:
        cannot("no exercise has passed yet: what-if questions start from a passing file (drill check FILE)")
    return Path(last.file)


# -- grading ------------------------------------------------------------------

class Run:
    """The session's grading, with each new outcome saved the moment the main thread sees it."""

    def __init__(self, store: Store, key: str, exercise: str, grading):
        self.store, self.key, self.exercise, self.grading = store, key, exercise, grading

    def outcome(self, mutant_id: str, screen=console):
        if not self.grading.is_ready(mutant_id):
            _wait_with_bar(self.grading, mutant_id, screen)
        fresh = mutant_id not in self.grading.ready
        outcome = self.grading.outcome(mutant_id)
        # "error" (it did not load, or the grader failed) is not kept: it may not be the mutant's doing.
        if fresh and outcome.status != "error":
            self.store.save_mutant_outcome(self.key, mutant_id, self.exercise, outcome.to_json())
        return outcome


def _baseline(store: Store, key: str, ex, source: str, cached: dict, as_json: bool):
    from drill.whatif import ORIGINAL, Outcome, grade_source

    if ORIGINAL in cached:
        return Outcome.from_json(cached[ORIGINAL])
    screen = err_console if as_json else console
    with screen.status("grading your file first ...", spinner="dots"):
        outcome = grade_source(ex, source, ex.timeout)
    if outcome.status == "survives":  # a failure may be a passing moment's doing: grade it again next time
        store.save_mutant_outcome(key, ORIGINAL, ex.key, outcome.to_json())
    return outcome


def _wait_with_bar(grading, mutant_id: str, screen) -> None:
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    with Progress(SpinnerColumn(), TextColumn("grading mutants in the sandbox"), BarColumn(),
                  MofNCompleteColumn(), TimeElapsedColumn(), console=screen, transient=True) as bar:
        task = bar.add_task("", total=grading.total)
        while not grading.is_ready(mutant_id):
            bar.update(task, completed=grading.done())
            time.sleep(0.1)


# -- --json -------------------------------------------------------------------

def _print_json(run: Run, ex, path: Path, chosen) -> None:
    entries = []
    for mutant in chosen:
        outcome = run.outcome(mutant.id, screen=err_console)
        entries.append({"id": mutant.id, "operator": mutant.operator, "title": mutant.title, "line": mutant.line,
                        "change": mutant.change, "diff": mutant.diff, "outcome": outcome.to_json()})
    killed = sum(1 for e in entries if e["outcome"]["status"] != "survives")
    click.echo(json.dumps({"schema": JSON_SCHEMA, "status": "ok", "exercise": ex.key, "file": str(path),
                           "mutants": entries, "killed": killed, "survived": len(entries) - killed}))


# -- the questions --------------------------------------------------------------

def _session(run: Run, ex, path: Path, chosen, baseline) -> None:
    from drill import cards
    from drill.whatif import card_for, question

    tty = interactive()
    ask = _keyboard if tty else _piped
    deck = {card.id: card for card in cards.all_cards()}
    console.print(f"[accent]What if?[/accent] {plural(len(chosen), 'change')} to your "
                  f"{escape(shown(path.name))}; predict what the hidden checks say about each.", soft_wrap=not tty)
    right = asked = 0
    survivors = []
    try:
        for number, mutant in enumerate(chosen, start=1):
            outcome = run.outcome(mutant.id)
            others = [run.grading.ready[m.id] for m in chosen if m.id in run.grading.ready and m.id != mutant.id]
            q = question(mutant, outcome, others, baseline.checks)
            _show_question(q, number, len(chosen), tty)
            picked = _ask_until(ask, f"Your prediction (1-{len(q.choices)}; Enter if you don't know)", len(q.choices))
            asked += 1
            right += picked == q.correct
            _reveal(q, picked, baseline, deck.get(card_for(mutant, ex, set(deck)) or ""), tty)
            if outcome.status == "survives":
                survivors.append(mutant)
    except (EOFError, KeyboardInterrupt):
        console.print()
    graded = [run.grading.ready[m.id] for m in chosen if m.id in run.grading.ready]
    killed = sum(1 for o in graded if o.killed)
    lines = [f"You predicted {right} of {plural(asked, 'outcome')}.",
             f"The checks killed {killed} of the {plural(len(graded), 'mutant')} graded so far"
             + (f"; {len(survivors)} survived what you saw." if survivors else ".")]
    console.print(boxed(Text("\n".join(lines)), border_style="cyan"), soft_wrap=not tty)


def _show_question(q, number: int, total: int, tty: bool) -> None:
    from rich.console import Group
    from rich.syntax import Syntax

    m = q.mutant
    title = f"[accent]What if? {number}/{total} · line {m.line} · {escape(m.title)}[/accent]"
    hunk = m.diff.split("\n", 2)[2] if m.diff.count("\n") >= 2 else m.diff  # without the ---/+++ header
    body = Syntax(hunk.rstrip("\n"), "diff", theme="ansi_dark", background_color="default") if tty else Text(hunk.rstrip("\n"))
    console.print(boxed(Group(Text(m.change, style="bold"), body), title=title, border_style="cyan"),
                  soft_wrap=not tty)
    console.print("What happens now?", soft_wrap=not tty)
    for i, choice in enumerate(q.choices, start=1):
        console.print(Text(f"  {i}. {choice}"), soft_wrap=not tty)


def _reveal(q, picked: int, baseline, card, tty: bool) -> None:
    o = q.outcome
    answer = f"{q.correct + 1}. {q.choices[q.correct]}"
    if picked == q.correct:
        console.print(Text("Right: " + answer, style="pass"), soft_wrap=not tty)
    else:
        console.print(Text("Not quite: " + answer, style="fail"), soft_wrap=not tty)
    body = Text()
    if o.status == "survives":
        body.append("Every check still passes with this change. Either it never changes a result (an equivalent "
                    "mutant: the two lines mean the same here), or it does and no check looks there: a gap in "
                    "the checks. Which is it?\n")
    elif o.status in ("fails", "raises", "timeout"):
        if o.failed:
            body.append(f"{len(o.failed)} of {plural(len(baseline.checks), 'check')} failed:\n")
        for name, diagnosis in zip(o.failed, o.diagnoses):
            body.append(f"✗ {name}\n", style="fail")
            body.append(f"  {diagnosis}\n")
        if len(o.failed) > len(o.diagnoses):
            body.append(f"  … and {len(o.failed) - len(o.diagnoses)} more\n", style="muted")
        if o.status == "timeout" or not o.failed:
            body.append(o.message + "\n")
    else:
        body.append(o.message + "\n")
    if card is not None:
        from drill.mathtext import render

        body.append(f"\nThe idea behind it ({card.id}): ", style="accent")
        body.append(render(card.question("en")) + "\n")
        body.append(render(card.answer_text("en")), style="muted")
    body.rstrip()
    console.print(boxed(body, title="[accent]What grading it did[/accent]", border_style="green"),
                  soft_wrap=not tty)
    console.print()


def _ask_until(ask, prompt: str, count: int) -> int:
    while True:
        text = ask(prompt)
        if text == "":
            return -1  # "don't know": counted as not predicted
        if text.isdigit() and 1 <= int(text) <= count:
            return int(text) - 1
        console.print(Text("Didn't catch that; type a number from the list.", style="warn"))


def _keyboard(prompt: str) -> str:
    return console.input(f"[muted]{escape(prompt)}[/muted]\n[accent]›[/accent] ").strip()


def _piped(prompt: str) -> str:
    console.print(Text(f"{prompt}: ", style="muted"), end="", soft_wrap=True)
    line = sys.stdin.readline()
    if not line:
        raise EOFError
    console.print(Text(line.rstrip("\n")), soft_wrap=True)
    return line.strip()
