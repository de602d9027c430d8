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



# Confidently wrong answers in the right vocabulary, and negated ones: an interviewer gives
# them nothing, so the grader must too. Written as an interviewer would hear them, not from
# the synonym lists.
CONFIDENTLY_WRONG = [
    ("main-explain-flashattention", "In the backward pass FlashAttention does not recompute anything; it stores "
     "the whole attention matrix P in HBM and reads it back, so the saved logsumexp is irrelevant."),
    ("main-explain-flashattention", "The backward pass avoids recomputation: the kernel keeps P from the forward "
     "pass instead of recomputing it from the logsumexp."),
    ("main-explain-flashattention", "backward 的时候不需要重算,直接把 forward 的 P 存下来再读回来就行,logsumexp 用不着。"),
    ("main-online-softmax", "You do not keep a running max at all; you just add up the exponentials as they come, "
     "and since each exp is small it never needs any rescaling, so the result can overflow for large logits."),
    ("main-online-softmax", "Online softmax is an approximation: it sums the exponentials of each block and "
     "averages the blocks, which is not the same as the exact softmax, rather than rescaling the old sum."),
    ("main-online-softmax", "It overflows easily because the factor is larger than one; the result is not exact."),
    ("main-why-faster", "It is faster because it does fewer FLOPs than standard attention; attention is not "
     "memory-bound at all, it is compute-bound, and bandwidth is irrelevant here."),
    ("main-why-faster", "FlashAttention 更快是因为它减少了 FLOPs,attention 根本不是 memory-bound,带宽无关紧要,它也不需要重算。"),
    ("main-ring-lse-merge", "You simply average the two outputs, O = (O1 + O2) / 2, without any logsumexp, since "
     "the weights do not matter, and the devices do not pass shards in a ring but all-gather everything."),
]
# Correct answers full of negations: each must keep the points it makes.
NEGATION_HEAVY = [
    ("main-online-softmax", "Keep a running max of the logits seen so far and a running sum of exponentials. When "
     "a new block raises the max, multiply the sum by exp(m_old - m_new), which is at most 1, so nothing overflows "
     "and nothing is lost. Divide at the end; the result is exact, not an approximation.", {0, 1, 2, 3, 4}),
    ("main-explain-flashattention", "The score tiles never go to HBM; they are never written out and exist only in "
     "SRAM on the chip. In the backward it does not store P but recomputes it from the saved logsumexp.", {1, 2, 6}),
    ("main-why-faster", "It is not about FLOPs: FlashAttention does more FLOPs, because the backward recomputes, yet "
     "it is faster since attention is memory-bound and S and P never go to HBM, so far fewer HBM reads and writes.",
     {0, 1, 3}),
]


@pytest.mark.parametrize("question, text", CONFIDENTLY_WRONG, ids=lambda x: x[:24] if isinstance(x, str) else x)
def test_confidently_wrong_answers_earn_nothing(question, text):
    coverage = mockinterview.grade(QUESTIONS[question], text)
    assert coverage.score <= 0.2 and coverage.count == 0, (text[:60], coverage.covered)


@pytest.mark.parametrize("question, text, points", NEGATION_HEAVY, ids=lambda x: x[:24] if isinstance(x, str) else "")
def test_negations_in_correct_answers_keep_their_points(question, text, points):
    coverage = mockinterview.grade(QUESTIONS[question], text)
    assert {i for i, hit in enumerate(coverage.covered) if hit} == points


@pytest.mark.parametrize("synonym, claim, answer, credited", [
    ("recompute", "Backward recomputes S and P", "In the backward it recomputes each block of S.", True),
    ("recompute", "Backward recomputes S and P", "In the backward it does NOT recompute any block of S.", False),
    ("recompute", "Backward recomputes S and P", "It stores P instead of recomputing it in the backward.", False),
    ("recompute", "Backward recomputes S and P", "It keeps P rather than recompute it for the backward.", False),
    ("recompute", "Backward recomputes S and P", "For the backward, recomputation is irrelevant here.", False),
    ("recompute", "Backward recomputes S and P", "For the backward, recomputation is not needed at all.", False),
    ("recompute", "Backward recomputes S and P", "It does not store P, and it recomputes the blocks.", True),
    ("recompute", "Backward recomputes S and P", "It not only saves memory but also recomputes P.", True),
    ("overflow", "The factor is at most 1, so nothing overflows", "The factor is at most one, so nothing overflows.", True),
    ("overflow", "The factor is at most 1, so nothing overflows", "The factor is big, so the sum overflows.", False),
    ("never written", "HBM never sees them", "The tiles are never written to HBM at all.", True),
    ("never written", "HBM never sees them", "It is not true that tiles are never written to HBM.", False),
    ("log(e^l1+e^l2)", "Combined L = log(e^L1 + e^L2)", "The merged L is log(e^L1 + e^L2) for the row.", True),
    ("log(e^l1+e^l2)", "Combined L = log(e^L1 + e^L2)", "The merged L is not log(e^L1 + e^L2) for the row.", False),
    ("重算", "backward 用保存的 logsumexp 按块重算 S 和 P", "backward 的时候按块重算 S 和 P。", True),
    ("重算", "backward 用保存的 logsumexp 按块重算 S 和 P", "backward 的时候不用重算,直接读存好的 P。", False),
    ("重算", "backward 用保存的 logsumexp 按块重算 S 和 P", "backward 时重算是不需要的,P 已经存好了。", False),
    ("重算", "backward 用保存的 logsumexp 按块重算 S 和 P", "backward 不存 P,而是按块重算出来。", True),
    ("溢出", "因子 ≤ 1,所以不会溢出", "因子不超过 1,所以不会溢出。", True),
    ("溢出", "因子 ≤ 1,所以不会溢出", "因子很大,所以累加和会溢出。", False),
])
def test_negation_is_found_by_scope(synonym, claim, answer, credited):
    from drill import keypoints

    zh = any("\u4e00" <= ch <= "\u9fff" for ch in claim)
    assert keypoints.matches((synonym,), answer, "" if zh else claim, claim if zh else "") is credited

if __name__ == "__main__":
    for (card_id, index), count in sorted(confusion().items()):
        precision, recall = scores(count)
        print(f"{precision:5.2f} {recall:5.2f}  {card_id}[{index}] {QUESTIONS[card_id].keypoints[index].en}")
