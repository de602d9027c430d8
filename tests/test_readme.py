"""The README's exercise table lists the catalog's exercises, in the catalog's order."""

from __future__ import annotations

import re
from pathlib import Path

from drill import catalog

README = Path(__file__).resolve().parent.parent / "README.md"
ROW = re.compile(r"^\|\s*(\d\d)\s*\|\s*([a-z0-9-]+)\s*\|")


def table_rows(text: str) -> list[tuple[str, str]]:
    return [m.groups() for m in map(ROW.match, text.splitlines()) if m]


def test_readme_table_matches_the_catalog():
    expected = [(ex.number, ex.id) for ex in catalog.load_topic("flashattention").exercises]
    assert table_rows(README.read_text(encoding="utf-8")) == expected, (
        "README.md's exercise table and exercises/flashattention/catalog.toml disagree: "
        "add, remove or reorder the table's rows (| NN | id | ... |)")


def test_a_row_out_of_order_is_caught():
    rows = table_rows("| 02 | tiling-shapes | x | CPU |\n| 01 | online-softmax | y | CPU |\n")
    assert rows != [(ex.number, ex.id) for ex in catalog.load_topic("flashattention").exercises][:2]
