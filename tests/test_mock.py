"""Key-point grading and scripted `drill mock` sessions in English and Chinese."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from drill import cards, mockinterview
from drill.cli import cli
from drill.mathtext import render
from drill.store import Store

DECK = cards.load_deck("flashattention")
CARD = {card.id: card for card in DECK.cards}
QUESTIONS = mockinterview.main_questions(DECK.cards)
ONLINE = CARD["main-online-softmax"]
RUNNING_MAX, RUNNING_SUM, RESCALE = 0, 1, 2  # key point order in the deck


def mock(*args: str, input: str = ""):
    return CliRunner().invoke(cli, ["mock", *args], input=input, catch_exceptions=False)


def mocks_rows() -> list:
    with Store() as store:
        return [dict(row) for row in store.conn.execute("SELECT * FROM mocks ORDER BY id")]


# -- grading -------------------------------------------------------------------

def test_words_match_on_boundaries_after_stemming():
    from drill.keypoints import matches

    assert not matches(("ring",), "The softmax is updated during every step of the loop.")
    assert matches(("ring",), "The devices form a ring and pass blocks along it.")
    assert matches(("rescale",), "When the max grows we keep rescaling the partial sums.")
    assert matches(("rescaling",), "It rescales the old sum by a factor.")
    assert matches(("materialize",), "Standard attention materialises the whole matrix in memory.")
    assert matches(("running max",), "We keep a Running-Max for each row of the output.")
    assert not matches(("tile",), "The kernel is subtle and it works on the rows.")


def test_formulas_are_normalised():
    from drill.keypoints import formula_form

    assert formula_form("N×N") == formula_form("s x s") == formula_form("S × S")
    assert formula_form("s²") == formula_form("s^2") == formula_form("s**2") == formula_form("N^2")
    assert formula_form("O(N)") == formula_form("O(s)") == formula_form("Θ(s)")
    assert formula_form("Θ(N²d²M⁻¹)") == formula_form("O(s^2 d^2 / M)") == formula_form("O(s²·d²/M)")
    assert formula_form("log(e^{L1}+e^{L2})") == formula_form("log(exp(L_1) + exp(L_2))")
    assert formula_form("[B_r, d]") == formula_form("[Br, d]")
    assert (formula_form("L1 + softplus(L2 - L1)") == formula_form("L_1 + log(1 + e^{L_2 - L_1})")
            == formula_form("L1 + log1p(exp(L2 - L1))"))


def test_negation_cancels_a_word_unless_the_point_is_a_negation():
    explain = CARD["main-explain-flashattention"]
    exact = explain.keypoints[5]
    assert not mockinterview.covers(exact, "The result is not exact, it is only an approximation of the softmax.")
    assert mockinterview.covers(exact, "The result is exact, there is no approximation at all.")
    overflow = ONLINE.keypoints[4]
    assert mockinterview.covers(overflow, "Since the factor is at most one, nothing can overflow here.")


def test_chinese_phrases_match_as_substrings():
    coverage = mockinterview.grade(ONLINE, "每行记住目前最大的值,新块来了就把旧的结果校正一下。")
    assert coverage.covered[RUNNING_MAX] and coverage.covered[RESCALE]


def test_a_keyword_list_scores_nothing():
    salad = "running max, running sum, rescale, exp(m_old - m_new), exact, overflow"
    coverage = mockinterview.grade(ONLINE, salad)
    assert coverage.count == 0 and coverage.keyword_list
    for joined in ("It is running max and running sum and rescale and exact and it does not overflow.",
                   "就是 running max 和 running sum 和校正和分母和精确和溢出。"):
        coverage = mockinterview.grade(ONLINE, joined)  # connectives alone do not make an explanation
        assert coverage.count == 0 and coverage.keyword_list, joined
    assert mockinterview.grade(ONLINE, "I keep a running max.").covered[RUNNING_MAX]  # short, not a list
    prose = ("We keep a running max and a running sum, rescale them by exp(m_old - m_new) when the max "
             "grows, and the result is exact with nothing that can overflow.")
    assert mockinterview.grade(ONLINE, prose).count == len(ONLINE.keypoints)


def test_running_max_and_rescale_cover_those_points():
    coverage = mockinterview.grade(ONLINE, "Keep a running max per row; when it grows, rescale what you have.")
    assert coverage.covered[RUNNING_MAX] and coverage.covered[RESCALE]
    assert not coverage.covered[RUNNING_SUM]
    assert coverage.score == pytest.approx(2 / len(ONLINE.keypoints))


def test_chinese_answer_is_graded_too():
    coverage = mockinterview.grade(ONLINE, "每行记住当前最大值,新块让最大值变大时把旧的结果校正一下。")
    assert coverage.covered[RUNNING_MAX] and coverage.covered[RESCALE]


def test_empty_answer_covers_nothing():
    for card in QUESTIONS:
        coverage = mockinterview.grade(card, "")
        assert coverage.count == 0 and coverage.score == 0.0


@pytest.mark.parametrize("card", QUESTIONS, ids=lambda card: card.id)
@pytest.mark.parametrize("lang", ["en", "zh"])
def test_model_answers_cover_all_their_key_points(card, lang):
    # If the model answer misses a point, either the answer or the synonyms are wrong.
    coverage = mockinterview.grade(card, render(card.answer_text(lang)))
    missed = [point.en for point, hit in zip(card.keypoints, coverage.covered) if not hit]
    assert not missed


def test_four_main_questions():
    assert {card.id for card in QUESTIONS} == {
        "main-explain-flashattention", "main-online-softmax", "main-why-faster", "main-ring-lse-merge"}
    assert mockinterview.find_question(QUESTIONS, "online-softmax") is ONLINE
    assert mockinterview.find_question(QUESTIONS, "main-online-softmax") is ONLINE


# -- scripted sessions through the CLI -----------------------------------------

def test_mock_in_english_marks_covered_points():
    answer = "I keep a running max for each row,\nand rescale the partial sums when it grows.\n\nnot read\n"
    result = mock("flashattention", "--question", "online-softmax", input=answer)
    assert result.exit_code == 0, result.output
    assert ONLINE.q_en in result.output
    assert "✓ " + ONLINE.keypoints[RUNNING_MAX].en in result.output
    assert "✓ " + ONLINE.keypoints[RESCALE].en in result.output
    assert "✗ " + ONLINE.keypoints[RUNNING_SUM].en in result.output
    assert f"Covered 2 of {len(ONLINE.keypoints)} key points" in result.output
    [row] = mocks_rows()
    assert row["topic"] == "flashattention" and row["question"] == ONLINE.id
    assert row["answer"] == "I keep a running max for each row,\nand rescale the partial sums when it grows."
    assert row["score"] == pytest.approx(2 / len(ONLINE.keypoints))
    covered = json.loads(row["covered_json"])
    assert [point["covered"] for point in covered][:3] == [True, False, True]


def test_mock_in_chinese():
    result = mock("flashattention", "--question", "main-online-softmax", "--lang", "zh",
                  input="维护 running max,最大值变大时校正之前的累加和。\n")
    assert result.exit_code == 0, result.output
    assert ONLINE.q_zh in result.output
    assert "✓ " + ONLINE.keypoints[RUNNING_MAX].zh in result.output
    assert "✓ " + ONLINE.keypoints[RESCALE].zh in result.output
    assert "30 秒参考回答" in result.output
    assert mocks_rows()[0]["score"] > 0


def test_keyword_list_is_told_so():
    result = mock("flashattention", "--question", "online-softmax",
                  input="running max, running sum, rescale, exact, overflow\n")
    assert result.exit_code == 0, result.output
    assert "list of terms" in result.output and "Covered 0 of" in result.output


def test_empty_answer_scores_zero_and_is_recorded():
    result = mock("flashattention", "--question", "why-faster", input="")
    assert result.exit_code == 0
    assert "No answer was given." in result.output
    assert "✓" not in result.output
    assert mocks_rows()[0]["score"] == 0.0


def test_least_recently_practised_question_comes_next():
    seen = []
    for _ in range(len(QUESTIONS) + 1):
        assert mock("flashattention", input="").exit_code == 0
        seen.append(mocks_rows()[-1]["question"])
    assert seen[:-1] == [card.id for card in QUESTIONS]  # each once, in deck order
    assert seen[-1] == QUESTIONS[0].id  # then the one practised longest ago
    mock("flashattention", "--question", "ring-lse-merge", input="")
    mock("flashattention", input="")
    assert mocks_rows()[-1]["question"] == QUESTIONS[1].id


def test_unknown_topic_and_question_exit_2():
    result = mock("nosuchtopic")
    assert result.exit_code == 2
    assert len(result.stderr.strip().splitlines()) == 1 and "flashattention" in result.stderr
    result = mock("flashattention", "--question", "nope")
    assert result.exit_code == 2 and "main-online-softmax" in result.stderr
    assert mocks_rows() == []


def test_countdown_typing_keys():
    from drill.commands.mock import _apply_keys

    assert _apply_keys("", "abc") == ("abc", False)
    assert _apply_keys("abc", "\x7f") == ("ab", False)
    assert _apply_keys("ab", "\r") == ("ab\n", False)
    assert _apply_keys("ab\n", "\r") == ("ab\n", True)  # Enter on an empty line hands in
    assert _apply_keys("中文", "\x04") == ("中文", True)
