"""drill quiz --followups: review the follow-up cards that are due (FSRS).

On a terminal the session is a rich interface: a rating (1-4, a/h/g/e, Enter for Good)
and a choice are single keys, as in `drill watch`; a typed answer ends with Enter.
Without one (a pipe, a test),
answers are read from standard input one per line, so a session can be
scripted: a recall card takes two lines (anything to reveal, then a rating;
empty means Good), a numeric or choice card takes one. End of input ends the
session with its summary.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

import click
from rich.markup import escape
from rich.panel import Panel
from rich.text import Text

from drill import cards, reviews
from drill.console import console, interactive, read_piped_answer
from drill.errors import cannot
from drill.language import remembered_language
from drill.mathtext import render
from drill.store import Store
from drill.words import plural

DEFAULT_LIMIT = 20
RATING_KEYS = {"1": 1, "2": 2, "3": 3, "4": 4, "a": 1, "h": 2, "g": 3, "e": 4,
               "again": 1, "hard": 2, "good": 3, "easy": 4}
GOOD, AGAIN = 3, 1

WORDS = {
    "en": {
        "reveal": "Enter reveals the answer (type your own first if you like)",
        "rate": "How well did you know it? 1 Again · 2 Hard · 3 Good · 4 Easy (a/h/g/e, Enter = Good)",
        "number": "Your answer (a number or expression such as e^-2+1; Enter if you don't know)",
        "within": "[within ±{pct}%, or rounded to 3 significant figures]", "exact": "[exact]",
        "choice": "Your choice (1-{n}; Enter if you don't know)",
        "right": "Right.", "wrong": "Not quite: the answer is {answer}.",
        "invalid": "Didn't catch that; try again.",
        "reciprocal": "That is the reciprocal: the card asks for the factor (greater than 1).",
        "answer": "Answer", "source": "Source", "next": "next review {when}",
        "summary": "Reviewed {cards}, {right} right.",
        "cram": "Cram session: the schedule did not change.",
        "more_due": "More cards are due now: run `drill quiz` again.",
        "next_due": "Next card due {when} ({at}).",
        "nothing": "Nothing is due.",
    },
    "zh": {
        "reveal": "按 Enter 看答案(可以先写下自己的回答)",
        "rate": "掌握得怎么样?1 忘了 · 2 困难 · 3 良好 · 4 简单(a/h/g/e,Enter = 良好)",
        "number": "你的答案(一个数或算式,如 e^-2+1;不会就直接 Enter)",
        "within": "[误差 ±{pct}% 以内,或正确四舍五入到 3 位有效数字,都算对]", "exact": "[须完全正确]",
        "choice": "你的选择(1-{n};不会就直接 Enter)",
        "right": "答对了。", "wrong": "不对:答案是 {answer}。",
        "invalid": "没看懂这个输入,请再试一次。",
        "reciprocal": "这是倒数:题目问的是倍数(大于 1)。",
        "answer": "答案", "source": "出处", "next": "下次复习 {when}",
        "summary": "复习了 {n} 张卡,答对 {right} 张。",
        "cram": "突击复习:没有改动复习计划。",
        "more_due": "还有卡片现在就到期:再运行一次 `drill quiz`。",
        "next_due": "下一张卡 {when} 到期({at})。",
        "nothing": "现在没有到期的卡片。",
    },
}


@click.command(name="quiz")
@click.option("--followups", is_flag=True,
              help="Review the follow-up question deck (the default; the only deck so far).")
@click.option("--lang", type=click.Choice(cards.LANGS),
              help="Language of the cards; remembered for next time (default en).")
@click.option("--limit", type=click.IntRange(min=1), default=DEFAULT_LIMIT, show_default=True,
              help="At most this many cards in one session.")
@click.option("--cram", is_flag=True,
              help="Review cards even if not due, without changing the schedule.")
@click.option("--tag", help="Only cards with this tag (for example main, online-softmax, ring).")
@click.option("--topic", help="Only this topic's cards (default: every topic).")
def command(followups: bool, lang: str | None, limit: int, cram: bool, tag: str | None, topic: str | None) -> None:
    """Review the follow-up question cards that are due.

    Without a terminal, answers are read from standard input, one per line: a
    recall card takes two lines (anything to reveal, then 1-4 or a/h/g/e, empty
    for Good), a numeric or choice card takes one (empty for "don't know").
    """
    if topic is not None and topic not in cards.deck_topics():
        cannot(f"unknown topic {topic!r}; topics with cards: {', '.join(cards.deck_topics())}")
    deck = list(cards.load_deck(topic).cards) if topic else cards.all_cards()
    known_tags = sorted({t for card in deck for t in card.tags})
    if tag is not None and tag not in known_tags and tag != "whatif":
        cannot(f"unknown tag {tag!r}; known tags: {', '.join(known_tags)}, whatif (questions about your code)")
    selected = {card.id: card for card in deck if tag is None or tag in card.tags}  # written cards; what-if ones join below
    with Store() as store:
        lang = remembered_language(store, lang)
        order = reviews.by_due(store, selected) if cram else reviews.due_now(store, selected)
        # What-if questions about the learner's own passing files come after the written cards.
        about_code = _code_cards(store, topic, tag, lang)
        code_order = _code_order(store, about_code, cram)
        selected.update({card.id: card for card in about_code})
        order += code_order
        if not order:
            console.print(WORDS[lang]["nothing"] + " " + _next_due_line(store, selected, lang))
            return
        session = Session(store, lang, cram, Keyboard() if interactive() else ScriptedInput())
        try:
            for card_id in order[:limit]:
                session.review(selected[card_id])
        except (EOFError, KeyboardInterrupt):
            console.print()
        session.print_summary(_next_due_line(store, selected, lang))


# -- reading answers ---------------------------------------------------------

class ScriptedInput:
    """Answers from standard input, one per line; EOFError at the end."""

    tty = False

    ask = staticmethod(read_piped_answer)
    choose = ask  # one line per choice, too


class Keyboard:
    """A person at a terminal."""

    tty = True

    def ask(self, prompt: str) -> str:
        return console.input(f"[muted]{escape(prompt)}[/muted]\n[accent]›[/accent] ").strip()

    def choose(self, prompt: str) -> str:
        """One key, taken at once (no Enter), shown after the prompt as typed ('Enter' for Enter)."""
        from drill.console import read_key

        console.print(f"[muted]{escape(prompt)}[/muted]\n[accent]›[/accent] ", end="")
        key = read_key()
        console.print(Text(key or "Enter"))
        return key


# -- one session -------------------------------------------------------------

@dataclass
class Session:
    store: Store
    lang: str
    cram: bool
    io: ScriptedInput | Keyboard
    ratings: list[int] = field(default_factory=list)

    @property
    def words(self) -> dict[str, str]:
        return WORDS[self.lang]

    def review(self, card) -> None:
        if not isinstance(card, cards.Card):
            rating = self._about_code(card)
        else:
            self._show_question(card)
            rating = {"recall": self._recall, "numeric": self._numeric, "choice": self._choice}[card.kind](card)
        updated = reviews.review(self.store, card.id, rating, cram=self.cram)
        self.ratings.append(rating)
        if not self.cram:
            console.print(Text(self.words["next"].format(when=_relative(updated.due, self.lang)), style="muted"))
        console.print()

    def _about_code(self, card) -> int:
        """A what-if question about the learner's own file (drill/whatif.py): a choice, graded by the mutant's
        real outcome."""
        from drill.commands.whatif import WORDS as WHATIF, question_title, reveal, show_question
        from drill.whatif import CARD_TAG, card_for

        q = card.question
        label = CARD_TAG if self.lang == "en" else "关于你的代码"
        title = f"{len(self.ratings) + 1} · {label} · {card.exercise.id} · " + \
            question_title(q, 1, 1, self.lang).split(" · ", 2)[2]
        show_question(q, title, self.io.tty, self.lang)
        picked = self._ask_until(WHATIF[self.lang]["predict"].format(n=len(q.choices)),
                                 lambda text: _choice_or_blank(text, len(q.choices)), key=len(q.choices) <= 9)
        deck = {c.id: c for c in cards.all_cards()}
        reveal(q, picked, card.checks, deck.get(card_for(q.mutant, card.exercise, set(deck)) or ""),
               self.io.tty, self.lang)
        return GOOD if picked == q.correct else AGAIN

    def _recall(self, card: cards.Card) -> int:
        self.io.ask(self.words["reveal"])
        self._show_answer(card)
        return self._ask_until(self.words["rate"], lambda text: RATING_KEYS.get(text.lower() or "g"), key=True)

    def _numeric(self, card: cards.Card) -> int:
        # Say how close counts, so "1.20" for 1.2034 is not a surprise.
        within = (self.words["within"].format(pct=f"{card.tolerance * 100:g}") if card.tolerance
                  else self.words["exact"])
        text = self._ask_until(f"{self.words['number']} {within}", _number_or_blank)
        right = text != "" and card.accepts_text(text)
        expected = f"{card.answer:g} {card.unit}".strip()
        self._verdict(right, self.words["wrong"].format(answer=expected))
        if not right and text and card.reciprocal_of(text):
            console.print(Text(self.words["reciprocal"], style="warn"), soft_wrap=not self.io.tty)
        self._show_answer(card)
        return GOOD if right else AGAIN

    def _choice(self, card: cards.Card) -> int:
        options = card.choices(self.lang)
        for number, option in enumerate(options, start=1):
            console.print(Text(f"  {number}. {render(option)}"), soft_wrap=not self.io.tty)
        picked = self._ask_until(self.words["choice"].format(n=len(options)),
                                 lambda text: _choice_or_blank(text, len(options)), key=len(options) <= 9)
        right = picked == card.correct
        self._verdict(right, self.words["wrong"].format(
            answer=f"{card.correct + 1}. {render(options[card.correct])}"))
        self._show_answer(card)
        return GOOD if right else AGAIN

    def _ask_until(self, prompt: str, parse, key: bool = False):
        # A typo is asked again rather than graded: it is not a wrong answer.
        read = self.io.choose if key else self.io.ask
        while True:
            value = parse(read(prompt))
            if value is not None:
                return value
            console.print(Text(self.words["invalid"], style="warn"))

    def _verdict(self, right: bool, wrong_text: str) -> None:
        console.print(Text(self.words["right"], style="pass") if right else Text(wrong_text, style="fail"),
                      soft_wrap=not self.io.tty)

    def _show_question(self, card: cards.Card) -> None:
        position = f"{len(self.ratings) + 1}"
        header = f"{position} · {card.id} · {', '.join(card.tags)}"
        question = Text(render(card.question(self.lang)))
        if self.io.tty:
            console.print(Panel(question, title=f"[accent]{header}[/accent]", title_align="left",
                                border_style="cyan"))
        else:
            console.print(Text(f"[{header}]", style="accent"), soft_wrap=True)
            console.print(question, soft_wrap=True)

    def _show_answer(self, card: cards.Card) -> None:
        answer = Text(render(card.answer_text(self.lang)))
        answer.append(f"\n{self.words['source']}: {card.source}", style="muted")
        if self.io.tty:
            console.print(Panel(answer, title=self.words["answer"], title_align="left", border_style="green"))
        else:
            console.print(Text(f"{self.words['answer']}: ", style="accent") + answer, soft_wrap=True)

    def print_summary(self, next_due_line: str) -> None:
        right = sum(1 for rating in self.ratings if rating != AGAIN)
        count = len(self.ratings)
        lines = [self.words["summary"].format(n=count, cards=plural(count, "card"), right=right)]
        lines.append(self.words["cram"] if self.cram else next_due_line)
        body = Text("\n".join(lines))
        if self.io.tty:
            console.print(Panel(body, border_style="cyan"))
        else:
            console.print(body, soft_wrap=True)


def _code_cards(store: Store, topic: str | None, tag: str | None, lang: str) -> list:
    """What-if cards about the learner's passing files, filtered like the deck (tag: 'about your code' or
    the exercise's id)."""
    from drill import catalog
    from drill.whatif import CARD_TAG, code_cards

    if tag is not None and tag not in (CARD_TAG, "whatif") and catalog.resolve(tag) is None:
        return []
    exercises = [ex for ex in catalog.all_exercises() if (topic is None or ex.topic == topic)
                 and (tag in (None, CARD_TAG, "whatif") or ex.id == tag)]
    return code_cards(store, exercises, lang)


def _code_order(store: Store, about_code: list, cram: bool) -> list[str]:
    """The due what-if cards: those asked before and due again, then a few never asked."""
    from drill.whatif import NEW_PER_QUIZ

    ids = [card.id for card in about_code]
    if cram:
        return reviews.by_due(store, ids)
    known = reviews.due_times(store)
    due = reviews.due_now(store, ids)
    return [i for i in due if i in known] + [i for i in due if i not in known][:NEW_PER_QUIZ]


def _number_or_blank(text: str) -> str | None:
    return text if text == "" or cards.parse_number(text) is not None else None


def _choice_or_blank(text: str, count: int) -> int | None:
    if text == "":
        return -1  # no answer: graded as wrong
    if text.isdigit() and 1 <= int(text) <= count:
        return int(text) - 1
    return None


def _next_due_line(store: Store, card_ids, lang: str) -> str:
    words = WORDS[lang]
    when = reviews.next_due(store, card_ids)
    if when is None or when <= reviews.utcnow():
        return words["more_due"]
    local = when.astimezone()
    return words["next_due"].format(when=_relative(when, lang), at=local.strftime("%Y-%m-%d %H:%M %Z"))


UNITS = {"en": ((86400, "day"), (3600, "hour"), (60, "minute")),
         "zh": ((86400, "天"), (3600, "小时"), (60, "分钟"))}


def _relative(moment: datetime, lang: str) -> str:
    seconds = (moment - reviews.utcnow()).total_seconds()
    # A second of slack: a one-minute step read back a moment later is still "1 minute".
    size, unit = next(((size, unit) for size, unit in UNITS[lang] if seconds >= size - 1), (60, None))
    if unit is None:
        return "now" if lang == "en" else "现在"
    count = round(seconds / size)
    return f"{count} {unit}后" if lang == "zh" else f"in {count} {unit}{'s' if count != 1 else ''}"
