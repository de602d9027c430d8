"""drill whatif [FILE | EXERCISE]: "what happens if this line were different?" about your own code.

drill mutates your passing file (drill/mutate.py), grades each mutant with the hidden
checks in the sandbox, several at once (drill/whatif.py), and asks you to predict each
outcome before it shows the real one. The first question comes as soon as any mutant is
graded (whichever finishes first); the rest grade behind it. Without a terminal,
predictions are read from standard input, one number per line (empty: "don't know");
end of input ends the session.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import click
from rich.markup import escape
from rich.text import Text

from drill import catalog, userfile
from drill.console import boxed, console, err_console, interactive, read_piped_answer
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
@click.option("--lang", type=click.Choice(("en", "zh")), help="Language of the questions; remembered (default en).")
@click.option("--prepare", is_flag=True, hidden=True,
              help="Grade the session's mutants and save them, asking nothing (drill check starts this).")
def command(target: str | None, as_json: bool, limit: int | None, jobs: int | None, timeout: float | None,
            lang: str | None, prepare: bool) -> None:
    """Predict what happens to your passing FILE when one line changes.

    Each question shows one change to your own code (a dropped rescale, exp2 for exp,
    < for <=, ...) and asks what the hidden checks now say; the answer is what grading
    that mutant in the sandbox really did. Without FILE: the exercise you passed last.
    """
    from drill import mutate, whatif, whatif_prepare
    from drill.language import remembered_language

    with Store() as store:
        lang = remembered_language(store, lang)
        path = _target(target, store)
        try:
            raw = userfile.read_bytes(path)  # first: a FIFO or a huge file gets its own reason
        except userfile.UnreadableFile as exc:
            cannot(str(exc))
        ex = catalog.identify(path)
        if ex is None:
            cannot(f"{shown(path.name)} is not a drill exercise (no '# drill: <topic>/<id>' header)", target=str(path))
        if ex.needs != "cpu":
            cannot(f"what-if questions cover the NumPy exercises; {ex.id} runs {ex.needs} code, "
                   "whose grading takes too long to repeat for every mutant")
        try:
            source = raw.decode("utf-8")
            found = mutate.mutants(source)
        except (UnicodeDecodeError, SyntaxError, ValueError) as exc:
            cannot(f"{shown(path.name)} cannot be parsed ({exc}); fix it and pass drill check first")
        chosen = mutate.spread(found, limit if limit is not None else (None if as_json else QUESTIONS))
        key = whatif.file_key(raw, ex)
        if prepare:
            _prepare(store, key, ex, source, mutate.spread(found, QUESTIONS))
            return
        cached = store.mutant_outcomes(key)
        prepared = None
        if whatif_prepare.running(key):  # drill check's background grading: read its outcomes as they come
            prepared = (key, {m.id for m in mutate.spread(found, QUESTIONS)})
        grading = whatif.Grading(ex, chosen, cached, timeout or whatif.MUTANT_TIMEOUT_S, jobs or whatif.JOBS,
                                 original=source, prepared=prepared)
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
                _session(run, ex, path, chosen, baseline, lang)
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

    def next_ready(self, pending: list, screen=console):
        """The first of `pending` (mutants) whose outcome is known, waiting with the bar if none is yet."""
        if not any(self.grading.is_ready(m.id) for m in pending):
            _wait_with_bar(self.grading, [m.id for m in pending], screen)
        return next(m for m in pending if self.grading.is_ready(m.id))

    def outcome(self, mutant_id: str, screen=console):
        if screen is not None and not self.grading.is_ready(mutant_id):
            _wait_with_bar(self.grading, [mutant_id], screen)
        fresh = mutant_id not in self.grading.ready
        outcome = self.grading.outcome(mutant_id)
        # "error" (it did not load, or the grader failed) is not kept: it may not be the mutant's doing.
        if fresh and outcome.status != "error":
            self.store.save_mutant_outcome(self.key, mutant_id, self.exercise, outcome.to_json())
        return outcome


def _prepare(store: Store, key: str, ex, source: str, chosen) -> None:
    """Grade `chosen` in the background at a lower priority, saving each outcome as it comes."""
    import os

    from drill import whatif, whatif_prepare

    with whatif_prepare.holding(key) as mine:
        if not mine:
            return  # another preparation of this very file is under way
        os.nice(10)  # the learner's own commands come first
        cached = store.mutant_outcomes(key)
        if cached.get(whatif.ORIGINAL, {}).get("status") != "survives":
            return  # only a file drill check has just passed, unchanged since
        grading = whatif.Grading(ex, chosen, cached, original=source)
        try:
            run = Run(store, key, ex.key, grading)
            for mutant in chosen:
                run.outcome(mutant.id, screen=None)
        finally:
            grading.close()


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


def _wait_with_bar(grading, mutant_ids: list[str], screen) -> None:
    """Until one of `mutant_ids` is graded."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    with Progress(SpinnerColumn(), TextColumn("grading mutants in the sandbox"), BarColumn(),
                  MofNCompleteColumn(), TimeElapsedColumn(), console=screen, transient=True) as bar:
        task = bar.add_task("", total=grading.total)
        while not any(grading.is_ready(mid) for mid in mutant_ids):
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
    equivalent = sum(1 for e in entries if e["outcome"]["status"] == "survives" and e["outcome"].get("equivalent"))
    click.echo(json.dumps({"schema": JSON_SCHEMA, "status": "ok", "exercise": ex.key, "file": str(path),
                           "mutants": entries, "killed": killed, "survived": len(entries) - killed,
                           "equivalent": equivalent}))


# -- the questions --------------------------------------------------------------

def _session(run: Run, ex, path: Path, chosen, baseline, lang: str) -> None:
    from drill import cards, reviews
    from drill.commands.quiz import AGAIN, GOOD, _relative
    from drill.whatif import card_for, card_id, question

    tty = interactive()
    ask = _keyboard if tty else read_piped_answer
    w = WORDS[lang]
    deck = {card.id: card for card in cards.all_cards()}
    intro = w["intro"].format(changes=plural(len(chosen), "change"), count=len(chosen), file=shown(path.name))
    console.print(Text.assemble(("What if? " if lang == "en" else "如果这样改呢?", "accent"), intro),
                  soft_wrap=not tty)
    right = asked = 0
    survivors = []
    try:
        pending = list(chosen)
        for number in range(1, len(chosen) + 1):
            # Grades finish out of order (a mutant that raises at once beats one that runs every
            # memory check): ask whichever is known first, so nobody waits on the slowest.
            mutant = run.next_ready(pending)
            pending.remove(mutant)
            outcome = run.outcome(mutant.id)
            others = [run.grading.ready[m.id] for m in chosen if m.id in run.grading.ready and m.id != mutant.id]
            q = question(mutant, outcome, others, baseline.checks, lang=lang)
            show_question(q, question_title(q, number, len(chosen), lang), tty, lang)
            picked = _ask_until(ask, w["predict"].format(n=len(q.choices)), len(q.choices))
            asked += 1
            right += picked == q.correct
            reveal(q, picked, baseline.checks, deck.get(card_for(mutant, ex, set(deck)) or ""), tty, lang)
            # Each question is a card: a wrong prediction comes back soon in `drill quiz`, a right one later.
            if outcome.status != "error":
                updated = reviews.review(run.store, card_id(ex, mutant.id), GOOD if picked == q.correct else AGAIN)
                console.print(Text(w["next"].format(when=_relative(updated.due, lang)), style="muted"))
            console.print()
            if outcome.status == "survives":
                survivors.append(mutant)
    except (EOFError, KeyboardInterrupt):
        console.print()
    graded = [run.grading.ready[m.id] for m in chosen if m.id in run.grading.ready]
    killed = sum(1 for o in graded if o.killed)
    if lang == "en":
        lines = [w["predicted"].format(right=right, asked=plural(asked, "outcome")),
                 w["killed"].format(killed=killed, graded=plural(len(graded), "mutant"))]
    else:
        lines = [w["predicted"].format(right=right, asked=asked), w["killed"].format(killed=killed, graded=len(graded))]
    lines[1] += w["survived"].format(n=len(survivors)) if survivors else ("." if lang == "en" else "。")
    console.print(boxed(Text("\n".join(lines)), border_style="cyan"), soft_wrap=not tty)


WORDS = {
    "en": {"title": "What if? {number}/{total} · line {line} · {what}", "now": "What happens now?",
           "predict": "Your prediction (1-{n}; Enter if you don't know)", "right": "Right: ", "wrong": "Not quite: ",
           "graded": "What grading it did", "idea": "The idea behind it ({card}): ",
           "survives": "Every check still passes with this change. Either it never changes a result (an equivalent "
                       "mutant: the two lines mean the same here), or it does and no check looks there: a gap in "
                       "the checks.",
           "equivalent": "Equivalent: {evidence}. The change means the same as your line here.",
           "gap": "A gap in the checks: {evidence}. Your file and this mutant disagree, yet every check passes.",
           "unknown": "Whether it is equivalent is not known: {evidence}.",
           "failed": "{n} of {total} failed:", "more": "  … and {n} more",
           "not_run": "{n} not run: once a check has failed, what-if grading leaves out the peak-memory checks "
                      "(each starts a fresh process to measure one call): {names}",
           "intro": "{changes} to your {file}; predict what the hidden checks say about each.",
           "predicted": "You predicted {right} of {asked}.",
           "killed": "The checks killed {killed} of the {graded} graded so far",
           "survived": "; {n} survived what you saw.", "next": "asked again {when}"},
    "zh": {"title": "如果这样改呢?{number}/{total} · 第 {line} 行 · {what}", "now": "现在会怎样?",
           "predict": "你的预测(1-{n};不知道就直接 Enter)", "right": "答对了:", "wrong": "不对:",
           "graded": "评分的实际结果", "idea": "背后的概念({card}):",
           "survives": "改了这一处,所有检查仍然通过。要么它从不改变结果(等价变异:这两种写法在这里意思相同),"
                       "要么它改变了结果而没有检查看那里:检查的漏洞。",
           "equivalent": "等价:{evidence}。这个改动在这里和你的写法意思相同。",
           "gap": "检查的漏洞:{evidence}。你的文件和这个变异体结果不同,却通过了所有检查。",
           "unknown": "是否等价还不清楚:{evidence}。",
           "failed": "{total} 项检查中 {n} 项失败:", "more": "  …… 还有 {n} 项",
           "not_run": "{n} 项未运行:一旦有检查失败,假设评分就跳过峰值内存检查"
                      "(每项都要启动一个新进程来测量一次调用):{names}",
           "intro": "对你的 {file} 做了 {count} 处改动;预测每一处隐藏检查会怎么说。",
           "predicted": "{asked} 个结果中你预测对了 {right} 个。",
           "killed": "目前已评分的 {graded} 个变异体中,检查杀死了 {killed} 个",
           "survived": ";你看到的有 {n} 个存活。", "next": "下次再问 {when}"},
}

# What each operator does, for the Chinese title (the English one comes with the mutant).
TITLES_ZH = {"drop-factor": "去掉一个因子", "exp-base": "exp ↔ exp2,log ↔ log2", "shift-comparison": "比较移动一位",
             "init-value": "改变初始值", "drop-scale": "去掉缩放", "reduction-axis": "改变归约",
             "block-bound": "移动循环或切片的边界", "delete-statement": "删除一条语句", "swap-operands": "交换两个操作数"}


def survivor_text(outcome, lang: str = "en") -> str:
    """What a surviving mutant is, in words: equivalent, a gap, or (not compared) either."""
    w = WORDS[lang]
    if outcome.equivalent is True:
        return w["equivalent"].format(evidence=outcome.evidence)
    if outcome.equivalent is False:
        return w["gap"].format(evidence=outcome.evidence)
    return w["survives"] + (" " + w["unknown"].format(evidence=outcome.evidence) if outcome.evidence else "")


def show_question(q, title: str, tty: bool, lang: str = "en") -> None:
    from rich.console import Group
    from rich.syntax import Syntax

    m = q.mutant
    hunk = m.diff.split("\n", 2)[2] if m.diff.count("\n") >= 2 else m.diff  # without the ---/+++ header
    body = Syntax(hunk.rstrip("\n"), "diff", theme="ansi_dark", background_color="default") if tty else Text(hunk.rstrip("\n"))
    console.print(boxed(Group(Text(m.change, style="bold"), body), title=f"[accent]{escape(title)}[/accent]",
                        border_style="cyan"), soft_wrap=not tty)
    console.print(WORDS[lang]["now"], soft_wrap=not tty)
    for i, choice in enumerate(q.choices, start=1):
        console.print(Text(f"  {i}. {choice}"), soft_wrap=not tty)


def question_title(q, number: int, total: int, lang: str = "en") -> str:
    m = q.mutant
    what = TITLES_ZH.get(m.operator, m.title) if lang == "zh" else m.title
    return WORDS[lang]["title"].format(number=number, total=total, line=m.line, what=what)


def reveal(q, picked: int, checks: list[str], card, tty: bool, lang: str = "en") -> None:
    w = WORDS[lang]
    o = q.outcome
    answer = f"{q.correct + 1}. {q.choices[q.correct]}"
    if picked == q.correct:
        console.print(Text(w["right"] + answer, style="pass"), soft_wrap=not tty)
    else:
        console.print(Text(w["wrong"] + answer, style="fail"), soft_wrap=not tty)
    body = Text()
    if o.status == "survives":
        body.append(survivor_text(o, lang) + "\n")
    elif o.status in ("fails", "raises", "timeout"):
        if o.failed:
            body.append(w["failed"].format(n=len(o.failed), total=plural(len(checks), "check") if lang == "en"
                                           else len(checks)) + "\n")
        for name, diagnosis in zip(o.failed, o.diagnoses):
            body.append(f"✗ {name}\n", style="fail")
            body.append(f"  {diagnosis}\n")
        if len(o.failed) > len(o.diagnoses):
            body.append(w["more"].format(n=len(o.failed) - len(o.diagnoses)) + "\n", style="muted")
        if o.not_run:
            names = ", ".join(f"«{name}»" for name in o.not_run)
            body.append(w["not_run"].format(n=plural(len(o.not_run), "check") if lang == "en" else len(o.not_run),
                                            names=names) + "\n", style="muted")
        if o.status == "timeout" or not o.failed:
            body.append(o.message + "\n")
    else:
        body.append(o.message + "\n")
    if card is not None:
        from drill.mathtext import render

        body.append("\n" + w["idea"].format(card=card.id), style="accent")
        body.append(render(card.question(lang)) + "\n")
        body.append(render(card.answer_text(lang)), style="muted")
    body.rstrip()
    console.print(boxed(body, title=f"[accent]{w['graded']}[/accent]", border_style="green"), soft_wrap=not tty)


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


