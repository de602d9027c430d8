"""Mock interview: pick a main question, grade an answer by its key points, keep the result.

Grading is offline and deliberately explainable: drill/keypoints.py decides whether the
answer makes each key point (whole words after stemming, normalised formulas, Chinese
phrases as substrings, in sentences rather than a keyword list), each with the polarity the
key point gives it, so a negated or contradicted claim earns nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from drill import keypoints
from drill.cards import Card, KeyPoint, Misconception
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
    # (key point index, misconception) for each wrong claim the answer makes
    misconceptions: tuple[tuple[int, Misconception], ...] = ()

    @property
    def count(self) -> int:
        return sum(self.covered)

    @property
    def score(self) -> float:
        return self.count / len(self.covered) if self.covered else 0.0


def states(misconception: Misconception, answer: str | keypoints.Analysis) -> bool:
    """The answer makes this wrong claim, said the way the misconception says it.

    A misconception is often a denial ("no rescaling is needed"); a synonym its own text does
    not contain is denied too when every synonym the text does contain is ("correction" like
    "rescaling"), and is a plain mention otherwise.
    """
    if isinstance(answer, str):
        answer = keypoints.analyse(answer)
    found = [keypoints.claim_polarity(s, misconception.en, misconception.zh) for s in misconception.synonyms]
    known = [polarity for polarity in found if polarity is not None]
    default = bool(known) and all(known)  # a mixed claim ("does not recompute: stores P") leaves the rest plain
    return any(keypoints.says(s, answer, default if polarity is None else polarity)
               for s, polarity in zip(misconception.synonyms, found))


def grade(card: Card, answer: str) -> Coverage:
    """Each key point is credited when the answer makes its claim in a clause that is neither
    negated (keypoints.matches) nor one where the answer states a misconception, and when no
    misconception of that point is stated anywhere in the answer (a contradicted claim earns
    nothing). Stated misconceptions are returned for the feedback."""
    analysis = keypoints.analyse(answer)
    synonyms = tuple(synonym for point in card.keypoints for synonym in point.synonyms)
    if keypoints.is_keyword_list(answer, analysis, synonyms):
        return Coverage(card.id, (False,) * len(card.keypoints), keyword_list=True)
    stated = tuple((index, wrong) for index, point in enumerate(card.keypoints)
                   for wrong in point.misconceptions if states(wrong, analysis))
    if not stated:
        return Coverage(card.id, tuple(covers(point, analysis) for point in card.keypoints))
    wrongs = [wrong for _, wrong in stated]

    def wrong_here(clause: str) -> bool:
        part = replace(keypoints.analyse(clause), prose=True)  # judged as prose with the whole answer
        return any(states(wrong, part) for wrong in wrongs)

    kept = replace(keypoints.analyse(keypoints.without_clauses(answer, wrong_here)), prose=analysis.prose)
    contradicted = {index for index, _ in stated}
    covered = tuple(index not in contradicted and covers(point, kept) for index, point in enumerate(card.keypoints))
    return Coverage(card.id, covered, misconceptions=stated)


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
    covered = [{"en": point.en, "covered": hit,
                "misconceptions": [m.en for i, m in coverage.misconceptions if card.keypoints[i] is point]}
               for point, hit in zip(card.keypoints, coverage.covered)]
    store.record_mock(topic, card.id, seconds, answer, covered, coverage.score)
