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


HELD_OUT = ("mock_heldout.toml", "mock_heldout_fresh.toml")


@pytest.mark.parametrize("name", HELD_OUT)
def test_precision_and_recall_on_the_held_out_sets(name):
    figures = measure(answers(name))
    assert figures["precision"] >= 0.9 and figures["recall"] >= 0.9, figures


@pytest.mark.parametrize("item", [a for name in HELD_OUT for a in answers(name) if a["kind"] in CREDITS_NOTHING],
                         ids=lambda a: f"{a['question'][5:]}-{a['kind']}-{a['lang']}")
def test_answers_that_deserve_nothing_score_at_most_a_fifth(item):
    coverage = mockinterview.grade(QUESTIONS[item["question"]], item["text"])
    assert coverage.score <= 0.2, (item["text"][:60], coverage.covered)


if __name__ == "__main__":
    for name in ("mock_heldout.toml", "mock_heldout_fresh.toml", "mock_answers.toml"):
        f = measure(answers(name))
        print(f"{name}: {f['n']} answers, precision {f['precision']:.3f}, recall {f['recall']:.3f}, "
              f"tp {f['tp']} fp {f['fp']} fn {f['fn']} tn {f['tn']}, worst score {f['worst']}")


def test_a_stated_misconception_is_named_with_the_correction_and_its_source():
    card = QUESTIONS["main-why-faster"]
    coverage = mockinterview.grade(card, "It is faster because it does fewer FLOPs than standard attention, "
                                         "and attention is compute-bound anyway.")
    named = {m.en for _, m in coverage.misconceptions}
    assert "FlashAttention is faster because it does fewer FLOPs" in named
    assert coverage.count == 0
    # Denying the misconception states nothing wrong and keeps the point.
    fine = mockinterview.grade(card, "It does not do fewer FLOPs; it does more, because the backward recomputes the "
                                     "blocks, but attention is memory-bound, so that is cheap.")
    assert not fine.misconceptions and fine.covered[0] and fine.covered[3]


def test_every_main_question_has_misconceptions_and_the_deck_rejects_bad_ones():
    for card in QUESTIONS.values():
        assert sum(len(point.misconceptions) for point in card.keypoints) >= 2, card.id
    base = ('format = 1\n[[card]]\nid = "a"\ntags = ["t"]\nkind = "recall"\nq_en = "q"\nq_zh = "问"\na_en = "a"\n'
            'a_zh = "答"\nsource = "FlashAttention §3.1"\n[[card.keypoints]]\nen = "p"\nzh = "点"\nsynonyms_en = ["p"]\n'
            '[[card.keypoints.misconceptions]]\nen = "wrong"\nzh = "错"\n')
    assert cards.parse_deck(base + 'synonyms_en = ["wrong"]\n', "x").cards[0].keypoints[0].misconceptions[0].en == "wrong"
    with pytest.raises(cards.DeckError, match="no synonyms"):
        cards.parse_deck(base, "x")
    with pytest.raises(cards.DeckError, match="unknown keys"):
        cards.parse_deck(base + 'synonyms_en = ["wrong"]\ncolour = 1\n', "x")


def test_the_mock_feedback_prints_the_correction(tmp_path, monkeypatch):
    import subprocess
    import sys

    monkeypatch.setenv("DRILL_HOME", str(tmp_path))
    result = subprocess.run([sys.executable, "-m", "drill", "mock", "flashattention", "--question", "why-faster"],
                            input="It is faster because it does fewer FLOPs than standard attention.\n",
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "You said (in effect): FlashAttention is faster because it does fewer FLOPs" in result.stdout
    assert "In fact: Recomputation adds FLOPs" in result.stdout and "Source: FlashAttention" in result.stdout
