"""drill export anki FILE.apkg: the follow-up cards as an Anki package."""

from __future__ import annotations

from pathlib import Path

import click

from drill import cards
from drill.console import console
from drill.errors import cannot


@click.group(name="export")
def command() -> None:
    """Export the follow-up cards to other tools."""


@command.command(name="anki")
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--topic", help="Only this topic's cards (default: every topic).")
def anki(file: str, topic: str | None) -> None:
    """Write every follow-up card to FILE.apkg: English and 中文 sides, math, source, tags."""
    from drill import anki as exporter

    path = Path(file).expanduser()
    if path.suffix != ".apkg":
        cannot(f"{file}: an Anki package must end in .apkg")
    if not path.resolve().parent.is_dir():
        cannot(f"{file}: its folder does not exist")
    topics = cards.deck_topics()
    if topic is not None and topic not in topics:
        cannot(f"unknown topic {topic!r}; topics with cards: {', '.join(topics)}")
    decks = {name: list(cards.load_deck(name).cards) for name in topics if topic in (None, name)}
    try:
        count = exporter.write(path, decks)
    except OSError as exc:
        cannot(f"could not write {file}: {exc.strerror or exc}")
    console.print(f"wrote {count} notes ({', '.join(decks)}) to [accent]{path}[/accent]")
