"""Card scheduling: FSRS (the `fsrs` package) with its state kept in the store.

Table `cards` holds each reviewed card's FSRS state and due time; table
`reviews` holds one row per graded review with FSRS's review log. A card with
no row has never been reviewed and counts as due now. `fsrs` is imported
inside functions so `drill --help` never loads it.
"""

from __future__ import annotations

import zlib
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Iterable

from drill.store import Store

if TYPE_CHECKING:
    import fsrs



def utcnow() -> datetime:
    return datetime.now(timezone.utc)


def scheduler() -> "fsrs.Scheduler":
    import fsrs

    # No fuzzing: a small deck gains little from spreading due dates, and a
    # deterministic schedule is one the user (and the tests) can predict.
    return fsrs.Scheduler(enable_fuzzing=False)


def fsrs_id(card_id: str) -> int:
    """FSRS wants an integer id; a checksum of the slug is stable across runs."""
    return zlib.crc32(card_id.encode("utf-8"))


def load_state(store: Store, card_id: str, now: datetime | None = None) -> "fsrs.Card":
    """The card's FSRS state, or a fresh card due now if it was never reviewed."""
    import fsrs

    state = store.card_state(card_id)
    if state is None:
        return fsrs.Card(card_id=fsrs_id(card_id), due=now or utcnow())
    return fsrs.Card.from_json(state)


def due_times(store: Store) -> dict[str, datetime]:
    """Due time of every card that has been reviewed at least once."""
    return {card_id: _parse_time(due) for card_id, due in store.card_due_times().items()}


def due_now(store: Store, card_ids: Iterable[str], now: datetime | None = None) -> list[str]:
    """The ids that are due: overdue reviewed cards first (oldest first), then new ones in deck order."""
    now = now or utcnow()
    known = due_times(store)
    ids = list(card_ids)
    overdue = sorted((known[i], n, i) for n, i in enumerate(ids) if i in known and known[i] <= now)
    fresh = [i for i in ids if i not in known]
    return [i for _, _, i in overdue] + fresh


def by_due(store: Store, card_ids: Iterable[str]) -> list[str]:
    """All the ids, soonest due first (new cards count as due now) - the cram order."""
    known = due_times(store)
    ids = list(card_ids)
    floor = datetime.min.replace(tzinfo=timezone.utc)
    return [i for _, _, i in sorted((known.get(i, floor), n, i) for n, i in enumerate(ids))]


def next_due(store: Store, card_ids: Iterable[str]) -> datetime | None:
    """When the earliest of these cards is due; None if some were never reviewed (due already)."""
    known = due_times(store)
    ids = list(card_ids)
    if not ids or any(i not in known for i in ids):
        return None
    return min(known[i] for i in ids)


def review(store: Store, card_id: str, rating: int, now: datetime | None = None,
           cram: bool = False) -> "fsrs.Card":
    """Grade one card (1 Again, 2 Hard, 3 Good, 4 Easy) and persist the new schedule.

    With cram=True the new state is computed and returned but nothing is written:
    cramming must never move a due date.
    """
    import fsrs

    now = now or utcnow()
    card = load_state(store, card_id, now)
    updated, log = scheduler().review_card(card, fsrs.Rating(rating), review_datetime=now)
    if cram:
        return updated
    store.save_card_states([_state_row(card_id, updated)],
                           review=(card_id, _format_time(now), int(rating), log.to_json()))
    return updated


def bring_forward(store: Store, card_ids: Iterable[str], now: datetime | None = None) -> None:
    """Make these cards due now (called when the user fails an exercise tied to them).

    Only the due time changes; the FSRS memory state stays, so the next review
    is scheduled from what the user really knows.
    """
    now = now or utcnow()
    rows = []
    for card_id in card_ids:
        card = load_state(store, card_id, now)
        if card.due > now:
            card.due = now
        rows.append(_state_row(card_id, card))
    store.save_card_states(rows)


def _state_row(card_id: str, card: "fsrs.Card") -> tuple[str, str, str]:
    return card_id, card.to_json(), _format_time(card.due)


def _format_time(moment: datetime) -> str:
    return moment.astimezone(timezone.utc).isoformat()


def _parse_time(text: str) -> datetime:
    moment = datetime.fromisoformat(text)
    return moment if moment.tzinfo else moment.replace(tzinfo=timezone.utc)
