"""The mock grader on the held-out set: answers written before the grader's misconception and
clause changes and never used to tune it (tests/mock_heldout.toml). The figures that count.

`python tests/test_mock_heldout.py` prints precision, recall and the worst score of a
confidently wrong answer, for this set and for the tuning set (tests/mock_answers.toml).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from drill import cards, mockinterview
from drill.tomlfile import tomllib

HERE = Path(__file__).parent
KINDS = {"correct", "partial", "wrong", "negated", "negheavy", "salad"}
CREDITS_NOTHING = {"wrong", "negated", "salad"}
QUESTIONS = {card.id: card for card in mockinterview.main_questions(cards.load_deck("flashattention").cards)}


def answers(name: str = "mock_heldout.toml") -> list[dict]:
    return tomllib.loads((HERE / name).read_text(encoding="utf-8"))["answer"]


def measure(items: list[dict]) -> dict:
    """Micro-averaged precision and recall over (answer, key point) decisions, and the worst
    score an answer that deserves nothing gets."""
    count, worst = Counter(), {}
    for item in items:
        coverage = mockinterview.grade(QUESTIONS[item["question"]], item["text"])
        for index, hit in enumerate(coverage.covered):
            truth = index in item["covers"]
            count["tp" if hit and truth else "fp" if hit else "fn" if truth else "tn"] += 1
        if item["kind"] in CREDITS_NOTHING:
            worst[item["kind"]] = max(worst.get(item["kind"], 0.0), coverage.score)
    precision = count["tp"] / max(1, count["tp"] + count["fp"])
    recall = count["tp"] / max(1, count["tp"] + count["fn"])
    return {"precision": precision, "recall": recall, "worst": worst, "n": len(items),
            **{key: count[key] for key in ("tp", "fp", "fn", "tn")}}


def test_the_held_out_set_is_well_formed():
    items = answers()
    assert len(items) >= 40
    assert {item["kind"] for item in items} == KINDS
    assert {item["lang"] for item in items} == set(cards.LANGS)
    for item in items:
        card = QUESTIONS[item["question"]]
        assert item["kind"] in KINDS and item["lang"] in cards.LANGS
        assert all(0 <= i < len(card.keypoints) for i in item["covers"]), item["text"][:40]
        if item["kind"] in CREDITS_NOTHING:
            assert item["covers"] == [], item["text"][:40]
    for question in QUESTIONS:
        kinds = {item["kind"] for item in items if item["question"] == question}
        assert {"correct", "partial", "wrong", "negated", "negheavy", "salad"} <= kinds, question


def test_precision_and_recall_on_the_held_out_set():
    figures = measure(answers())
    assert figures["precision"] >= 0.9 and figures["recall"] >= 0.9, figures


@pytest.mark.parametrize("item", [a for a in answers() if a["kind"] in CREDITS_NOTHING],
                         ids=lambda a: f"{a['question'][5:]}-{a['kind']}-{a['lang']}")
def test_answers_that_deserve_nothing_score_at_most_a_fifth(item):
    coverage = mockinterview.grade(QUESTIONS[item["question"]], item["text"])
    assert coverage.score <= 0.2, (item["text"][:60], coverage.covered)


if __name__ == "__main__":
    for name in ("mock_heldout.toml", "mock_answers.toml"):
        f = measure(answers(name))
        print(f"{name}: {f['n']} answers, precision {f['precision']:.3f}, recall {f['recall']:.3f}, "
              f"tp {f['tp']} fp {f['fp']} fn {f['fn']} tn {f['tn']}, worst score {f['worst']}")
