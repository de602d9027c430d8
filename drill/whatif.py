"""What-if follow-ups: grade mutants of a passing file and turn each outcome into a question.

Every mutant goes through the same trusted grader and sandbox as `drill check`
(drill.grader.runner.grade), a few at once on worker threads: each grade is its own
processes, so the threads only wait. Outcomes are cached in the store by the file's
key (a hash of the file and of its exercise's checks) and the mutant's id, so a second
session on an unchanged file grades nothing.
"""

from __future__ import annotations

import hashlib
import random
import re
import tempfile
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

from drill.catalog import Exercise
from drill.errors import DrillError
from drill.grader.result import GradeResult
from drill.mutate import Mutant

ORIGINAL = "original"  # the cache entry of the unmutated file
OUTCOME_VERSION = b"2"  # 2: survivors compared with the original; a new version grades again
MUTANT_TIMEOUT_S = 10.0  # a passing NumPy file grades in 1-2 s; a mutant that loops is stopped early
JOBS = 2
SHOWN_DIAGNOSES = 3

# Which card explains the concept each operator breaks, most specific first.
CARDS = {
    "drop-factor": ("online-why-rescale", "online-update-rule"),
    "exp-base": ("exp2-convert", "exp2-trick"),
    "shift-comparison": ("causal-alignment", "fully-masked-rows"),
    "init-value": ("fully-masked-rows", "online-update-rule"),
    "drop-scale": ("main-explain-flashattention", "online-update-rule"),
    "reduction-axis": ("online-update-rule", "tile-shapes"),
    "block-bound": ("ragged-last-block", "num-blocks-ragged"),
    "delete-statement": ("online-update-rule", "online-why-rescale"),
    "swap-operands": ("ring-stable-lse", "online-update-rule"),
}


@dataclass
class Outcome:
    """What grading one mutant did."""

    status: str  # survives | fails | raises | timeout | error
    failed: list[str] = field(default_factory=list)  # names of the checks that failed
    diagnoses: list[str] = field(default_factory=list)  # their messages, in the same order (first few)
    message: str = ""
    seconds: float = 0.0
    checks: list[str] = field(default_factory=list)  # every check that was graded, by name
    # A survivor, compared with the original on every call of a second grading on fresh inputs:
    # True (same values each time), False (a gap in the checks: `evidence` says where), None (not compared)
    equivalent: bool | None = None
    evidence: str = ""
    # Peak-memory checks left out once a check had failed (each starts a fresh subject); the label says so
    not_run: list[str] = field(default_factory=list)

    @property
    def killed(self) -> bool:
        return self.status != "survives"

    def label(self, total: int = 0, lang: str = "en") -> str:
        """The outcome as one multiple-choice answer (`total`: how many checks there are); two
        outcomes with one label are the same answer."""
        text = self._label(total, lang)
        return text + LABELS[lang]["not_run"].format(n=len(self.not_run)) if self.not_run else text

    def _label(self, total: int, lang: str) -> str:
        w = LABELS[lang]
        if self.status in ("survives", "timeout", "error"):
            return w[self.status]
        if self.status == "raises":
            count = w["every"] if not self.failed else w["checks"].format(n=len(self.failed)) if lang == "zh" else \
                f"{len(self.failed)} check" + ("s" if len(self.failed) != 1 else "")
            return w["raises"].format(error=self.message, count=count)
        if len(self.failed) == 1:
            return w["one"].format(a=self.failed[0])
        if len(self.failed) == 2:
            return w["two"].format(a=self.failed[0], b=self.failed[1])
        if lang == "zh":
            return w["many"].format(n=len(self.failed), total=f"{total} 项检查中 " if total else "", a=self.failed[0])
        of = f" of {total}" if total else ""
        return w["many"].format(n=len(self.failed), total=of, a=self.failed[0])

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, doc: dict) -> "Outcome":
        return cls(**{k: doc[k] for k in ("status", "failed", "diagnoses", "message", "seconds", "checks",
                                          "equivalent", "evidence", "not_run") if k in doc})


LABELS = {
    "en": {"survives": "every check still passes", "timeout": "runs past the time limit (an endless loop?)",
           "error": "cannot even be graded (it does not import)", "raises": "raises {error} in {count}",
           "every": "every check", "one": "fails only «{a}»", "two": "fails «{a}» and «{b}»",
           "many": "fails {n}{total} checks, the first «{a}»", "not_run": "; {n} not run"},
    "zh": {"survives": "所有检查仍然通过", "timeout": "超出时间限制(死循环?)",
           "error": "根本无法评分(文件无法导入)", "raises": "在{count}中抛出 {error}",
           "every": "所有检查", "checks": " {n} 项检查", "one": "只有«{a}»失败", "two": "«{a}»和«{b}»失败",
           "many": "{total}{n} 项失败,第一项是«{a}»", "not_run": ";{n} 项未运行"},
}


def outcome_of(result: GradeResult) -> Outcome:
    if result.status == "pass":
        return Outcome("survives", seconds=result.seconds, checks=[c.name for c in result.checks])
    if result.status == "error":
        status = "timeout" if result.message.startswith("timed out") else "error"
        return Outcome(status, message=result.message, seconds=result.seconds)
    failed = [c for c in result.checks if c.status == "fail"]
    names = [c.name for c in failed]
    diagnoses = [c.message for c in failed[:SHOWN_DIAGNOSES]]
    hung = any(c.message.startswith("did not finish") for c in failed) or "not run in the" in result.message
    if "timed out" in result.message or hung:  # a check hung; the grader stopped it (and maybe the rest)
        return Outcome("timeout", names, diagnoses, result.message, result.seconds)
    not_run = [c.name for c in result.checks if c.status == "not-run"]
    raised = [re.match(r"your code raised (?:an? numpy )?(\w+)", c.message) for c in failed]
    if failed and all(raised):
        kinds = sorted({m.group(1) for m in raised})
        return Outcome("raises", names, diagnoses, " or ".join(kinds), result.seconds, not_run=not_run)
    return Outcome("fails", names, diagnoses, result.message, result.seconds, not_run=not_run)


def file_key(source: bytes, exercise: Exercise) -> str:
    """The cache key of a file: its bytes and the checks that grade it (new checks, new outcomes)."""
    digest = hashlib.sha256(source)
    digest.update(b"\0" + exercise.checks_path.read_bytes() + b"\0" + OUTCOME_VERSION)
    return digest.hexdigest()[:32]


def grade_source(exercise: Exercise, source: str, timeout: float, original: str | None = None,
                 first_failure: bool = False, server=None) -> Outcome:
    """Grade one version of the file in the sandbox (it is written to a private folder first).

    With `original`, a survivor is graded once more on fresh inputs with the original file
    as a shadow: every call the checks make is repeated on it and the results compared, so
    the survivor is labelled equivalent (the same values on every call) or a gap in the checks.
    `first_failure` stops at the first failing check: enough to know the mutant is killed (the
    mutation score), not to ask which checks fail. Without it, every check runs but the peak-memory
    ones once a check has failed: they would add to a verdict already reached, at most of the cost
    (Outcome.not_run names them). `server`: a runner.ForkServer to fork the trusted workers from.
    """
    from drill.grader.runner import grade

    with tempfile.TemporaryDirectory(prefix="drill-whatif-") as folder:
        path = Path(folder) / exercise.file
        path.write_text(source, encoding="utf-8")
        outcome = outcome_of(grade(exercise, path, timeout, first_failure=first_failure, memory_after_failure=False,
                                   server=server))
        if outcome.status == "survives" and original is not None:
            # Every call runs twice (mutant, then original): twice the time.
            compared = grade(exercise, path, 2 * timeout, shadow=original.encode("utf-8"), server=server)
            outcome.equivalent, outcome.evidence = equivalence_of(compared)
        return outcome


def equivalence_of(result: GradeResult) -> tuple[bool | None, str]:
    """What a shadowed grading says about a survivor: (equivalent?, in words)."""
    seen = result.equivalence
    if not seen:
        return None, "not compared (the comparison run did not finish)"
    if seen.get("differs"):
        return False, f"it gives other values than your file: {seen['differs']}"
    # The run's own verdicts are not used: the shadow's calls share the grader's measurements
    # (peak memory above all), so only the comparison of values counts here.
    if seen.get("broken"):
        return None, f"not known: after {seen.get('compared', 0)} equal calls, {seen['broken']}"
    if not seen.get("compared"):
        return None, "not compared (the checks made no call to compare)"
    return True, (f"the same values as your file on all {seen['compared']} calls the checks made "
                  "on fresh random inputs")


def _prepared_or_graded(key: str | None, mutant_id: str, exercise: Exercise, source: str, timeout: float,
                        original: str | None, first_failure: bool, server) -> Outcome:
    if key is not None:
        from drill.whatif_prepare import wait_for_outcome

        found = wait_for_outcome(key, mutant_id)
        if found is not None:
            return Outcome.from_json(found)
    return grade_source(exercise, source, timeout, original, first_failure, server)


class Grading:
    """Mutants graded in the background, several at once; cached outcomes are ready at once.

    Results are written to the store by the caller's thread (`outcome`), as SQLite wants.
    """

    def __init__(self, exercise: Exercise, mutants: list[Mutant], cached: dict[str, dict],
                 timeout: float = MUTANT_TIMEOUT_S, jobs: int = JOBS, original: str | None = None,
                 first_failure: bool = False, prepared: tuple[str, set[str]] | None = None):
        """`prepared`: (file key, mutant ids) that a background preparation is grading now; their
        outcomes are read from the store as it saves them (drill/whatif_prepare.py)."""
        self.ready: dict[str, Outcome] = {m.id: Outcome.from_json(cached[m.id]) for m in mutants if m.id in cached}
        self.fresh: list[str] = []  # graded in this session, to be saved
        self.total = len(mutants)
        self._pool = ThreadPoolExecutor(max_workers=max(1, jobs), thread_name_prefix="drill-whatif")
        waiting = prepared[1] if prepared else set()
        left = [m for m in mutants if m.id not in self.ready]
        from drill.grader.runner import ForkServer

        # Every grading's worker forked from one that has imported the grader (runner.ForkServer).
        self._server = ForkServer() if left else None
        self._futures: dict[str, Future] = {
            m.id: self._pool.submit(_prepared_or_graded, prepared[0] if m.id in waiting else None, m.id,
                                    exercise, m.source, timeout, original, first_failure, self._server)
            for m in left}

    def done(self) -> int:
        return len(self.ready) + sum(1 for mid, f in self._futures.items() if f.done() and mid not in self.ready)

    def is_ready(self, mutant_id: str) -> bool:
        return mutant_id in self.ready or self._futures[mutant_id].done()

    def outcome(self, mutant_id: str, wait: float | None = None) -> Outcome:
        if mutant_id not in self.ready:
            try:
                self.ready[mutant_id] = self._futures[mutant_id].result(wait)
            except OSError as exc:  # the grader could not start: no outcome to ask about
                raise DrillError(f"grading a mutant failed: {exc}") from None
            self.fresh.append(mutant_id)
        return self.ready[mutant_id]

    def close(self) -> None:
        # Grades already running finish (each within its timeout); queued ones never start.
        self._pool.shutdown(wait=True, cancel_futures=True)
        if self._server is not None:
            self._server.close()


# -- questions ------------------------------------------------------------------

@dataclass
class Question:
    mutant: Mutant
    outcome: Outcome
    choices: list[str]
    correct: int


def question(mutant: Mutant, outcome: Outcome, others: list[Outcome], checks: list[str],
             size: int = 4, lang: str = "en") -> Question:
    """Multiple choice: the real outcome and distractors from other mutants' outcomes and other checks.

    `checks` are the names of every check the file passed, so a distractor can always name one.
    The order is fixed by the mutant's id, so a question reads the same every time.
    """
    rng = random.Random(mutant.id)
    total = len(checks)
    right = outcome.label(total, lang)
    # Made-up failures leave out what the real outcome left out, so "not run" gives nothing away.
    pool = [Outcome("survives")] + [o for o in others] + [
        Outcome("fails", [name], not_run=[n for n in outcome.not_run if n != name]) for name in checks] + [
        Outcome("raises", [], message="an exception"), Outcome("timeout")]
    distractors: list[str] = []
    for candidate in pool[:1] + rng.sample(pool[1:], len(pool) - 1):
        label = candidate.label(total, lang)
        if label != right and label not in distractors:
            distractors.append(label)
        if len(distractors) == size - 1:
            break
    choices = distractors + [right]
    rng.shuffle(choices)
    return Question(mutant, outcome, choices, choices.index(right))


def card_for(mutant: Mutant, exercise: Exercise, deck_ids: set[str]) -> str | None:
    """The card that explains what the mutant breaks: the operator's own, else the exercise's first."""
    for card_id in CARDS.get(mutant.operator, ()):
        if card_id in deck_ids:
            return card_id
    return next((c for c in exercise.cards if c in deck_ids), None)



# -- what-if cards: questions about the learner's own code, scheduled with FSRS --------------

CARD_TAG = "about your code"
NEW_PER_QUIZ = 5  # what-if questions never asked before that one quiz session may bring in


def card_id(exercise: Exercise, mutant_id: str) -> str:
    """The FSRS card of one what-if question: its exercise and the mutant's id, itself derived
    from the operator and the normalised change, so it survives edits elsewhere in the file."""
    return f"whatif:{exercise.key}:{mutant_id}"


@dataclass
class CodeCard:
    id: str
    exercise: Exercise
    path: Path
    question: Question
    checks: list[str]  # every check the file passes


def code_cards(store, exercises: list[Exercise], lang: str = "en") -> list[CodeCard]:
    """The what-if questions about each exercise's latest passing file whose outcomes are graded.

    Outcomes are cached under a hash of the file, so once the learner edits it, the questions
    about the old version retire; grading the new one (`drill whatif`) brings them back.
    """
    from drill import mutate, userfile

    found: list[CodeCard] = []
    for ex in exercises:
        if ex.needs != "cpu":
            continue
        passing = [a for a in store.attempts(ex.key) if a.status == "pass"]
        if not passing:
            continue
        path = Path(passing[-1].file)
        try:
            raw = userfile.read_bytes(path)
        except (userfile.UnreadableFile, OSError):
            continue
        cached = store.mutant_outcomes(file_key(raw, ex))
        baseline = cached.get(ORIGINAL)
        if baseline is None or baseline.get("status") != "survives" or len(cached) < 2:
            continue
        try:
            source = raw.decode("utf-8")
            every = mutate.mutants(source)
        except (UnicodeDecodeError, SyntaxError, ValueError):
            continue
        graded = [(m, Outcome.from_json(cached[m.id])) for m in every if m.id in cached]
        graded = [(m, o) for m, o in graded if o.status != "error"]
        checks = Outcome.from_json(baseline).checks
        for m, o in graded:
            others = [other for n, other in graded if n.id != m.id]
            found.append(CodeCard(card_id(ex, m.id), ex, path, question(m, o, others, checks, lang=lang), checks))
    return found


# -- the mutation score of the hidden checks (drill dev mutants) -------------------------------

@dataclass
class Score:
    """Every mutant of one file, graded: the checks' mutation score over it."""

    label: str  # "solution" or the variant's name
    path: Path
    graded: list[tuple[Mutant, Outcome]]
    seconds: float = 0.0
    first_seconds: float = 0.0  # until the first mutant's outcome was in

    @property
    def killed(self) -> int:
        return sum(1 for _m, o in self.graded if o.killed)

    @property
    def equivalent(self) -> int:
        return sum(1 for _m, o in self.graded if not o.killed and o.equivalent is True)

    @property
    def survivors(self) -> list[tuple[Mutant, Outcome]]:
        return [(m, o) for m, o in self.graded if not o.killed and o.equivalent is not True]

    @property
    def score(self) -> float:
        """killed / non-equivalent mutants (1.0 when every mutant is equivalent or there are none)."""
        counted = len(self.graded) - self.equivalent
        return self.killed / counted if counted else 1.0

    def to_json(self) -> dict:
        return {"file": self.label, "path": str(self.path), "mutants": len(self.graded), "killed": self.killed,
                "equivalent": self.equivalent, "score": round(self.score, 4), "seconds": round(self.seconds, 1),
                "first_seconds": round(self.first_seconds, 1),
                "survivors": [{"id": m.id, "operator": m.operator, "line": m.line, "change": m.change,
                               "equivalent": o.equivalent, "evidence": o.evidence, "diff": m.diff}
                              for m, o in self.survivors]}


def score_file(exercise: Exercise, label: str, path: Path, timeout: float = MUTANT_TIMEOUT_S, jobs: int = JOBS,
               on_outcome=None) -> Score:
    """Generate and grade every mutant of `path` (survivors compared with it); `on_outcome(done, total)`."""
    import time

    from drill import mutate

    source = path.read_text(encoding="utf-8")
    found = mutate.mutants(source)
    started = time.monotonic()
    # Killed or not is all a score needs: each grading stops at its first failing check.
    grading = Grading(exercise, found, {}, timeout, jobs, original=source, first_failure=True)
    graded, first = [], 0.0
    try:
        for i, m in enumerate(found, start=1):
            graded.append((m, grading.outcome(m.id)))
            first = first or time.monotonic() - started
            if on_outcome is not None:
                on_outcome(i, len(found))
    finally:
        grading.close()
    return Score(label, path, graded, time.monotonic() - started, first)
