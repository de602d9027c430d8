"""Numeric card answers: whole expressions, not the first number; 3-significant-figure answers pass."""

from __future__ import annotations

import math

import pytest

from drill import cards, numparse

DECK = cards.load_deck("flashattention")
CARD = {card.id: card for card in DECK.cards}


@pytest.mark.parametrize("text, value", [
    ("1.1353", 1.1353), ("≈ 1.135", 1.135), ("e^-2+1", math.exp(-2) + 1), ("e^(-2) + 1", math.exp(-2) + 1),
    ("2^24", 2**24), ("1/9", 1 / 9), ("3.2e5", 3.2e5), ("3.2 × 10^5", 3.2e5), ("3.2×10⁵", 3.2e5),
    ("3.2 x 10^5", 3.2e5), ("10 ln 2", 10 * math.log(2)), ("10*ln(2)", 10 * math.log(2)),
    ("16,777,216", 16777216), ("228 KB", 228), ("9.2x", 9.2), ("549.8 TFLOP/s", 549.8), ("78.6%", 78.6),
    ("40.3/4.4", 40.3 / 4.4), ("about 5.7×", 5.7), ("约 9 倍", 9), ("3 + log1p(e^-2)", 3 + math.log1p(math.exp(-2))),
    ("-0.5", -0.5), ("4096^2*2/1e6", 4096**2 * 2 / 1e6), ("1/e", 1 / math.e),
])
def test_expressions_are_evaluated(text, value):
    assert numparse.parse(text) == pytest.approx(value, rel=1e-12)


@pytest.mark.parametrize("text", [
    "", "abc", "1.13 or 1.14", "1.1353 (m = 3)", "(1, 3)", "__import__('os').system('true')",
    "2**100000", "9**9**9", "open('x')", "1/0", "x" * 500, "[1]", "lambda: 1", "(1).real",
])
def test_non_numbers_and_unsafe_text_are_refused(text):
    assert numparse.parse(text) is None
    assert cards.parse_number(text) is None


def test_the_whole_answer_is_read_not_its_first_number():
    # The old reader took '2' out of '2^24' and '1' out of 'e^-2+1'.
    assert cards.parse_number("2^24") == 16777216
    assert CARD["online-example-first-block"].accepts_text("e^-2+1")


@pytest.mark.parametrize("card_id, typed, right", [
    ("online-example-first-block", "1.14", True),   # 1.1353 to 3 significant figures
    ("online-example-first-block", "1.13", False),
    ("online-example-second-block", "1.20", True), ("online-example-first-block", "1.1", False),
    ("attention-tflops-rate", "550", True), ("ring-merge-worked", "3.13", True), ("ring-merge-worked", "3.12", False),
    ("h200-sdpa-fraction", "62", True),              # 61.7 % rounded
    ("h200-sdpa-fraction", "610/989*100", True),
    ("h200-sdpa-fraction", "60", False),
    ("fig2-hbm-ratio", "9.16", True), ("fig2-hbm-ratio", "40.3/4.4", True),
    ("fig2-hbm-ratio", "1/9", False),                # a factor is asked, not its reciprocal
    ("score-matrix-size", "16.8 million", True),
    ("causal-skipped-blocks", "496", True), ("causal-skipped-blocks", "500", False),  # exact counts stay exact
    ("exp2-convert", "10 ln 2", True),
])
def test_numeric_cards_accept_right_answers_to_three_figures(card_id, typed, right):
    card = CARD[card_id]
    assert card.accepts_text(typed) is right
