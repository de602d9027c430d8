"""drill export anki: the written package opens and its notes read back."""

from __future__ import annotations

import html
import json
import sqlite3
import zipfile

import pytest
from click.testing import CliRunner

from drill import anki, cards
from drill.cli import cli

DECK = cards.load_deck("flashattention")
CARD = {card.id: card for card in DECK.cards}


def export(*args: str):
    return CliRunner().invoke(cli, ["export", "anki", *args], catch_exceptions=False)


def read_package(path, tmp_path) -> tuple[list[tuple], list[tuple]]:
    """(notes, models-json) from the .apkg: a zip holding an SQLite collection."""
    with zipfile.ZipFile(path) as package:
        assert "collection.anki2" in package.namelist()
        package.extract("collection.anki2", tmp_path)
    db = sqlite3.connect(tmp_path / "collection.anki2")
    try:
        notes = db.execute("SELECT guid, mid, flds, tags FROM notes").fetchall()
        models = db.execute("SELECT models, decks FROM col").fetchall()
        card_count = db.execute("SELECT count(*) FROM cards").fetchone()[0]
    finally:
        db.close()
    return notes, models, card_count


def test_package_holds_every_card_with_both_languages_math_source_and_tags(tmp_path):
    target = tmp_path / "drill.apkg"
    result = export(str(target))
    assert result.exit_code == 0, result.output
    notes, [(models, decks)], card_count = read_package(target, tmp_path)
    assert len(notes) == len(DECK.cards) and card_count == 2 * len(DECK.cards)  # English + 中文
    by_id = {flds.split("\x1f")[0]: (guid, mid, flds.split("\x1f"), tags.split()) for guid, mid, flds, tags in notes}
    assert set(by_id) == {card.id for card in DECK.cards}
    assert {mid for _, mid, _, _ in by_id.values()} == {anki.MODEL_ID}
    model = json.loads(models)[str(anki.MODEL_ID)]
    assert [t["name"] for t in model["tmpls"]] == ["English", "中文"]
    assert [f["name"] for f in model["flds"]] == list(anki.FIELDS)
    assert json.loads(decks)[str(anki.deck_id("flashattention"))]["name"] == "drill::flashattention"

    guid, _, fields, tags = by_id["online-example-first-block"]
    card = CARD["online-example-first-block"]
    assert html.unescape(dict(zip(anki.FIELDS, fields))["Source"]) == card.source
    assert "1.1353" in fields[2] and "e⁻² + 1" in fields[2]  # math rendered as in the terminal
    assert "\\(" not in "".join(fields)
    assert any("\u4e00" <= ch <= "\u9fff" for ch in fields[3] + fields[4])
    assert set(tags) == {"flashattention", *card.tags}

    _, _, choice_fields, _ = by_id["score-block-shape"]
    assert "<ol class=choices>" in choice_fields[1] and "<b>3. [B_r, B_c]</b>" in choice_fields[2]


def test_ids_are_stable_so_a_reimport_updates_notes(tmp_path):
    first, second = tmp_path / "a.apkg", tmp_path / "b.apkg"
    assert export(str(first)).exit_code == 0 and export(str(second)).exit_code == 0
    (tmp_path / "1").mkdir()
    (tmp_path / "2").mkdir()
    notes_a = sorted(n[:2] for n in read_package(first, tmp_path / "1")[0])
    notes_b = sorted(n[:2] for n in read_package(second, tmp_path / "2")[0])
    assert notes_a == notes_b


@pytest.mark.parametrize("args, words", [
    (["cards.txt"], ".apkg"),
    (["/nonexistent-folder/x.apkg"], "folder"),
    (["x.apkg", "--topic", "nosuch"], "unknown topic"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, monkeypatch, args, words):
    monkeypatch.chdir(tmp_path)
    result = export(*args)
    assert result.exit_code == 2
    assert len(result.stderr.strip().splitlines()) == 1 and words in result.stderr
    assert not list(tmp_path.iterdir())
