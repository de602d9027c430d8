"""The grading result and its JSON document (schema version 1)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

SCHEMA_VERSION = 1

# The runner caps file size (RLIMIT_FSIZE); Python ignores SIGXFSZ, so a write past it raises EFBIG.
TOO_MUCH_OUTPUT = "your code printed more than 64 MB; the grader stopped it (a print inside a loop?)"


@dataclass
class CheckResult:
    name: str
    status: str  # pass | fail | skip | not-run
    message: str = ""
    seconds: float = 0.0
    output: str = ""
    details: dict = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)  # figures a check reports (drill.grader.expect.note)
    kind: str = "verified"  # "observed": decided from what the subject reports about itself


@dataclass
class GradeResult:
    exercise: str
    file: str
    status: str  # pass | fail | error
    message: str = ""
    checks: list[CheckResult] = field(default_factory=list)
    seconds: float = 0.0
    output: str = ""  # what the user's code printed outside any check (truncated)
    notes: list[str] = field(default_factory=list)
    # "full": every containment layer held; "partial": some did not (see layers); None: nothing ran
    sandbox: str | None = None
    layers: dict = field(default_factory=dict)  # each containment layer: "held (how)", or why it did not
    seed: int | None = None  # every random input of the checks came from this (drawn per run)
    seed_chosen: bool = False  # the learner gave the seed (--seed): a replay, never saved as progress
    traceback: str = ""  # a file that could not be loaded: where, as Python shows it (real path, source, caret)
    # `drill check -k`: {"keyword": EXPR, "selected": N, "of": M}; empty when every check was asked for
    selection: dict = field(default_factory=dict)
    # graded with a shadow (runner.grade(shadow=...)): {"compared": calls, "differs": first difference or ""}
    equivalence: dict = field(default_factory=dict)

    def to_json(self) -> dict:
        doc = asdict(self)
        if not doc["equivalence"]:  # only what-if gradings compare against a shadow
            del doc["equivalence"]
        return {"schema": SCHEMA_VERSION, **doc}
