"""The live quiz, the mock countdown and `drill watch` in a real pseudo-terminal: keys are
typed, and the assertions read the screen as a person sees it."""

from __future__ import annotations

import re
import shutil
import time

import pytest

pytest.importorskip("pexpect")
pytest.importorskip("pyte")

from drill import cards, catalog, paths  # noqa: E402
from drill.store import Store  # noqa: E402
from terminal import Terminal  # noqa: E402

DECK = cards.load_deck("flashattention")
FIRST, SECOND = "01_online_softmax.py", "02_tiling_shapes.py"


@pytest.fixture
def term():
    opened: list[Terminal] = []

    def start(*args: str, **kwargs) -> Terminal:
        opened.append(Terminal(*args, **kwargs))
        return opened[-1]

    yield start
    for t in opened:
        t.close()


# -- quiz ------------------------------------------------------------------------


def test_live_quiz_reveals_rates_and_summarises(term):
    card = DECK.cards[0]
    assert card.kind == "recall"
    t = term("quiz", "--limit", "1")
    t.wait_for(card.id)  # the question panel's title
    t.type("\r")  # reveal
    t.wait_for("Answer")
    t.wait_for("How well did you know it?")
    t.type("3")  # Good: a single key, no Enter
    screen = t.wait_for("Reviewed 1 card, 1 right.")
    assert "next review in" in screen
    assert t.exit_status() == 0
    with Store() as store:
        assert store.card_state(card.id) is not None


def test_live_quiz_numeric_answer_and_a_typo(term):
    card = [card for card in DECK.cards if "pitfalls" in card.tags][0]
    assert card.kind == "numeric"
    t = term("quiz", "--tag", "pitfalls", "--limit", "1")
    t.wait_for("Your answer (a number")
    t.type("forty\r")  # not a number: asked again, not graded
    t.wait_for("Didn't catch that")
    t.type(f"{card.answer:g}\r")
    t.wait_for("Right.")
    t.wait_for("Reviewed 1 card, 1 right.")
    assert t.exit_status() == 0


def test_live_quiz_ratings_are_single_keys(term):
    recall = [card for card in DECK.cards if card.kind == "recall"][:2]
    t = term("quiz", "--limit", "2")
    t.wait_for(recall[0].id)
    t.type("\r")
    t.wait_for("How well did you know it?")
    t.type("x")  # not a rating: asked again at once, nothing graded
    t.wait_for("Didn't catch that")
    t.type("e")  # Easy, without Enter
    t.wait_for(recall[1].id)
    t.type("\r")
    t.wait_for("How well did you know it?", limit=10)
    t.type("\r")  # Enter alone is Good
    screen = t.wait_for("Reviewed 2 cards, 2 right.")
    assert t.exit_status() == 0


def test_live_quiz_choice_is_a_single_key(term):
    from drill import reviews

    deck = {card.id: card for card in cards.all_cards()}
    with Store() as store:
        order = reviews.due_now(store, deck)
    first_choice = next(i for i, card_id in enumerate(order) if deck[card_id].kind == "choice")
    t = term("quiz", "--limit", str(first_choice + 1))
    for position, card_id in enumerate(order[:first_choice + 1], start=1):
        card = deck[card_id]
        t.wait_for(f"{position} · {card_id}")
        if card.kind == "recall":
            t.type("\r")
            t.wait_for("How well did you know it?")
            t.type("g")
        elif card.kind == "numeric":
            t.wait_for("Your answer (a number")
            t.type(f"{card.answer:g}\r")
        else:
            t.wait_for("Your choice (1-")
            t.type(str(card.correct + 1))  # the number alone, no Enter
            t.wait_for("Right.")
    t.wait_for(f"Reviewed {first_choice + 1} card")
    assert t.exit_status() == 0


# -- mock --------------------------------------------------------------------------


def clock(screen: str) -> int:
    m, s = re.search(r"(\d+):(\d\d) left", screen).groups()
    return int(m) * 60 + int(s)


def test_mock_countdown_ticks_while_typing_and_enter_hands_in(term):
    t = term("mock", "flashattention", "--question", "online-softmax", "--time", "60")
    first = clock(t.wait_for(" left"))
    t.type("keep a running max per row")  # cbreak: what is typed shows without Enter
    t.wait_for("keep a running max per row▌")
    time.sleep(2.5)
    t.pump(0.5)
    assert clock(t.text) <= first - 2  # the clock kept ticking while keys arrived
    t.type("\r\r")  # Enter, then Enter on the empty line: hand in
    screen = t.wait_for("Covered")
    assert "✓" in screen and "Key points" in screen
    assert t.exit_status() == 0


def test_mock_time_running_out_hands_in_what_was_typed(term):
    t = term("mock", "flashattention", "--question", "online-softmax", "--time", "5")
    t.wait_for(" left")
    t.type("we keep a running max of each row as the blocks stream in")
    screen = t.wait_for("Covered", limit=25)
    assert "⏱ time is up" in screen and "stream in▌" in screen
    assert re.search(r"Covered [1-9] of", screen) and "No answer was given" not in screen
    assert t.exit_status() == 0


# -- watch -------------------------------------------------------------------------


def test_watch_keys_act_without_enter(term, tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    for name in (FIRST, SECOND):
        shutil.copy(paths.exercises_root() / "flashattention" / name, ws / name)
    with Store() as store:
        store.set_workspace("flashattention", ws)
        store.set_setting("topic", "flashattention")
    t = term("watch", str(ws / FIRST))
    screen = t.wait_for("0 of 14 checks passed")
    assert "q: quit" in screen and "then Enter" not in screen
    time.sleep(0.5)  # let the watcher settle before the save
    shutil.copy(paths.solutions_root() / "flashattention" / FIRST, ws / FIRST)
    screen = t.wait_for("all 14 checks passed")
    assert "Press n to watch it" in screen
    t.type("n")  # no Enter
    t.wait_for("Block counts cover a ragged sequence")  # 02's checks (its header may scroll off the screen)
    t.type("x")
    t.wait_for("unknown key 'x'")
    t.type("q")
    assert t.exit_status() == 0


# -- layout on a narrow terminal --------------------------------------------------------------------


def test_narrow_terminal_never_cuts_a_title_a_file_name_or_an_id(term, tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    shutil.copy(paths.exercises_root() / "flashattention" / "03_flash_forward.py", ws / "03_flash_forward.py")
    with Store() as store:
        store.set_workspace("flashattention", ws)
        store.set_setting("topic", "flashattention")
    t = term("check", "03_flash_forward.py", cwd=str(ws), columns=50, rows=200)
    screen = t.wait_for("checks passed")
    # The heading does not fit the border at 50 columns: it is the panel's first lines, cut at spaces.
    assert "FAILED flashattention/flash-forward" in screen and "(03_flash_forward.py)" in screen
    assert not re.search(r"03_flash_forward\.?─", screen)
    assert "raise NotImplementedError" in screen  # the learner's own frame, source line included
    assert t.exit_status() == 1
    for command, columns in (("list", 60), ("status", 60), ("status", 80)):
        t = term(command, cwd=str(ws), columns=columns)
        screen = t.wait_for("triton-decode")
        ids = [ex.id for ex in catalog.all_exercises()]
        assert all(ex_id in screen for ex_id in ids) and "…" not in screen, screen
        assert "not started" in screen and "failing" in screen
        assert t.exit_status() == 0
