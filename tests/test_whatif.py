"""What-if follow-ups: outcomes, questions, the cache, `drill whatif` piped, as JSON and in a
terminal, and real mutants of a solution graded in the sandbox."""

from __future__ import annotations

import ast
import json
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from drill import catalog, mutate, whatif
from drill.grader.result import CheckResult, GradeResult
from drill.paths import solutions_root
from drill.store import SCHEMA_VERSION, Store, StoreError

LSE = catalog.resolve("lse-merge")
SOFTMAX = catalog.resolve("online-softmax")
CHECKS = ["merge is right", "merge is symmetric", "both -inf give -inf", "inputs are not modified"]


def result(status: str, checks: list[tuple[str, str, str]] = (), message: str = "") -> GradeResult:
    return GradeResult(LSE.key, "f.py", status, message, [CheckResult(n, s, m) for n, s, m in checks])


def drill(*args: str, input: str = "", cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "drill", *args], input=input, capture_output=True, text=True,
                          cwd=cwd, timeout=120)


@pytest.fixture
def lse_file(tmp_path: Path) -> Path:
    path = tmp_path / LSE.file
    shutil.copy(LSE.solution_path, path)
    return path


def plant(path: Path, exercise, outcomes: list[whatif.Outcome]) -> list[mutate.Mutant]:
    """Cache a passing baseline and the given outcomes for the file's first mutants (in session order)."""
    raw = path.read_bytes()
    chosen = mutate.spread(mutate.mutants(raw.decode()), len(outcomes))
    key = whatif.file_key(raw, exercise)
    with Store() as store:
        store.save_mutant_outcome(key, whatif.ORIGINAL, exercise.key,
                                  whatif.Outcome("survives", checks=CHECKS).to_json())
        for mutant, outcome in zip(chosen, outcomes):
            store.save_mutant_outcome(key, mutant.id, exercise.key, outcome.to_json())
    return chosen


PLANTED = [
    whatif.Outcome("fails", ["merge is right", "merge is symmetric"], ["O is wrong", "not symmetric"]),
    whatif.Outcome("survives"),
    whatif.Outcome("raises", ["merge is right"], ["your code raised NameError: x"], "NameError"),
    whatif.Outcome("timeout", message="timed out after 3 s in the first check"),
    whatif.Outcome("fails", ["both -inf give -inf"], ["NaN in O"]),
]


# -- outcomes ------------------------------------------------------------------

def test_a_grade_becomes_an_outcome():
    assert whatif.outcome_of(result("pass", [("a", "pass", "")])).status == "survives"
    fails = whatif.outcome_of(result("fail", [("a", "pass", ""), ("b", "fail", "O is wrong by 0.1")]))
    assert (fails.status, fails.failed, fails.diagnoses) == ("fails", ["b"], ["O is wrong by 0.1"])
    raises = whatif.outcome_of(result("fail", [("a", "fail", "your code raised ZeroDivisionError: x (line 3)"),
                                               ("b", "fail", "your code raised NameError: y")]))
    assert (raises.status, raises.message) == ("raises", "NameError or ZeroDivisionError")
    mixed = whatif.outcome_of(result("fail", [("a", "fail", "your code raised NameError: y"), ("b", "fail", "wrong")]))
    assert mixed.status == "fails"
    hung = whatif.outcome_of(result("error", message="timed out after 3 s in the first check: an infinite loop?"))
    assert hung.status == "timeout"
    stopped = whatif.outcome_of(result("fail", [("a", "fail", "timed out")],
                                       "1 of 2 checks failed; 1 not run after a check timed out"))
    assert stopped.status == "timeout"
    assert whatif.outcome_of(result("error", message="SyntaxError on line 3")).status == "error"


def test_every_questions_correct_answer_is_its_graded_outcome():
    mutants = mutate.mutants(LSE.solution_path.read_text())[:len(PLANTED)]
    for mutant, outcome in zip(mutants, PLANTED):
        others = [o for o in PLANTED if o is not outcome]
        q = whatif.question(mutant, outcome, others, CHECKS)
        assert q.choices[q.correct] == outcome.label(len(CHECKS))
        assert len(q.choices) == 4 == len(set(q.choices))
        assert q == whatif.question(mutant, outcome, others, CHECKS)  # the same question every time
    # A survivor's question always offers "still passes" and something else.
    q = whatif.question(mutants[0], PLANTED[0], [], CHECKS)
    assert "every check still passes" in q.choices


def test_labels_tell_apart_what_a_learner_must_predict():
    assert whatif.Outcome("fails", ["a"]).label() == "fails only «a»"
    assert whatif.Outcome("fails", ["a", "b"]).label() == "fails «a» and «b»"
    assert whatif.Outcome("fails", ["a", "b", "c"]).label(11) == "fails 3 of 11 checks, the first «a»"
    assert whatif.Outcome("raises", ["a"], message="IndexError").label() == "raises IndexError in 1 check"
    assert whatif.Outcome("fails", ["a", "b", "c"], not_run=["m", "n"]).label(11) == \
        "fails 3 of 11 checks, the first «a»; 2 not run"


def test_an_operator_names_a_card_of_the_deck():
    from drill import cards

    deck = {c.id for c in cards.all_cards()}
    for name, _title, _fn in mutate.OPERATORS:
        assert whatif.CARDS[name][0] in deck, name


# -- the cache in the store ------------------------------------------------------

def test_outcomes_are_cached_by_file_and_mutant(tmp_path: Path):
    with Store() as store:
        store.save_mutant_outcome("k1", "m1", LSE.key, {"status": "fails"})
        store.save_mutant_outcome("k1", "m1", LSE.key, {"status": "survives"})  # graded again: replaced
        store.save_mutant_outcome("k2", "m1", LSE.key, {"status": "raises"})
        assert store.mutant_outcomes("k1") == {"m1": {"status": "survives"}}
        assert store.mutant_outcomes("k3") == {}


def test_a_version_1_database_gains_the_cache_and_keeps_its_progress(drill_home: Path):
    path = drill_home / "drill.sqlite3"
    old = sqlite3.connect(path)
    old.executescript("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);"
                      "INSERT INTO meta VALUES ('schema', '1');"
                      "CREATE TABLE settings (key TEXT PRIMARY KEY, value TEXT NOT NULL);"
                      "INSERT INTO settings VALUES ('lang', 'zh');")
    old.commit()
    old.close()
    with Store(path) as store:
        assert store.get_setting("lang") == "zh"
        assert store.conn.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone()[0] == str(SCHEMA_VERSION)
        store.save_mutant_outcome("k", "m", LSE.key, {"status": "survives"})
    newer = sqlite3.connect(path)
    newer.execute("UPDATE meta SET value = '99' WHERE key = 'schema'")
    newer.commit()
    newer.close()
    before = path.read_bytes()
    with pytest.raises(StoreError, match="schema version '99'"):  # a file from a later drill is left alone
        Store(path).__enter__()
    assert path.read_bytes() == before


def test_the_file_key_follows_the_file_and_the_checks():
    assert whatif.file_key(b"a", LSE) == whatif.file_key(b"a", LSE)
    assert whatif.file_key(b"a", LSE) != whatif.file_key(b"b", LSE)
    assert whatif.file_key(b"a", LSE) != whatif.file_key(b"a", SOFTMAX)


# -- drill whatif, from the cache (no grading) ----------------------------------------------

def test_json_lists_every_mutant_with_its_diff_and_outcome(lse_file: Path):
    chosen = plant(lse_file, LSE, PLANTED)
    done = drill("whatif", str(lse_file), "--json", "--limit", str(len(PLANTED)))
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert doc["exercise"] == LSE.key and (doc["killed"], doc["survived"]) == (4, 1)
    assert [m["id"] for m in doc["mutants"]] == [m.id for m in chosen]
    first = doc["mutants"][0]
    assert first["diff"].startswith("--- yours\n+++ what if\n@@ ") and first["diff"] == chosen[0].diff
    assert first["outcome"]["status"] == "fails" and first["outcome"]["failed"] == PLANTED[0].failed


def test_piped_predictions_are_judged_against_the_graded_outcomes(lse_file: Path):
    chosen = plant(lse_file, LSE, PLANTED)
    answers = []
    for mutant, outcome in zip(chosen, PLANTED):
        q = whatif.question(mutant, outcome, [o for o in PLANTED if o is not outcome], CHECKS)
        answers.append(str(q.correct + 1))
    answers[1] = str((int(answers[1]) % 4) + 1)  # one wrong prediction
    done = drill("whatif", str(lse_file), "--limit", str(len(PLANTED)), input="\n".join(answers) + "\n")
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert out.count("Right: ") == 4 and out.count("Not quite: 2. every check still passes") == 0
    assert "Not quite: " in out and "You predicted 4 of 5 outcomes." in out
    assert "What if? 1/5 · line" in out and chosen[0].change in out
    assert "✗ merge is right\n  O is wrong" in out  # the check's own diagnosis
    assert "The idea behind it (" in out  # and the card that explains it
    assert "gap in the checks" in out  # the survivor says what surviving means
    assert "The checks killed 4 of the 5 mutants" in out


def test_end_of_input_ends_the_session_with_its_summary(lse_file: Path):
    plant(lse_file, LSE, PLANTED)
    done = drill("whatif", str(lse_file), "--limit", "5", input="9\n\n")
    assert done.returncode == 0, done.stderr
    assert "Didn't catch that" in done.stdout and "You predicted 0 of 1 outcome." in done.stdout


def test_a_file_that_does_not_pass_gets_no_questions(tmp_path: Path):
    stub = tmp_path / LSE.file
    shutil.copy(LSE.stub_path, stub)
    done = drill("whatif", str(stub), "--json")
    assert done.returncode == 2
    doc = json.loads(done.stdout)
    assert doc["status"] == "error" and "does not pass its checks yet" in doc["message"]


def test_no_file_and_nothing_passed_says_what_to_do():
    done = drill("whatif")
    assert done.returncode == 2 and "no exercise has passed yet" in done.stderr


def test_a_live_session_in_a_terminal(lse_file: Path):
    pytest.importorskip("pexpect")
    pytest.importorskip("pyte")
    sys.path.insert(0, str(Path(__file__).parent))
    from terminal import Terminal

    [mutant] = plant(lse_file, LSE, PLANTED[:1])
    q = whatif.question(mutant, PLANTED[0], [], CHECKS)
    t = Terminal("whatif", str(lse_file), "--limit", "1")
    try:
        t.wait_for("What if? 1/1")
        t.wait_for("Your prediction (1-4")
        assert "What happens now?" in t.text and mutant.change in t.text
        t.type(f"{q.correct + 1}\r")
        screen = t.wait_for("You predicted 1 of 1 outcome.")
        assert "Right: " in screen and "What grading it did" in screen
        assert t.exit_status() == 0
    finally:
        t.close()


def test_a_live_session_in_chinese_in_a_terminal(lse_file: Path):
    pytest.importorskip("pexpect")
    pytest.importorskip("pyte")
    sys.path.insert(0, str(Path(__file__).parent))
    from terminal import Terminal

    [mutant] = plant(lse_file, LSE, PLANTED[:1])
    q = whatif.question(mutant, PLANTED[0], [], CHECKS, lang="zh")
    t = Terminal("whatif", str(lse_file), "--limit", "1", "--lang", "zh")
    try:
        t.wait_for("如果这样改呢?1/1")
        t.wait_for("你的预测(1-4")
        screen = t.text
        assert "现在会怎样?" in screen and mutant.change in screen
        assert PLANTED[0].label(len(CHECKS), "zh") in screen  # the choices are in Chinese too
        assert "What happens now?" not in screen
        t.type(f"{q.correct + 1}\r")
        screen = t.wait_for("1 个结果中你预测对了 1 个。")
        assert "答对了:" in screen and "评分的实际结果" in screen
        assert t.exit_status() == 0
    finally:
        t.close()


# -- real mutants, graded in the sandbox -------------------------------------------------

def test_real_mutants_of_a_solution_are_killed_and_then_cached(lse_file: Path):
    started = time.monotonic()
    done = drill("whatif", str(lse_file), "--json", "--limit", "3")
    first_run = time.monotonic() - started
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert len(doc["mutants"]) == 3 and doc["killed"] >= 2
    killed = [m for m in doc["mutants"] if m["outcome"]["status"] != "survives"]
    assert all(m["outcome"]["failed"] and m["outcome"]["diagnoses"] for m in killed)
    started = time.monotonic()
    again = drill("whatif", str(lse_file), "--json", "--limit", "3")
    assert json.loads(again.stdout) == doc
    assert time.monotonic() - started < first_run  # nothing graded the second time


def test_a_mutant_that_loops_forever_is_stopped_by_its_short_timeout():
    # A learner who wrote a while loop: deleting its step leaves a loop that never ends.
    line = "            m[r], l[r] = online_softmax_update(m[r], l[r], rows[r, start:start + block_size])\n"
    source = SOFTMAX.solution_path.read_text().replace(
        "    for start in range(0, n, block_size):\n", "    start = 0\n    while start < n:\n").replace(
        line, line + "        start += block_size\n")
    [endless] = [m for m in mutate.mutants(source, ["delete-statement"]) if m.before == "start += block_size"]
    started = time.monotonic()
    grading = whatif.Grading(SOFTMAX, [endless], {}, timeout=3, jobs=1)
    try:
        outcome = grading.outcome(endless.id)
    finally:
        grading.close()
    assert outcome.status == "timeout", outcome
    assert time.monotonic() - started < 12


# -- questions in Chinese ------------------------------------------------------------

def test_labels_and_questions_in_chinese():
    assert whatif.Outcome("survives").label(lang="zh") == "所有检查仍然通过"
    assert whatif.Outcome("fails", ["a"]).label(lang="zh") == "只有«a»失败"
    assert whatif.Outcome("fails", ["a", "b", "c"]).label(11, "zh") == "11 项检查中 3 项失败,第一项是«a»"
    mutant = mutate.mutants(LSE.solution_path.read_text())[0]
    q = whatif.question(mutant, PLANTED[0], PLANTED[1:], CHECKS, lang="zh")
    assert q.choices[q.correct] == PLANTED[0].label(len(CHECKS), "zh")
    assert "所有检查仍然通过" in q.choices


# -- what-if cards, scheduled with FSRS --------------------------------------------------

def passed(path: Path, exercise) -> None:
    with Store() as store:
        store.record_attempt(exercise.key, "pass", path, 1.0, {})


def test_answers_schedule_cards_that_quiz_brings_after_the_written_ones(lse_file: Path):
    from drill import reviews

    passed(lse_file, LSE)
    chosen = plant(lse_file, LSE, PLANTED[:2])
    right = whatif.question(chosen[0], PLANTED[0], [PLANTED[1]], CHECKS)
    done = drill("whatif", str(lse_file), "--limit", "2", input=f"{right.correct + 1}\n\n")
    assert done.returncode == 0, done.stderr
    assert done.stdout.count("asked again in") == 2
    ids = [whatif.card_id(LSE, m.id) for m in chosen]
    with Store() as store:
        due = reviews.due_times(store)
        assert set(ids) <= set(due)
        assert due[ids[0]] > due[ids[1]]  # the right prediction comes back later than the "don't know"
        with store.conn:  # both due now (as if time had passed)
            store.conn.execute("UPDATE cards SET due = '2000-01-01T00:00:00+00:00' WHERE card_id LIKE 'whatif:%'")
    # The written cards come first; --tag whatif keeps only the questions about your code.
    quiz = drill("quiz", "--followups", "--tag", "whatif", "--limit", "5", input="\n\n")
    assert quiz.returncode == 0, quiz.stderr
    assert quiz.stdout.count("about your code · lse-merge") == 2 and chosen[0].change in quiz.stdout
    assert "Reviewed 2 cards, 0 right." in quiz.stdout
    with Store() as store, store.conn:  # due again
        store.conn.execute("UPDATE cards SET due = '2000-01-01T00:00:00+00:00' WHERE card_id LIKE 'whatif:%'")
    mixed = drill("quiz", "--followups", "--limit", "300", input="\n" * 400)
    first_code = mixed.stdout.index("about your code")
    assert "[1 · " in mixed.stdout[:first_code]  # written cards before it
    assert mixed.stdout.count("about your code") == 2


def test_editing_the_file_retires_its_questions(lse_file: Path):
    passed(lse_file, LSE)
    plant(lse_file, LSE, PLANTED[:3])
    with Store() as store:
        assert len(whatif.code_cards(store, [LSE])) == 3
        lse_file.write_text(lse_file.read_text() + "\n# edited\n")
        assert whatif.code_cards(store, [LSE]) == []


def test_quiz_in_chinese_marks_questions_about_your_code(lse_file: Path):
    passed(lse_file, LSE)
    plant(lse_file, LSE, PLANTED[:1])
    done = drill("quiz", "--followups", "--tag", "whatif", "--lang", "zh", input="\n")
    assert done.returncode == 0, done.stderr
    assert "关于你的代码 · lse-merge" in done.stdout and "现在会怎样?" in done.stdout
    assert "评分的实际结果" in done.stdout


def test_live_quiz_asks_about_your_code_in_a_terminal(lse_file: Path):
    pytest.importorskip("pexpect")
    pytest.importorskip("pyte")
    sys.path.insert(0, str(Path(__file__).parent))
    from terminal import Terminal

    passed(lse_file, LSE)
    [mutant] = plant(lse_file, LSE, PLANTED[:1])
    with Store() as store:
        [card] = whatif.code_cards(store, [LSE])
    t = Terminal("quiz", "--followups", "--tag", "whatif")
    try:
        t.wait_for("about your code · lse-merge")
        t.wait_for("Your prediction (1-4")
        assert mutant.change in t.text
        t.type(str(card.question.correct + 1))  # a single key
        screen = t.wait_for("Reviewed 1 card, 1 right.")
        assert "Right: " in screen and "What grading it did" in screen
        assert t.exit_status() == 0
    finally:
        t.close()


# -- survivors: equivalent or a gap --------------------------------------------------------

def test_a_survivor_is_compared_with_the_original_on_fresh_inputs():
    source = SOFTMAX.solution_path.read_text()
    found = mutate.mutants(source, ["delete-statement", "exp-base"])
    [same] = [m for m in found if m.before.startswith("x = np.asarray(x")]  # the input is already float64
    graded = whatif.grade_source(SOFTMAX, same.source, 20, original=source)
    assert graded.status == "survives" and graded.equivalent is True, graded
    assert "same values as your file on all" in graded.evidence
    # A file that gives other values, shadowed by the original: the comparison names the call.
    from drill.grader.runner import grade

    exp2 = next(m for m in found if m.operator == "exp-base")
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / SOFTMAX.file
        path.write_text(exp2.source)
        result = grade(SOFTMAX, path, 20, shadow=source.encode())
    assert whatif.equivalence_of(result)[0] is False and "differs at" in result.equivalence["differs"]


def test_each_graded_question_answers_with_what_grading_did(lse_file: Path):
    # Two real mutants with known outcomes: exp2 for one weight breaks the merge's values; `>=`
    # for `>` lets both-empty rows divide 0 by 0, which the checks with empty rows see.
    source = LSE.solution_path.read_text()
    found = mutate.mutants(source)
    exp2 = next(m for m in found if m.operator == "exp-base")
    shifted = next(m for m in found if m.change == "total > 0  →  total >= 0")
    grading = whatif.Grading(LSE, [exp2, shifted], {}, original=source)
    try:
        outcomes = [grading.outcome(exp2.id), grading.outcome(shifted.id)]
    finally:
        grading.close()
    # Which value checks catch exp2 depends on the seed (two parts of equal L weigh the same in
    # either base); the random splits merge many parts and catch it on every seed seen.
    assert outcomes[0].status == "fails"
    assert any(name.startswith(("Two halves of the keys", "Random splits into 2 to 8 parts"))
               for name in outcomes[0].failed), outcomes[0].failed
    assert outcomes[1].killed and "Both parts -inf give O = 0 and L = -inf, with no NaN and no warning" in outcomes[1].failed
    n = len(outcomes[1].failed)
    assert outcomes[1].label() == f"raises RuntimeWarning in {n} check{'s' if n > 1 else ''}"
    for mutant, outcome, other in ((exp2, *outcomes), (shifted, *outcomes[::-1])):
        for lang in ("en", "zh"):
            q = whatif.question(mutant, outcome, [other], outcome.checks or CHECKS, lang=lang)
            assert q.choices[q.correct] == outcome.label(len(outcome.checks or CHECKS), lang)


def test_a_killed_mutant_leaves_out_the_peak_memory_checks_and_its_answer_says_so():
    # 09's one peak-memory check runs last in what-if grading, and only while every check has passed.
    paged = catalog.resolve("paged-attention")
    source = paged.solution_path.read_text()
    memory = "Only the pages a sequence holds are gathered: a block table 32768 entries wide costs no memory"
    baseline = whatif.grade_source(paged, source, 20)
    assert baseline.status == "survives" and memory in baseline.checks and not baseline.not_run
    exp2 = next(m for m in mutate.mutants(source) if m.operator == "exp-base")
    outcome = whatif.grade_source(paged, exp2.source, 20, original=source)
    assert outcome.status == "fails" and outcome.not_run == [memory] and memory not in outcome.failed, outcome
    for lang, words in (("en", "; 1 not run"), ("zh", ";1 项未运行")):
        q = whatif.question(exp2, outcome, [baseline], baseline.checks, lang=lang)
        assert q.choices[q.correct] == outcome.label(len(baseline.checks), lang) and q.choices[q.correct].endswith(words)
    assert whatif.Outcome.from_json(json.loads(json.dumps(outcome.to_json()))) == outcome


def test_workers_forked_from_one_server_grade_as_started_ones(tmp_path: Path):
    from drill.grader.runner import ForkServer, grade

    passing, failing = tmp_path / "pass" / LSE.file, tmp_path / "fail" / LSE.file
    source = LSE.solution_path.read_text()
    for path, text in ((passing, source), (failing, mutate.mutants(source)[0].source)):
        path.parent.mkdir()
        path.write_text(text)
    server = ForkServer()
    try:
        forked = [grade(LSE, path, 20, seed=7, server=server) for path in (passing, failing, passing)]
    finally:
        server.close()
    started = [grade(LSE, path, 20, seed=7) for path in (passing, failing)]
    for one, other in zip(forked, started + started[:1]):
        assert (one.status, one.message, [(c.name, c.status, c.message) for c in one.checks]) == \
            (other.status, other.message, [(c.name, c.status, c.message) for c in other.checks])
    assert [r.status for r in forked] == ["pass", "fail", "pass"] and server._proc.returncode == 0


def test_every_check_that_measures_peak_memory_is_marked_so():
    # What-if grading runs the marked checks last and leaves them out after a failure; an unmarked
    # one would only cost the time this saves.
    # A check may measure through a helper of its own module: follow those calls too.
    for path in sorted({ex.checks_path for ex in catalog.all_exercises()}):
        functions = {fn.name: fn for fn in ast.parse(path.read_text()).body if isinstance(fn, ast.FunctionDef)}

        def calls(fn, seen):
            names = {ast.unparse(n.func).split(".")[-1] for n in ast.walk(fn) if isinstance(n, ast.Call)}
            for name in names & functions.keys() - seen:
                seen.add(name)
                names |= calls(functions[name], seen)
            return names

        for fn in functions.values():
            if not fn.name.startswith("test_"):
                continue
            marked = "pytest.mark.peak_memory" in {ast.unparse(d) for d in fn.decorator_list}
            assert marked == bool(calls(fn, {fn.name}) & {"peak_bytes", "memory_measured"}), (path.name, fn.name)


# -- drill dev mutants ----------------------------------------------------------------

def test_dev_mutants_reports_the_score_and_survivors_as_json():
    done = drill("dev", "mutants", "lse-merge", "--json", "--no-variants")
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    [solution] = doc["files"]
    assert doc["exercise"] == LSE.key and solution["file"] == "solution"
    assert solution["mutants"] >= 8 and solution["killed"] >= 8 and solution["score"] >= 0.9
    assert solution["killed"] + solution["equivalent"] + len(solution["survivors"]) == solution["mutants"]


def test_dev_mutants_refuses_what_it_cannot_score():
    assert drill("dev", "mutants", "nonsense").returncode == 2
    done = drill("dev", "mutants", "triton-forward")
    assert done.returncode == 2 and "NumPy exercises" in done.stderr


def test_a_pass_of_drill_check_is_the_baseline_of_whatif(lse_file: Path):
    done = drill("check", str(lse_file))
    assert done.returncode == 0, done.stderr
    with Store() as store:
        baseline = store.mutant_outcomes(whatif.file_key(lse_file.read_bytes(), LSE))[whatif.ORIGINAL]
    assert baseline["status"] == "survives" and len(baseline["checks"]) >= 10


def test_whatif_reads_a_background_preparation_instead_of_grading_again(lse_file: Path):
    from drill import whatif_prepare
    from drill.commands.whatif import QUESTIONS

    raw = lse_file.read_bytes()
    key = whatif.file_key(raw, LSE)
    chosen = mutate.spread(mutate.mutants(raw.decode()), QUESTIONS)
    # Outcomes no real grading of these mutants gives: seen in the answer, they came from the store.
    fake = whatif.Outcome("timeout", message="planted by the background preparation")
    with Store() as store:
        store.save_mutant_outcome(key, whatif.ORIGINAL, LSE.key, whatif.Outcome("survives", checks=CHECKS).to_json())
    with whatif_prepare.holding(key) as mine:
        assert mine and whatif_prepare.running(key)
        session = subprocess.Popen([sys.executable, "-m", "drill", "whatif", str(lse_file), "--json",
                                    "--limit", str(QUESTIONS)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        time.sleep(1.0)
        with Store() as store:
            for mutant in chosen:
                store.save_mutant_outcome(key, mutant.id, LSE.key, fake.to_json())
        out, err = session.communicate(timeout=120)
    assert not whatif_prepare.running(key)
    doc = json.loads(out)
    assert [m["id"] for m in doc["mutants"]] == [m.id for m in chosen], err
    assert {m["outcome"]["message"] for m in doc["mutants"]} == {fake.message}


def test_a_pass_in_a_terminal_grades_the_questions_in_the_background(lse_file: Path, monkeypatch):
    pytest.importorskip("pexpect")
    pytest.importorskip("pyte")
    sys.path.insert(0, str(Path(__file__).parent))
    from terminal import Terminal

    from drill import whatif_prepare
    from drill.commands.whatif import QUESTIONS

    monkeypatch.setenv(whatif_prepare.ENV_SWITCH, "1")
    t = Terminal("check", str(lse_file))
    try:
        t.wait_for("graded in the background")
        assert t.exit_status() == 0
    finally:
        t.close()
    raw = lse_file.read_bytes()
    key = whatif.file_key(raw, LSE)
    wanted = {m.id for m in mutate.spread(mutate.mutants(raw.decode()), QUESTIONS)}
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        with Store() as store:
            saved = store.mutant_outcomes(key)
        if wanted <= set(saved) and not whatif_prepare.running(key):
            break
        time.sleep(0.5)
    assert wanted <= set(saved), f"{len(wanted - set(saved))} of {len(wanted)} mutants not graded"
    assert all(saved[mid]["status"] in ("survives", "fails", "raises", "timeout") for mid in wanted)
