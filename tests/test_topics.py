"""Topic-neutral commands: nothing assumes the flashattention topic or its first file."""

from __future__ import annotations

import dataclasses

import click
import pytest
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


@click.command(name="other-picture")
def other_picture() -> None:
    """A picture of the other topic."""
    click.echo("the other topic's picture")


def other_views(monkeypatch, *views: catalog.View) -> None:
    """A second topic, 'other', that declares `views` for drill show."""
    real = catalog.load_topic("flashattention")
    topics = {"flashattention": real, "other": dataclasses.replace(real, name="other", exercises=(), views=views)}
    monkeypatch.setattr(catalog, "topic_names", lambda: sorted(topics))
    monkeypatch.setattr(catalog, "load_topic", lambda name: topics[name])


def test_show_lists_and_runs_the_views_another_topic_declares(monkeypatch):
    other_views(monkeypatch, catalog.View(topic="other", name="other-picture", command=f"{__name__}:other_picture",
                                          example="drill show other-picture   # the other topic"))
    help_text = run("show", "--help").output
    assert "drill show other-picture   # the other topic" in help_text
    listed = [line.split()[:2] for line in help_text.split("Commands:")[1].splitlines() if line.strip()]
    assert ["other-picture", "A"] in listed and ["tiling", "The"] in listed
    result = run("show", "other-picture")
    assert result.exit_code == 0 and "the other topic's picture" in result.output


def test_two_topics_declaring_one_view_is_one_line_and_exit_2(monkeypatch):
    other_views(monkeypatch, catalog.View(topic="other", name="tiling", command=f"{__name__}:other_picture",
                                          example=""))
    result = CliRunner().invoke(cli, ["show", "tiling"])
    assert result.exit_code == 2 and "drill show tiling is declared by both flashattention and other" in result.stderr


def test_catalog_rejects_a_view_that_names_no_function():
    text = 'format = 1\ntopic = "t"\ntitle = "T"\nintro = ""\n[[view]]\nname = "a"\ncommand = "drill.visual"\n'
    with pytest.raises(catalog.CatalogError, match="module:function"):
        catalog.parse_catalog(text, "t")
