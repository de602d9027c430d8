"""The language the user reads cards in (en or zh), remembered between commands."""

from __future__ import annotations

from drill import cards
from drill.store import Store


def remembered_language(store: Store, lang: str | None) -> str:
    """`lang` when given (and remember it), else the saved choice, else English."""
    if lang:
        store.set_setting("lang", lang)
        return lang
    saved = store.get_setting("lang", "en")
    return saved if saved in cards.LANGS else "en"
