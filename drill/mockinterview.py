"""Mock interview: pick a main question, grade an answer by its key points, keep the result.

Grading is deliberately simple and offline: a key point counts as covered when
the answer contains one of its synonyms (English or Chinese, whatever language
the answer is in). Text is normalised first so that spacing, hyphens, case and
typographic variants (s², s^2, B_r×B_c, Br x Bc) do not decide the score.
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass

from drill.cards import Card, KeyPoint
from drill.store import Store

MAIN_TAG = "main"

# Characters that vary between writers but mean the same thing.
_FOLD = str.maketrans({"×": "x", "*": "x", "−": "-", "–": "-", "—": "-", "’": "'", "‘": "'"})
_DROP = {" ", "\t", "\n", "\r", "-", "_", "\u3000"}


def normalise(text: str) -> str:
    """Lower-case, NFKC (², ᵢ and full-width forms become plain), no spaces/hyphens/underscores."""
    folded = unicodedata.normalize("NFKC", text).casefold().translate(_FOLD)
    return "".join(ch for ch in folded if ch not in _DROP)


def covers(point: KeyPoint, answer: str) -> bool:
    said = normalise(answer)
    return any(normalise(synonym) and normalise(synonym) in said for synonym in point.synonyms)


@dataclass(frozen=True)
class Coverage:
    card_id: str
    covered: tuple[bool, ...]

    @property
    def count(self) -> int:
        return sum(self.covered)

    @property
    def score(self) -> float:
        return self.count / len(self.covered) if self.covered else 0.0


def grade(card: Card, answer: str) -> Coverage:
    return Coverage(card.id, tuple(covers(point, answer) for point in card.keypoints))


def main_questions(cards: list[Card] | tuple[Card, ...]) -> list[Card]:
    return [card for card in cards if MAIN_TAG in card.tags and card.keypoints]


def find_question(questions: list[Card], name: str) -> Card | None:
    """By id, or by the id without its 'main-' prefix (`--question online-softmax`)."""
    return next((q for q in questions if name in (q.id, q.id.removeprefix(f"{MAIN_TAG}-"))), None)


def least_recently_practised(store: Store, topic: str, questions: list[Card]) -> Card:
    """Never-practised questions first (deck order), then the one practised longest ago."""
    last = store.mock_order(topic)
    return min(questions, key=lambda q: (last.get(q.id, -1), questions.index(q)))


def record(store: Store, topic: str, card: Card, seconds: float, answer: str, coverage: Coverage) -> None:
    covered = [{"en": point.en, "covered": hit} for point, hit in zip(card.keypoints, coverage.covered)]
    store.record_mock(topic, card.id, seconds, answer, covered, coverage.score)
