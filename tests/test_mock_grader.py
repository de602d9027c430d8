"""The mock grader measured on a labelled set: precision and recall per key point.

tests/mock_answers.toml holds answers to every main question (correct paraphrases,
partial and wrong answers, bare keyword lists; English and Chinese), each labelled
with the key points a human examiner would tick. `python tests/test_mock_grader.py`
prints the table.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from drill import cards, mockinterview
from drill.tomlfile import tomllib

TARGET = 0.9
KINDS = {"correct", "partial", "wrong", "salad"}
DECK = cards.load_deck("flashattention")
QUESTIONS = {card.id: card for card in mockinterview.main_questions(DECK.cards)}


def labelled() -> list[dict]:
    return tomllib.loads((Path(__file__).parent / "mock_answers.toml").read_text(encoding="utf-8"))["answer"]


def confusion() -> dict[tuple[str, int], Counter]:
    counts: dict[tuple[str, int], Counter] = {}
    for answer in labelled():
        card = QUESTIONS[answer["question"]]
        coverage = mockinterview.grade(card, answer["text"])
        for index, hit in enumerate(coverage.covered):
            truth = index in answer["covers"]
            key = "tp" if hit and truth else "fp" if hit else "fn" if truth else "tn"
            counts.setdefault((card.id, index), Counter())[key] += 1
    return counts


def scores(count: Counter) -> tuple[float, float]:
    precision = count["tp"] / (count["tp"] + count["fp"]) if count["tp"] + count["fp"] else 1.0
    recall = count["tp"] / (count["tp"] + count["fn"]) if count["tp"] + count["fn"] else 1.0
    return precision, recall


def test_the_labelled_set_is_well_formed():
    answers = labelled()
    for answer in answers:
        card = QUESTIONS[answer["question"]]
        assert answer["kind"] in KINDS and answer["lang"] in cards.LANGS
        assert all(0 <= i < len(card.keypoints) for i in answer["covers"]), answer["text"][:40]
        if answer["kind"] in ("wrong", "salad"):
            assert answer["covers"] == []
        if answer["kind"] == "correct":
            assert sorted(answer["covers"]) == list(range(len(card.keypoints)))
    for question in QUESTIONS:
        have = {(a["kind"], a["lang"]) for a in answers if a["question"] == question}
        assert have == {(kind, lang) for kind in KINDS for lang in cards.LANGS}, question
    # Every key point is ticked by several answers, so its recall means something.
    counts = confusion()
    for key, count in counts.items():
        assert count["tp"] + count["fn"] >= 4, key


def test_precision_and_recall_per_key_point():
    failing = []
    for (card_id, index), count in confusion().items():
        precision, recall = scores(count)
        if precision < TARGET or recall < TARGET:
            failing.append(f"{card_id}[{index}] {QUESTIONS[card_id].keypoints[index].en!r}: "
                           f"precision {precision:.2f}, recall {recall:.2f}, {dict(count)}")
    assert not failing, "\n".join(failing)


@pytest.mark.parametrize("kind", ["salad", "wrong"])
def test_keyword_lists_and_wrong_answers_score_nothing(kind):
    for answer in labelled():
        if answer["kind"] == kind:
            coverage = mockinterview.grade(QUESTIONS[answer["question"]], answer["text"])
            assert coverage.count == 0, (answer["text"][:60], coverage.covered)
            assert coverage.keyword_list is (kind == "salad")


if __name__ == "__main__":
    for (card_id, index), count in sorted(confusion().items()):
        precision, recall = scores(count)
        print(f"{precision:5.2f} {recall:5.2f}  {card_id}[{index}] {QUESTIONS[card_id].keypoints[index].en}")
