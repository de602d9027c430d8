"""Write the follow-up cards as an Anki package (.apkg) with genanki.

One note per card and one note type with two card templates, English and 中文, so
Anki schedules each language on its own. Math is rendered to Unicode as in the
terminal; the source is shown under every answer; the card's tags are kept. The model
id, deck ids and note GUIDs are fixed (derived from names, never random), so
importing a newer package updates the notes instead of duplicating them.
"""

from __future__ import annotations

import hashlib
import html
from pathlib import Path

from drill.cards import Card
from drill.mathtext import render

MODEL_ID = 1_731_040_714  # never change: Anki matches notes to their type by this id
MODEL_NAME = "drill follow-up card (en + zh)"
FIELDS = ("Id", "Question", "Answer", "问题", "答案", "Source")

_CSS = """
.card { font-family: system-ui, sans-serif; font-size: 20px; text-align: left; line-height: 1.45;
        color: black; background-color: white; max-width: 46em; margin: auto; }
.source { margin-top: 1.2em; font-size: 15px; color: #666; }
.choices { margin: 0.6em 0 0 1.2em; }
"""
_WORDS = {"en": {"answer": "Answer", "source": "Source"}, "zh": {"answer": "答案", "source": "出处"}}


def _template(name: str, question: str, answer: str, source_label: str) -> dict:
    back = ("{{FrontSide}}<hr id=answer>{{" + answer + "}}"
            "<div class=source>" + source_label + ": {{Source}}</div>")
    return {"name": name, "qfmt": "{{" + question + "}}", "afmt": back}


def model():
    import genanki

    return genanki.Model(
        MODEL_ID, MODEL_NAME,
        fields=[{"name": name} for name in FIELDS],
        templates=[_template("English", "Question", "Answer", _WORDS["en"]["source"]),
                   _template("中文", "问题", "答案", _WORDS["zh"]["source"])],
        css=_CSS,
    )


def deck_id(topic: str) -> int:
    """A stable 31-bit id per topic deck."""
    return int(hashlib.sha1(f"drill-deck-{topic}".encode()).hexdigest()[:8], 16) & 0x7FFFFFFF


def _html(text: str) -> str:
    return html.escape(render(text)).replace("\n", "<br>")


def question_html(card: Card, lang: str) -> str:
    text = _html(card.question(lang))
    if card.kind == "choice":
        items = "".join(f"<li>{_html(choice)}</li>" for choice in card.choices(lang))
        text += f"<ol class=choices>{items}</ol>"
    return text


def answer_html(card: Card, lang: str) -> str:
    head = ""
    if card.kind == "numeric":
        head = f"<b>{card.answer:g} {html.escape(card.unit)}</b>".replace(" </b>", "</b>") + "<br>"
    elif card.kind == "choice":
        head = f"<b>{card.correct + 1}. {_html(card.choices(lang)[card.correct])}</b><br>"
    return head + _html(card.answer_text(lang))


def note(card: Card, topic: str, note_model=None):
    import genanki

    fields = [card.id, question_html(card, "en"), answer_html(card, "en"),
              question_html(card, "zh"), answer_html(card, "zh"), html.escape(card.source)]
    return genanki.Note(model=note_model or model(), fields=fields, tags=[topic, *card.tags],
                        guid=genanki.guid_for("drill", card.id))


def write(path: Path, decks: dict[str, list[Card]]) -> int:
    """Write one Anki deck per topic into one package; returns the number of notes."""
    import genanki

    note_model = model()
    packaged = []
    for topic, cards in decks.items():
        deck = genanki.Deck(deck_id(topic), f"drill::{topic}")
        for card in cards:
            deck.add_note(note(card, topic, note_model))
        packaged.append(deck)
    genanki.Package(packaged).write_to_file(str(path))
    return sum(len(cards) for cards in decks.values())
