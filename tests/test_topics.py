"""Topic-neutral commands: nothing assumes the flashattention topic or its first file."""

from __future__ import annotations

import dataclasses

from click.testing import CliRunner

from drill import cards, catalog
from drill.cli import cli
from drill.commands.start import workspace_readme


def run(*args: str, input: str = ""):
    return CliRunner().invoke(cli, list(args), input=input, catch_exceptions=False)


def other_topic(monkeypatch) -> cards.Card:
    """A second deck, 'other', with one card of its own."""
    real = cards.load_deck("flashattention")
    card = dataclasses.replace(real.cards[0], id="other-only-card", q_en="Only in the other topic?")
    decks = {"flashattention": real, "other": cards.Deck(topic="other", cards=(card,))}
    monkeypatch.setattr(cards, "deck_topics", lambda: sorted(decks))
    monkeypatch.setattr(cards, "load_deck", lambda topic: decks[topic])
    return card


def test_quiz_topic_reviews_only_that_topics_cards(monkeypatch):
    other_topic(monkeypatch)
    result = run("quiz", "--topic", "other", "--cram", "--limit", "5", input="\n\n\n\n")
    assert result.exit_code == 0, result.output
    assert "Only in the other topic?" in result.output
    first = cards.load_deck("flashattention").cards[0]
    assert first.q_en.splitlines()[0] not in result.output


def test_quiz_unknown_topic_is_one_line_and_exit_2():
    result = run("quiz", "--topic", "nonsense")
    assert result.exit_code == 2 and "unknown topic 'nonsense'" in result.stderr


def test_workspace_readme_names_the_topics_own_first_file():
    topic = catalog.load_topic("flashattention")
    renamed = dataclasses.replace(topic.exercises[0], file="01_something_else.py")
    other = dataclasses.replace(topic, name="other", exercises=(renamed, *topic.exercises[1:]))
    text = workspace_readme(other)
    assert "drill check 01_something_else.py" in text and "01_online_softmax.py" not in text
