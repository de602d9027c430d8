"""Mock interview: pick a main question, grade an answer by its key points, keep the result.

Grading is offline and deliberately explainable: drill/keypoints.py decides whether the
answer makes each key point (whole words after stemming, normalised formulas, Chinese
phrases as substrings, in sentences rather than a keyword list), each with the polarity the
key point gives it, so a negated or contradicted claim earns nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

from drill import keypoints
from drill.cards import Card, KeyPoint
from drill.store import Store

MAIN_TAG = "main"


def covers(point: KeyPoint, answer: str | keypoints.Analysis) -> bool:
    """The answer makes the point: one of its synonyms, said the way the point says it
    ("nothing overflows" for a point that claims an absence, "recomputes" not "does not recompute")."""
    return keypoints.matches(point.synonyms, answer, point.en, point.zh)


@dataclass(frozen=True)
class Coverage:
    card_id: str
    covered: tuple[bool, ...]
    keyword_list: bool = False  # the answer read as a list of terms, not an explanation

    @property
    def count(self) -> int:
        return sum(self.covered)

    @property
    def score(self) -> float:
        return self.count / len(self.covered) if self.covered else 0.0


def grade(card: Card, answer: str) -> Coverage:
    analysis = keypoints.analyse(answer)
    synonyms = tuple(synonym for point in card.keypoints for synonym in point.synonyms)
    if keypoints.is_keyword_list(answer, analysis, synonyms):
        return Coverage(card.id, (False,) * len(card.keypoints), keyword_list=True)
    return Coverage(card.id, tuple(covers(point, analysis) for point in card.keypoints))


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
