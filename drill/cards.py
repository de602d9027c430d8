"""Load a topic's follow-up deck (cards.toml) into frozen dataclasses.

A card's `id` keys its review history, so it is a hand-written slug and never
derived from the text: rewording a card keeps its schedule. Unknown keys and
malformed cards are rejected when the deck loads, so a typo fails loudly.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from drill import paths
from drill.errors import DrillError
from drill.tomlfile import tomllib

DECK_FORMAT = 1
KINDS = ("recall", "numeric", "choice")
LANGS = ("en", "zh")
SLUG = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")

_DECK_KEYS = {"format", "card"}
_CARD_KEYS = {
    "id", "tags", "kind", "q_en", "q_zh", "a_en", "a_zh", "answer", "tolerance", "unit",
    "choices_en", "choices_zh", "correct", "keypoints", "source",
}
_KEYPOINT_KEYS = {"en", "zh", "synonyms_en", "synonyms_zh", "misconceptions"}
_MISCONCEPTION_KEYS = {"en", "zh", "synonyms_en", "synonyms_zh"}


class DeckError(DrillError):
    """The deck file is malformed (an author error, not a user error)."""


@dataclass(frozen=True)
class _Claim:
    """A statement in both languages, with the words that show an answer made it."""

    en: str
    zh: str
    synonyms_en: tuple[str, ...] = ()
    synonyms_zh: tuple[str, ...] = ()

    def text(self, lang: str) -> str:
        return self.zh if lang == "zh" else self.en

    @property
    def synonyms(self) -> tuple[str, ...]:
        # People mix languages when they answer, so both lists always count.
        return self.synonyms_en + self.synonyms_zh


@dataclass(frozen=True)
class Misconception(_Claim):
    """A wrong claim that contradicts a key point, with the words that state it.

    Its own text sets the polarity each synonym needs, as a key point's does: for "the
    backward does not recompute" the word "recompute" states it only when negated.
    """


@dataclass(frozen=True)
class KeyPoint(_Claim):
    """One thing a good spoken answer mentions, with the words that show it was said."""

    misconceptions: tuple[Misconception, ...] = ()  # wrong claims that contradict this point


@dataclass(frozen=True)
class Card:
    id: str
    tags: tuple[str, ...]
    kind: str
    q_en: str
    q_zh: str
    a_en: str
    a_zh: str
    answer: float | None = None
    tolerance: float = 0.0
    unit: str = ""
    choices_en: tuple[str, ...] = ()
    choices_zh: tuple[str, ...] = ()
    correct: int | None = None  # 0-based index into the choices
    keypoints: tuple[KeyPoint, ...] = ()
    source: str = ""  # paper and section/figure/equation, or "measured: BENCHMARKS.md <table>"

    def question(self, lang: str) -> str:
        return self.q_zh if lang == "zh" else self.q_en

    def answer_text(self, lang: str) -> str:
        return self.a_zh if lang == "zh" else self.a_en

    def choices(self, lang: str) -> tuple[str, ...]:
        return self.choices_zh if lang == "zh" else self.choices_en

    def accepts(self, value: float) -> bool:
        """A numeric answer is right within the card's relative tolerance."""
        if self.answer is None:
            raise ValueError(f"card {self.id} has no numeric answer to check a value against")
        return abs(value - self.answer) <= self.tolerance * abs(self.answer) + 1e-9

    def reciprocal_of(self, text: str) -> bool:
        """The user typed 1/answer (a ratio the wrong way round, '1/9' for a 9× factor)."""
        from drill.numparse import parse

        value = parse(text)
        return bool(value) and self.answer != 0 and abs(1 / value - self.answer) <= 0.06 * abs(self.answer)

    def accepts_text(self, text: str) -> bool:
        """What the user typed is right: within tolerance, or the answer correctly rounded.

        A plain decimal counts when it is the card's answer rounded to the places the user
        wrote, with at least 3 significant figures (1.14 for 1.1353) or to whole units of a
        number of 10 or more (79 for 78.6). Cards with tolerance 0 are exact counts and stay exact.
        """
        from drill.numparse import parse, plain_decimal

        value = parse(text)
        if value is None:
            return False
        if self.accepts(value):
            return True
        literal = plain_decimal(text)
        if self.tolerance == 0 or literal is None:
            return False
        decimals = len(literal.partition(".")[2])
        significant = len(literal.replace("-", "").replace(".", "").lstrip("0"))
        enough = significant >= 3 or (decimals == 0 and abs(self.answer) >= 10)
        return enough and abs(round(self.answer, decimals) - value) <= 10 ** -(decimals + 6)


@dataclass(frozen=True)
class Deck:
    topic: str
    cards: tuple[Card, ...]


def parse_number(text: str) -> float | None:
    """The value of the whole answer ('≈ 1.135', 'e^-2+1', '2^24', '228 KB'); None if it is not one number."""
    from drill.numparse import parse

    return parse(text)


def deck_topics() -> list[str]:
    root = paths.exercises_root()
    return sorted(p.parent.name for p in root.glob("*/cards.toml"))


@lru_cache(maxsize=None)
def load_deck(topic: str) -> Deck:
    path = paths.exercises_root() / topic / "cards.toml"
    if not path.is_file():
        raise KeyError(topic)
    return parse_deck(path.read_text(encoding="utf-8"), topic)


def all_cards() -> list[Card]:
    """Every card of every topic (ids are unique across decks: they key one review table)."""
    cards = [card for topic in deck_topics() for card in load_deck(topic).cards]
    ids = [card.id for card in cards]
    duplicates = sorted({i for i in ids if ids.count(i) > 1})
    if duplicates:
        raise DeckError(f"card ids used in more than one deck: {duplicates}")
    return cards


def parse_deck(text: str, topic: str) -> Deck:
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise DeckError(f"deck {topic}: {exc}") from exc
    _reject_unknown(data, _DECK_KEYS, f"deck {topic}")
    if data.get("format") != DECK_FORMAT:
        raise DeckError(f"deck {topic}: format must be {DECK_FORMAT}, got {data.get('format')!r}")
    cards = tuple(_parse_card(raw, topic) for raw in data.get("card", []))
    ids = [card.id for card in cards]
    duplicates = sorted({i for i in ids if ids.count(i) > 1})
    if duplicates:
        raise DeckError(f"deck {topic}: duplicate card ids {duplicates}")
    return Deck(topic=topic, cards=cards)


def _parse_card(raw: dict, topic: str) -> Card:
    where = f"deck {topic}, card {raw.get('id', '?')}"
    _reject_unknown(raw, _CARD_KEYS, where)
    card_id = raw.get("id")
    if not isinstance(card_id, str) or not SLUG.match(card_id):
        raise DeckError(f"{where}: id must be a lowercase slug like 'online-update-rule'")
    for key in ("q_en", "q_zh", "a_en", "a_zh", "source"):
        if not isinstance(raw.get(key), str) or not raw[key].strip():
            raise DeckError(f"{where}: {key} must be non-empty text")
    tags = raw.get("tags")
    if not tags or not all(isinstance(tag, str) and SLUG.match(tag) for tag in tags):
        raise DeckError(f"{where}: tags must be a non-empty list of slugs")
    kind = raw.get("kind")
    if kind not in KINDS:
        raise DeckError(f"{where}: kind must be one of {KINDS}, got {kind!r}")
    card = Card(
        id=card_id,
        tags=tuple(tags),
        kind=kind,
        q_en=raw["q_en"].strip(),
        q_zh=raw["q_zh"].strip(),
        a_en=raw["a_en"].strip(),
        a_zh=raw["a_zh"].strip(),
        answer=raw.get("answer"),
        tolerance=float(raw.get("tolerance", 0.0)),
        unit=raw.get("unit", ""),
        choices_en=tuple(raw.get("choices_en", ())),
        choices_zh=tuple(raw.get("choices_zh", ())),
        correct=raw.get("correct"),
        keypoints=tuple(_parse_keypoint(kp, where) for kp in raw.get("keypoints", ())),
        source=raw["source"].strip(),
    )
    _check_kind_fields(card, raw, where)
    return card


def _check_kind_fields(card: Card, raw: dict, where: str) -> None:
    numeric_keys = {"answer", "tolerance", "unit"} & raw.keys()
    choice_keys = {"choices_en", "choices_zh", "correct"} & raw.keys()
    if card.kind == "numeric":
        if isinstance(card.answer, bool) or not isinstance(card.answer, (int, float)):
            raise DeckError(f"{where}: a numeric card needs a number `answer`")
        if card.tolerance < 0:
            raise DeckError(f"{where}: tolerance is relative and must be >= 0")
    elif numeric_keys:
        raise DeckError(f"{where}: {sorted(numeric_keys)} only belong on numeric cards")
    if card.kind == "choice":
        if len(card.choices_en) < 2 or len(card.choices_en) != len(card.choices_zh):
            raise DeckError(f"{where}: choices_en and choices_zh need the same 2+ options")
        if not isinstance(card.correct, int) or not 0 <= card.correct < len(card.choices_en):
            raise DeckError(f"{where}: correct must index the choices (0-based)")
    elif choice_keys:
        raise DeckError(f"{where}: {sorted(choice_keys)} only belong on choice cards")


def _parse_keypoint(raw: dict, where: str) -> KeyPoint:
    _reject_unknown(raw, _KEYPOINT_KEYS, f"{where}, key point")
    if not raw.get("en") or not raw.get("zh"):
        raise DeckError(f"{where}: every key point needs en and zh text")
    synonyms = tuple(raw.get("synonyms_en", ())) + tuple(raw.get("synonyms_zh", ()))
    if not synonyms:
        raise DeckError(f"{where}: key point {raw['en']!r} has no synonyms to match")
    return KeyPoint(
        en=raw["en"],
        zh=raw["zh"],
        synonyms_en=tuple(raw.get("synonyms_en", ())),
        synonyms_zh=tuple(raw.get("synonyms_zh", ())),
        misconceptions=tuple(_parse_misconception(m, f"{where}, key point {raw['en']!r}")
                             for m in raw.get("misconceptions", ())),
    )


def _parse_misconception(raw: dict, where: str) -> Misconception:
    _reject_unknown(raw, _MISCONCEPTION_KEYS, f"{where}, misconception")
    if not raw.get("en") or not raw.get("zh"):
        raise DeckError(f"{where}: every misconception needs en and zh text")
    if not raw.get("synonyms_en") and not raw.get("synonyms_zh"):
        raise DeckError(f"{where}: misconception {raw['en']!r} has no synonyms to match")
    return Misconception(en=raw["en"], zh=raw["zh"], synonyms_en=tuple(raw.get("synonyms_en", ())),
                         synonyms_zh=tuple(raw.get("synonyms_zh", ())))


def _reject_unknown(table: dict, allowed: set[str], where: str) -> None:
    unknown = set(table) - allowed
    if unknown:
        raise DeckError(f"{where}: unknown keys {sorted(unknown)}")
