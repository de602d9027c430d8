"""Scheduling round trips through the store, and scripted `drill quiz` sessions."""

from __future__ import annotations

import subprocess
import sys
from datetime import datetime, timedelta, timezone

import fsrs
import pytest
from click.testing import CliRunner, Result

from drill import cards, reviews
from drill.cli import cli
from drill.store import Store

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=timezone.utc)
DECK = cards.load_deck("flashattention")
CARD = {card.id: card for card in DECK.cards}


@pytest.fixture
def store():
    with Store() as opened:
        yield opened


def quiz(*args: str, input: str = "") -> Result:
    return CliRunner().invoke(cli, ["quiz", *args], input=input, catch_exceptions=False)


def table_rows(store: Store) -> tuple[list, list]:
    return (
        [tuple(row) for row in store.conn.execute("SELECT * FROM cards ORDER BY card_id")],
        [tuple(row) for row in store.conn.execute("SELECT * FROM reviews ORDER BY id")],
    )


def right_answers(card: cards.Card) -> list[str]:
    """The script lines that answer a card correctly."""
    if card.kind == "recall":
        return ["", "g"]
    if card.kind == "numeric":
        return [repr(card.answer)]
    return [str(card.correct + 1)]


def wrong_answers(card: cards.Card) -> list[str]:
    if card.kind == "recall":
        return ["", "1"]
    if card.kind == "numeric":
        return [repr(card.answer * 3 + 1)]
    return [str((card.correct + 1) % len(card.choices_en) + 1)]


def tagged(tag: str) -> list[cards.Card]:
    return [card for card in DECK.cards if tag in card.tags]


# -- scheduling --------------------------------------------------------------

def test_good_moves_the_due_date_as_fsrs_says(store):
    reviews.review(store, "online-update-rule", 3, now=NOW)
    expected, _ = fsrs.Scheduler(enable_fuzzing=False).review_card(
        fsrs.Card(card_id=reviews.fsrs_id("online-update-rule"), due=NOW), fsrs.Rating.Good, NOW)
    due = reviews.due_times(store)["online-update-rule"]
    assert due == expected.due > NOW
    # The stored state round-trips into the same FSRS card.
    assert reviews.load_state(store, "online-update-rule").to_dict() == expected.to_dict()


def test_review_log_is_kept(store):
    reviews.review(store, "tile-shapes", 4, now=NOW)
    row = store.conn.execute("SELECT * FROM reviews").fetchone()
    assert (row["card_id"], row["rating"]) == ("tile-shapes", 4)
    log = fsrs.ReviewLog.from_json(row["log_json"])
    assert log.rating == fsrs.Rating.Easy and log.review_datetime == NOW


def test_again_is_due_sooner_than_good(store):
    # New cards, and cards that have graduated to the review state.
    for card_id, rating in (("io-complexity", 1), ("io-lower-bound", 3)):
        reviews.review(store, card_id, rating, now=NOW)
    due = reviews.due_times(store)
    assert due["io-complexity"] < due["io-lower-bound"]
    later = NOW
    for _ in range(3):
        later = max(reviews.due_times(store).values()) + timedelta(minutes=1)
        for card_id in ("hbm-vs-sram", "sram-per-sm"):
            reviews.review(store, card_id, 3, now=later)
    assert reviews.load_state(store, "hbm-vs-sram").state == fsrs.State.Review
    final = later + timedelta(days=30)
    reviews.review(store, "hbm-vs-sram", 1, now=final)
    reviews.review(store, "sram-per-sm", 3, now=final)
    due = reviews.due_times(store)
    assert final < due["hbm-vs-sram"] < due["sram-per-sm"]


def test_cram_changes_nothing(store):
    reviews.review(store, "fa2-changes", 3, now=NOW)
    before = table_rows(store)
    updated = reviews.review(store, "fa2-changes", 1, now=NOW + timedelta(minutes=1), cram=True)
    reviews.review(store, "never-seen-card", 3, now=NOW, cram=True)
    assert updated.due < reviews.due_times(store)["fa2-changes"]  # it was computed...
    assert table_rows(store) == before  # ...and not stored


def test_bring_forward_makes_cards_due(store):
    for card_id in ("online-why-rescale", "online-exact-choice"):
        reviews.review(store, card_id, 4, now=NOW)
    assert reviews.due_now(store, ["online-why-rescale", "online-exact-choice"], now=NOW) == []
    stability = reviews.load_state(store, "online-why-rescale").stability
    reviews.bring_forward(store, ["online-why-rescale", "brand-new-card"], now=NOW)
    assert reviews.due_now(store, ["online-why-rescale", "online-exact-choice"], now=NOW) == [
        "online-why-rescale"]
    assert reviews.load_state(store, "online-why-rescale").stability == stability
    assert reviews.due_times(store)["brand-new-card"] <= NOW
    # Bringing forward never pushes a due date later.
    reviews.bring_forward(store, ["online-why-rescale"], now=NOW + timedelta(days=1))
    assert reviews.due_times(store)["online-why-rescale"] == NOW


def test_due_order_and_next_due(store):
    ids = ["a", "b", "c"]
    assert reviews.due_now(store, ids, now=NOW) == ids  # new cards are due
    assert reviews.next_due(store, ids) is None
    for card_id in ids:
        reviews.review(store, card_id, 3, now=NOW)
    assert reviews.due_now(store, ids, now=NOW) == []
    assert reviews.next_due(store, ids) == NOW + timedelta(minutes=10)
    assert reviews.due_now(store, ids, now=NOW + timedelta(hours=1)) == ids


# -- scripted sessions through the CLI -----------------------------------------

def test_scripted_session_in_english(store):
    first = tagged("online-softmax")[:3]
    script = right_answers(first[0]) + wrong_answers(first[1]) + right_answers(first[2])
    result = quiz("--followups", "--tag", "online-softmax", "--limit", "3", input="\n".join(script) + "\n")
    assert result.exit_code == 0, result.output
    assert first[0].q_en.split("(")[0].strip() in result.output
    assert "Reviewed 3 cards, 2 right." in result.output
    assert "More cards are due now" in result.output
    ratings = [row["rating"] for row in store.conn.execute("SELECT rating FROM reviews ORDER BY id")]
    assert ratings == [3, 1, 3]


def test_scripted_session_in_chinese_is_remembered(store):
    card = tagged("causal")[0]
    result = quiz("--lang", "zh", "--tag", "causal", "--limit", "1", input="\n".join(right_answers(card)) + "\n")
    assert result.exit_code == 0, result.output
    assert card.q_zh[:12] in result.output
    assert "复习了 1 张卡,答对 1 张。" in result.output
    assert store.get_setting("lang") == "zh"
    again = quiz("--tag", "causal", "--limit", "1", input="")
    assert tagged("causal")[1].q_zh[:12] in again.output


def test_every_card_can_be_answered_right_in_one_session(store):
    script = [line for card in DECK.cards for line in right_answers(card)]
    result = quiz("--limit", str(len(DECK.cards)), input="\n".join(script) + "\n")
    assert result.exit_code == 0, result.output
    assert f"Reviewed {len(DECK.cards)} cards, {len(DECK.cards)} right." in result.output
    assert "Next card due" in result.output
    # Everything is now scheduled: nothing due, and the command says when.
    again = quiz()
    assert again.exit_code == 0
    assert "Nothing is due." in again.output and "Next card due in 10 minutes" in again.output


def test_numeric_and_choice_grading(store):
    numeric = CARD["online-example-second-block"]
    choice = CARD["loop-order-choice"]
    script = ["not a number", "≈ 1.203", str(choice.correct + 1)]
    (numeric_due, choice_due) = (numeric.id, choice.id)
    reviews.bring_forward(store, [numeric_due, choice_due])
    other = [c.id for c in DECK.cards if c.id not in (numeric_due, choice_due)]
    for card_id in other:  # schedule everything else into the future
        reviews.review(store, card_id, 4)
    result = quiz("--limit", "5", input="\n".join(script) + "\n")
    assert "Didn't catch that" in result.output
    assert result.output.count("Right.") == 2
    wrong = quiz("--cram", "--tag", "fa2", "--limit", "1",
                 input="\n".join(["", "1"]) + "\n")
    assert "Reviewed 1 card, 0 right." in wrong.output


def test_end_of_input_ends_cleanly(store):
    result = quiz("--tag", "main", input="\n")  # reveals one card, then input ends
    assert result.exit_code == 0
    assert "Traceback" not in result.output
    assert "Reviewed 0 cards, 0 right." in result.output
    assert store.conn.execute("SELECT COUNT(*) FROM reviews").fetchone()[0] == 0


def test_cram_session_leaves_the_schedule_alone(store):
    quiz("--tag", "ring", "--limit", "2", input="\n\n\n\n")
    before = table_rows(store)
    # Cram goes soonest-due first: never-reviewed cards, then the two just reviewed.
    order = reviews.by_due(store, [card.id for card in tagged("ring")])
    assert order[-2:] == [card.id for card in tagged("ring")[:2]]
    script = [line for card_id in order for line in wrong_answers(CARD[card_id])]
    result = quiz("--cram", "--tag", "ring", "--limit", "50", input="\n".join(script) + "\n")
    assert result.exit_code == 0
    assert f"Reviewed {len(tagged('ring'))} cards, 0 right." in result.output
    assert "Cram session: the schedule did not change." in result.output
    assert table_rows(store) == before


def test_unknown_tag_is_one_line_and_exit_2():
    result = CliRunner().invoke(cli, ["quiz", "--tag", "nonsense"])
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "nonsense" in lines[0] and "online-softmax" in lines[0]


def test_real_process_with_piped_input():
    # The installed entry point, stdin a pipe: the scripted mode a user can rely on.
    done = subprocess.run(
        [sys.executable, "-m", "drill", "quiz", "--tag", "main", "--limit", "1"],
        input="\n\n", capture_output=True, text=True, timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert "Reviewed 1 card, 1 right." in done.stdout
    assert done.stderr == ""


# -- sources and expressions ----------------------------------------------------

def test_source_is_shown_after_the_answer_and_expressions_are_graded():
    card = CARD["online-example-first-block"]
    result = quiz("--cram", "--tag", "online-softmax", "--limit", "40",
                  input="".join(f"{line}\n" for c in tagged("online-softmax")
                                for line in (["e^-2+1"] if c.id == card.id else right_answers(c))))
    assert result.exit_code == 0, result.output
    block = result.output.split(f"{card.id} ·", 1)[1]
    assert "Right." in block.split("Source:", 1)[0]
    assert f"Source: {card.source}" in block


def test_source_label_in_chinese():
    result = quiz("--cram", "--tag", "main", "--lang", "zh", "--limit", "1", input="\n\n")
    assert result.exit_code == 0, result.output
    assert "出处: " in result.output


def test_a_reciprocal_is_wrong_but_explained():
    card = CARD["fig2-hbm-ratio"]
    assert card.reciprocal_of("1/9") and not card.reciprocal_of("9.16") and not card.reciprocal_of("0")
    lines = [line for c in tagged("io") for line in (["1/9"] if c.id == card.id else right_answers(c))]
    result = quiz("--cram", "--tag", "io", "--limit", "40", input="".join(f"{line}\n" for line in lines))
    assert result.exit_code == 0, result.output
    block = result.output.split(f"{card.id} ·", 1)[1].split("Source:", 1)[0]
    assert "Not quite" in block and "reciprocal" in block
