"""drill mock TOPIC: one timed interview question, graded by its key points.

On a terminal the question stays on screen with a live countdown while you
type; Enter on an empty line (or Ctrl-D) hands the answer in, and time running
out hands in what is there. Without a terminal the answer is read from standard
input up to an empty line or end of input.
"""

from __future__ import annotations

import sys
import time

import click
from rich.console import Group
from rich.panel import Panel
from rich.text import Text

from drill import cards, mockinterview
from drill.console import console, interactive
from drill.errors import cannot
from drill.language import remembered_language
from drill.mathtext import render
from drill.store import Store

DEFAULT_SECONDS = 120  # a 30-second spoken answer takes longer to type

WORDS = {
    "en": {
        "how": "Answer as you would out loud. Enter on an empty line hands it in.",
        "left": "{m}:{s:02d} left", "up": "time is up",
        "model": "Model 30-second answer", "points": "Key points",
        "score": "Covered {hit} of {total} key points ({pct:.0f}%) in {secs:.0f} s of {limit} s.",
        "over": " Over time.", "empty": "No answer was given.",
        "list": "That reads as a list of terms, not an explanation: say how the pieces connect.",
        "wrong": "Corrections",
        "said": "You said (in effect): {wrong}",
        "right": "In fact: {right}",
        "source": "Source: {source}",
    },
    "zh": {
        "how": "像面试时口头回答一样写下来。空行回车提交。",
        "left": "剩余 {m}:{s:02d}", "up": "时间到",
        "model": "30 秒参考回答", "points": "必答点",
        "score": "覆盖了 {hit}/{total} 个必答点({pct:.0f}%),用时 {secs:.0f} 秒(限时 {limit} 秒)。",
        "over": "超时了。", "empty": "没有作答。",
        "list": "这更像是关键词罗列,而不是解释:请说清楚它们之间怎么联系起来。",
        "wrong": "纠正",
        "said": "你的意思是:{wrong}",
        "right": "实际上:{right}",
        "source": "出处:{source}",
    },
}


@click.command(name="mock")
@click.argument("topic")
@click.option("--question", "question_name",
              help="Which main question (its card id, e.g. main-online-softmax or online-softmax).")
@click.option("--lang", type=click.Choice(cards.LANGS), help="Language; remembered for next time.")
@click.option("--time", "limit", type=click.IntRange(min=5), default=DEFAULT_SECONDS, show_default=True,
              help="Seconds to answer.")
def command(topic: str, question_name: str | None, lang: str | None, limit: int) -> None:
    """A timed mock interview question on TOPIC (for example flashattention)."""
    topics = [t for t in cards.deck_topics() if mockinterview.main_questions(cards.load_deck(t).cards)]
    if topic not in topics:
        cannot(f"unknown topic {topic!r}; topics with mock questions: {', '.join(topics)}")
    questions = mockinterview.main_questions(cards.load_deck(topic).cards)
    with Store() as store:
        if question_name:
            card = mockinterview.find_question(questions, question_name)
            if card is None:
                names = ", ".join(q.id for q in questions)
                cannot(f"unknown question {question_name!r}; questions: {names}")
        else:
            card = mockinterview.least_recently_practised(store, topic, questions)
        lang = remembered_language(store, lang)
        words = WORDS[lang]
        question = render(card.question(lang))
        if interactive():
            answer, seconds = type_with_countdown(question, limit, words)
        else:
            answer, seconds = read_piped_answer(question, words)
        coverage = mockinterview.grade(card, answer)
        mockinterview.record(store, topic, card, seconds, answer, coverage)
    show_result(card, lang, coverage, seconds, limit, answer)


def read_piped_answer(question: str, words: dict[str, str]) -> tuple[str, float]:
    console.print(Text(question, style="accent"), soft_wrap=True)
    console.print(Text(words["how"], style="muted"), soft_wrap=True)
    start = time.monotonic()
    lines = []
    for line in sys.stdin:
        if not line.strip():
            break
        lines.append(line.rstrip("\n"))
    return "\n".join(lines), time.monotonic() - start


def type_with_countdown(question: str, limit: int, words: dict[str, str]) -> tuple[str, float]:
    """Read keystrokes in cbreak mode so the countdown keeps ticking while the user types."""
    import codecs
    import os
    import re
    import select
    import termios
    import tty

    from rich.live import Live

    escape_sequence = re.compile(r"\x1b(\[[0-9;]*[A-Za-z~]|.)?")  # arrows etc.: ignored
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    fd = sys.stdin.fileno()
    saved = termios.tcgetattr(fd)
    typed = ""
    start = time.monotonic()
    try:
        tty.setcbreak(fd)
        with Live(_typing_panel(question, typed, limit, words), console=console,
                  refresh_per_second=4, transient=False) as live:
            while (left := limit - (time.monotonic() - start)) > 0:
                if select.select([fd], [], [], 0.25)[0]:
                    chunk = decoder.decode(os.read(fd, 1024))
                    typed, done = _apply_keys(typed, escape_sequence.sub("", chunk))
                    if done:
                        break
                live.update(_typing_panel(question, typed, max(left, 0), words))
            live.update(_typing_panel(question, typed, max(limit - (time.monotonic() - start), 0), words))
    except KeyboardInterrupt:
        pass  # Ctrl-C hands in what was typed
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)
    return typed.strip(), time.monotonic() - start


def _apply_keys(typed: str, keys: str) -> tuple[str, bool]:
    """Apply keystrokes to the answer; True when the answer is handed in."""
    for key in keys:
        if key == "\x04":  # Ctrl-D
            return typed, True
        if key in ("\x7f", "\b"):
            typed = typed[:-1]
        elif key in ("\r", "\n"):
            if typed == "" or typed.endswith("\n"):
                return typed, True
            typed += "\n"
        elif key.isprintable():
            typed += key
    return typed, False


def _typing_panel(question: str, typed: str, left: float, words: dict[str, str]) -> Panel:
    seconds = int(left + 0.999)
    style = "fail" if seconds <= 10 else "warn" if seconds <= 30 else "accent"
    clock = words["left"].format(m=seconds // 60, s=seconds % 60) if seconds else words["up"]
    tail = typed[-1200:]  # keep the live area a few lines tall
    return Panel(
        Group(Text(question), Text(""), Text(words["how"], style="muted"), Text(""),
              Text(tail) + Text("▌", style="accent")),
        title=Text(f"⏱ {clock}", style=style), title_align="right", border_style=style,
    )


def show_result(card: cards.Card, lang: str, coverage: mockinterview.Coverage, seconds: float,
                limit: int, answer: str) -> None:
    words = WORDS[lang]
    tty = interactive()
    points = Text()
    for point, hit in zip(card.keypoints, coverage.covered):
        points.append("✓ " if hit else "✗ ", style="pass" if hit else "fail")
        points.append(render(point.text(lang)) + "\n")
    score = words["score"].format(hit=coverage.count, total=len(coverage.covered),
                                  pct=100 * coverage.score, secs=seconds, limit=limit)
    if seconds > limit + 1:  # piped answers are not cut off; a countdown ends at the limit
        score += words["over"]
    if not answer:
        score = words["empty"] + " " + score
    elif coverage.keyword_list:
        score = words["list"] + " " + score
    model = Text(render(card.answer_text(lang)))
    points.rstrip()
    corrections = Text()
    for index, wrong in coverage.misconceptions:
        corrections.append("✗ " + words["said"].format(wrong=render(wrong.text(lang))) + "\n", style="fail")
        corrections.append("  " + words["right"].format(right=render(card.keypoints[index].text(lang))) + "\n")
        corrections.append("  " + words["source"].format(source=card.source) + "\n", style="muted")
    corrections.rstrip()
    if tty:
        console.print(Panel(model, title=words["model"], title_align="left", border_style="green"))
        console.print(Panel(points, title=words["points"], title_align="left"))
        if coverage.misconceptions:
            console.print(Panel(corrections, title=words["wrong"], title_align="left", border_style="red"))
        console.print(Text(score, style="pass" if coverage.score >= 0.75 else "warn"))
        return
    console.print(Text(f"{words['model']}:", style="accent"), soft_wrap=True)
    console.print(model, soft_wrap=True)
    console.print(Text(f"{words['points']}:", style="accent"), soft_wrap=True)
    console.print(points, soft_wrap=True)
    if coverage.misconceptions:
        console.print(Text(f"{words['wrong']}:", style="accent"), soft_wrap=True)
        console.print(corrections, soft_wrap=True)
    console.print(Text(score), soft_wrap=True)
