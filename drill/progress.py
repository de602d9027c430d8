"""Where the user stands: each exercise's state and the suggested next step."""

from __future__ import annotations

from dataclasses import dataclass

from drill import catalog
from drill.catalog import Exercise
from drill.store import Store


@dataclass(frozen=True)
class ExerciseState:
    exercise: Exercise
    state: str  # not started | not graded | failing | passed
    attempts: int
    last: str  # last result in words, '' if none


def state_of(store: Store, ex: Exercise) -> ExerciseState:
    attempts = store.attempts(ex.key)
    if not attempts:
        return ExerciseState(ex, "not started", 0, "")
    last = attempts[-1]
    if any(a.status == "pass" for a in attempts):
        state = "passed"
    elif any(a.status == "fail" for a in attempts):
        state = "failing"
    else:
        state = "not graded"  # every attempt was an error: the file never ran its checks
    return ExerciseState(ex, state, len(attempts), f"{last.status}: {last.result.get('message', '')}")


def current(store: Store, topic: str | None = None) -> Exercise | None:
    """The first exercise not yet passed, in catalog order (the started topic first)."""
    topics = [topic] if topic else catalog.topic_names()
    for name in topics:
        for ex in catalog.load_topic(name).exercises:
            if not store.passed(ex.key):
                return ex
    return None


def resolve(name: str) -> Exercise | None:
    """An exercise from 'topic/id', 'id', 'NN', 'NN_name' or 'NN_name.py'."""
    if "/" in name:
        topic, _, rest = name.partition("/")
        if topic in catalog.topic_names():
            return catalog.load_topic(topic).get(rest)
        return None
    for topic in catalog.topic_names():
        found = catalog.load_topic(topic).get(name)
        if found:
            return found
    return None


def known_ids() -> str:
    return ", ".join(ex.id for ex in catalog.all_exercises())
