"""The check report: one diagnosis per mistake, and piped output that is neither wrapped nor cut."""

from __future__ import annotations

import io
import os
import subprocess
import sys

from rich.console import Console

from drill.console import THEME
from drill.grader.result import CheckResult, GradeResult
from drill.report import report

HINT = "the scores were not scaled: S = Q Kᵀ · scale"


def failing(name: str, called: str, hint: str = HINT) -> CheckResult:
    message = f"O is wrong\ncalled: {called}\nyours: 1.0\nexpected: 2.0\nlikely mistake: {hint}"
    return CheckResult(name, "fail", message, 0.01, details={"called": called, "hint": hint})


def rendered(result: GradeResult, plain: bool, width: int = 100) -> str:
    out = io.StringIO()
    Console(file=out, width=width, color_system=None, theme=THEME).print(report(result, "t/x  (x.py)", plain=plain),
                                                           soft_wrap=plain)
    return out.getvalue()


def sixteen_of_one_mistake() -> GradeResult:
    checks = [failing(f"check {n}", f"f(n={n})") for n in range(16)]
    checks.insert(3, CheckResult("passing one", "pass", "", 0.0))
    checks.append(failing("other", "g()", hint="L was computed in base 2"))
    return GradeResult("t/x", "x.py", "fail", "17 of 18 checks failed", checks)


def test_one_mistake_is_said_once_with_the_first_checks_details():
    for plain in (False, True):
        text = rendered(sixteen_of_one_mistake(), plain)
        assert text.count(HINT) == 1 and text.count("L was computed in base 2") == 1
        assert "f(n=0)" in text and "f(n=1)" not in text  # the first failing check's details
        assert "also explains the 15 checks marked [1]" in text
        assert text.count("[1]") == 15 + 3  # each marked check, the diagnosis and its last line
        assert "[2]" not in text  # a diagnosis of one check needs no number
        for n in range(16):
            assert f"check {n}" in text  # every check still has its line
        assert len(text.splitlines()) < 40


def test_different_inputs_without_a_named_mistake_are_not_merged():
    checks = [CheckResult("a", "fail", "O is wrong (largest error 0.3)\ncalled: f(1)"),
              CheckResult("b", "fail", "O is wrong (largest error 0.9)\ncalled: f(2)"),
              CheckResult("c", "fail", "O is wrong (largest error 0.9)\ncalled: f(3)")]
    text = rendered(GradeResult("t/x", "x.py", "fail", "3 of 3 checks failed", checks), plain=True)
    assert "f(1)" in text and "f(2)" in text and "f(3)" not in text
    assert "also explains the 1 check marked [1]" in text


def test_piped_report_keeps_long_lines_whole():
    long_hint = "a very long explanation " * 12
    result = GradeResult("t/x", "x.py", "fail", "1 of 1 checks failed", [failing("only", "f()", long_hint)])
    text = rendered(result, plain=True, width=60)
    assert f"likely mistake: {long_hint}" in text  # one line, not cut at 60 columns
    assert "╭" not in text and "│" not in text


def _piped(*args: str) -> str:
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    proc = subprocess.run([sys.executable, "-m", "drill", *args], capture_output=True, text=True, env=env,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_piped_tables_keep_every_column():
    out = _piped("show", "tiling", "--causal", "--s", "256")
    table = [line for line in out.splitlines() if "│" in line or "┃" in line]
    assert table and not any("…" in line for line in table), out
    assert "diagonal" in out
    status = _piped("status")
    assert all(word in status for word in ("exercise", "needs", "state", "attempts", "last result"))


def test_plural():
    from drill.words import plural

    assert plural(1, "file") == "1 file" and plural(10, "card") == "10 cards" and plural(0, "check") == "0 checks"
    assert plural(2, "match", "matches") == "2 matches"


def test_printed_output_shows_under_its_check_bounded_and_labelled():
    from drill.report import PRINTED_LINES

    noisy = CheckResult("prints a lot", "pass", seconds=0.1,
                        output="\n".join(f"debug line {i}" for i in range(50)))
    text = rendered(GradeResult("t/x", "x.py", "pass", "1 check passed", [noisy]), plain=True)
    assert "your code printed:" in text and "debug line 0" in text
    assert f"debug line {PRINTED_LINES}" not in text and f"{50 - PRINTED_LINES} more lines" in text
