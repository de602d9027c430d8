"""Bad submissions get a one-line reason and exit code 1 or 2, never a traceback or a false pass."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

HEADER = "# drill: flashattention/online-softmax\nimport numpy as np\n"
GOOD = Path(__file__).resolve().parent.parent / "solutions" / "flashattention" / "01_online_softmax.py"


def drill(*args, cwd=None, timeout=120):
    return subprocess.run([sys.executable, "-m", "drill", *args], capture_output=True, text=True,
                          cwd=cwd, timeout=timeout)


def check_json(path: Path, *extra):
    proc = drill("check", str(path), "--json", *extra)
    assert "Traceback" not in proc.stderr, proc.stderr
    doc = json.loads(proc.stdout)  # stdout is exactly one JSON document
    return proc.returncode, doc


def write(tmp_path: Path, body: str, name="01_online_softmax.py") -> Path:
    path = tmp_path / name
    path.write_text(body)
    return path


CASES = {
    "syntax error": (HEADER + "def online_softmax(x, block_size:\n", 2, "syntax error"),
    "missing function": (HEADER + "def online_softmax(x, block_size):\n    return x\n", 2,
                         "missing function: online_softmax_update"),
    "missing module": ("# drill: flashattention/online-softmax\nimport numpyy\n", 2, "'numpyy', which is not installed"),
    "raises at import": (HEADER + "raise RuntimeError('boom')\n", 2, "RuntimeError at line 3"),
    "sys.exit at import": (HEADER + "import sys\nsys.exit(0)\n", 2, "sys.exit"),
    "os._exit in a check": (GOOD.read_text().replace('    """Softmax along the last axis, statistics streamed block by block."""',
                                                     '    import os; os._exit(0)'), 1, "ended with exit status 0"),
    "function raises": (GOOD.read_text().replace('    m_new = max(m, float(block.max())) if block.size else m',
                                                 '    m_new = 1 / 0'), 1, "ZeroDivisionError"),
    "wrong return type": (GOOD.read_text().replace('    return p.reshape(x.shape)', '    return p.tolist()'),
                          1, "not a numpy array"),
    "wrong shape": (GOOD.read_text().replace('    return p.reshape(x.shape)', '    return p.reshape(-1)[:1]'),
                    1, "wrong shape"),
    "patches numpy comparisons": (GOOD.read_text().replace('    return p.reshape(x.shape)', '    return p.reshape(x.shape) * 2')
                                  + "\nnp.allclose = lambda *a, **k: True\nnp.isclose = lambda *a, **k: True\n"
                                  "np.testing.assert_allclose = lambda *a, **k: None\n"
                                  "np.array_equal = lambda *a, **k: True\n", 1, "is wrong"),
    "huge allocation": (HEADER + "def online_softmax_update(m, l, block):\n    np.ones((1 << 40,))\n"
                        "def online_softmax(x, block_size):\n    np.ones((1 << 40,))\n", 1, "ran out of memory"),
    "nan result": (GOOD.read_text().replace('    return p.reshape(x.shape)', '    return p.reshape(x.shape) * np.nan'),
                   1, "contains NaN"),
}


@pytest.mark.parametrize("case", CASES, ids=list(CASES))
def test_bad_submission(case, tmp_path):
    body, code, phrase = CASES[case]
    rc, doc = check_json(write(tmp_path, body))
    assert rc == code, doc
    assert doc["status"] == ("error" if code == 2 else "fail")
    text = doc["message"] + " ".join(c["message"] for c in doc["checks"])
    assert phrase in text, text
    if code == 2:
        assert "\n" not in doc["message"]


def test_infinite_loop_at_import_times_out(tmp_path):
    path = write(tmp_path, HEADER + "while True:\n    pass\n")
    started = time.monotonic()
    rc, doc = check_json(path, "--timeout", "3")
    assert rc == 2 and "timed out after 3 s while importing" in doc["message"]
    assert time.monotonic() - started < 15


def test_infinite_loop_in_a_check_times_out(tmp_path):
    path = write(tmp_path, GOOD.read_text().replace(
        '    block = np.asarray(block, dtype=np.float64)', '    while True:\n        pass'))
    rc, doc = check_json(path, "--timeout", "4")
    assert rc == 1 and doc["status"] == "fail", doc["message"]
    # Every check hangs here: each gets its share of the 4 s, then the rest are reported as not run.
    assert "not run in the 4 s time limit" in doc["message"]
    assert any(c["message"].startswith("did not finish") for c in doc["checks"])
    assert doc["checks"][-1]["status"] == "not-run"


def test_a_check_that_hangs_fails_alone_and_the_rest_still_run(tmp_path):
    # Only the 2-D input hangs (one check): it times out, the subject is restarted for the
    # next check, and every other check runs and passes within the limit.
    path = write(tmp_path, GOOD.read_text().replace(
        "    rows = np.atleast_2d(x)  # [rows, n]",
        "    rows = np.atleast_2d(x)  # [rows, n]\n    while x.ndim == 2 and x.shape == (6, 11):\n        pass"))
    rc, doc = check_json(path, "--timeout", "12")
    assert rc == 1 and doc["status"] == "fail", doc["message"]
    hung = [c for c in doc["checks"] if c["message"].startswith("did not finish")]
    assert len(hung) >= 1, doc["checks"]
    assert all(c["status"] == "pass" for c in doc["checks"] if c not in hung)
    assert "not-run" not in [c["status"] for c in doc["checks"]]
    total = len(doc["checks"])
    assert doc["message"].startswith(f"{total - len(hung)} of {total} checks passed")
    assert all(c["seconds"] > 0 for c in doc["checks"])  # each check's own time, set-up included


def test_huge_output_is_stopped(tmp_path):
    path = write(tmp_path, HEADER + "import sys\nwhile True:\n    sys.stdout.write('x' * 1000000)\n")
    rc, doc = check_json(path, "--timeout", "30")
    assert rc == 2 and "printed more than 64 MB" in doc["message"]
    assert len(doc["output"]) <= 2000


def test_printing_code_keeps_json_clean(tmp_path):
    body = GOOD.read_text().replace('    """One streaming step: returns (m_new, l_new)."""',
                                    '    print("debug", m, l)')
    rc, doc = check_json(write(tmp_path, body))
    assert rc == 0 and doc["status"] == "pass"
    assert any("debug" in c["output"] for c in doc["checks"])


def test_missing_file_directory_and_non_exercise(tmp_path):
    proc = drill("check", str(tmp_path / "nope.py"))
    assert proc.returncode == 2 and "no such file" in proc.stderr and "Traceback" not in proc.stderr
    proc = drill("check", str(tmp_path))
    assert proc.returncode == 2 and "is a directory" in proc.stderr
    other = write(tmp_path, "print('hello')\n", name="notes.py")
    proc = drill("check", str(other))
    assert proc.returncode == 2 and "not a drill exercise" in proc.stderr
    rc, doc = check_json(other)
    assert rc == 2 and doc["status"] == "error" and doc["schema"] == 1


def test_user_code_cannot_see_the_database(tmp_path, drill_home):
    body = GOOD.read_text() + "\nimport os\nassert 'DRILL_HOME' not in os.environ\n"
    rc, doc = check_json(write(tmp_path, body))
    assert rc == 0, doc


def test_a_scratch_module_beside_the_file_does_not_shadow_the_standard_library(tmp_path):
    (tmp_path / "random.py").write_text("x = 1\n")
    rc, doc = check_json(write(tmp_path, GOOD.read_text()))
    assert rc == 0 and doc["status"] == "pass", doc["message"]
    assert doc["output"] == ""  # pytest's own reporting never reaches the learner's output


def test_a_fifo_or_a_device_is_refused_at_once(tmp_path):
    fifo = tmp_path / "01_online_softmax.py"
    os.mkfifo(fifo)
    started = time.monotonic()
    rc, doc = check_json(fifo)
    assert rc == 2 and "not a regular file" in doc["message"]
    link = tmp_path / "02_tiling_shapes.py"
    link.symlink_to("/dev/zero")
    rc, doc = check_json(link)
    assert rc == 2 and "not a regular file" in doc["message"]
    assert time.monotonic() - started < 30


def test_an_unreadable_file_gets_its_own_reason_not_no_header(tmp_path):
    """A file too large (or a FIFO) under a name no exercise has was reported as having no
    header, by check, watch and whatif alike; each now says what is wrong with the file.
    A NUL byte's syntax error has no line number: the reason no longer says 'line None'."""
    huge = write(tmp_path, HEADER + "#" * (2 << 20) + "\n", name="huge attempt.py")
    rc, doc = check_json(huge)
    assert rc == 2 and "too large" in doc["message"], doc["message"]
    proc = drill("whatif", str(huge))
    assert proc.returncode == 2 and "too large" in proc.stderr and "Traceback" not in proc.stderr
    fifo = tmp_path / "pipe.py"
    os.mkfifo(fifo)
    proc = drill("whatif", str(fifo))
    assert proc.returncode == 2 and "not a regular file" in proc.stderr and "Traceback" not in proc.stderr
    rc, doc = check_json(write(tmp_path, GOOD.read_text() + "x = '\0'\n", name="nul.py"))
    assert rc == 2 and "null bytes" in doc["message"] and "None" not in doc["message"], doc["message"]


def test_a_byte_order_mark_does_not_hide_the_header(tmp_path):
    path = tmp_path / "my_attempt.py"
    path.write_bytes(b"\xef\xbb\xbf" + GOOD.read_bytes())
    rc, doc = check_json(path)
    assert rc == 0 and doc["exercise"] == "flashattention/online-softmax", doc["message"]


def test_a_file_name_that_is_not_utf8_is_graded_and_recorded(tmp_path):
    name = os.fsencode(tmp_path) + b"/attempt-\xff.py"
    with open(name, "wb") as f:
        f.write(GOOD.read_bytes())
    proc = subprocess.run([sys.executable, "-m", "drill", "check", name], capture_output=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert b"Traceback" not in proc.stderr
    proc = drill("status")
    assert proc.returncode == 0 and "Traceback" not in proc.stderr


def test_escape_sequences_from_user_code_never_reach_the_terminal(tmp_path):
    body = GOOD.read_text().replace('    """One streaming step: returns (m_new, l_new)."""',
                                    '    print("\\x1b[2J\\x1b[H"); raise ValueError("\\x1b[32mPASSED\\x1b[0m\\r")')
    path = write(tmp_path, body)
    rc, doc = check_json(path)
    assert rc == 1 and "\x1b" not in json.dumps(doc) and "\\u001b" not in json.dumps(doc)
    proc = drill("check", str(path))
    assert proc.returncode == 1 and "\x1b[2J" not in proc.stdout and "\x1b[32mPASSED" not in proc.stdout


def test_c1_controls_and_bidi_overrides_never_reach_the_report(tmp_path):
    """U+009B is a one-character CSI and U+202E reverses what follows it (issue 31): both are
    stripped from the report and --json, in a message and in printed output alike."""
    body = GOOD.read_text().replace('    """One streaming step: returns (m_new, l_new)."""',
                                    '    print("\\u009b2J\\u202eDESSAP"); raise ValueError("\\u009b32m\\u2066ok\\u202e")')
    path = write(tmp_path, body)
    rc, doc = check_json(path)
    text = json.dumps(doc, ensure_ascii=False)
    assert rc == 1 and "DESSAP" in text and not any(c in text for c in "\u009b\u202e\u2066"), text[:500]
    proc = drill("check", str(path))
    assert proc.returncode == 1 and not any(c in proc.stdout for c in "\u009b\u202e\u2066")


def test_an_error_names_the_deepest_line_of_your_file(tmp_path):
    # The user's function calls a helper of theirs, which calls into the standard library:
    # the line named is the helper's (the user's own line closest to the error).
    body = GOOD.read_text().replace('    m_new = max(m, float(block.max())) if block.size else m',
                                    '    m_new = _parse("not a number")') + "\n\ndef _parse(text):\n    return float(text)\n"
    line = body.splitlines().index("    return float(text)") + 1
    rc, doc = check_json(write(tmp_path, body))
    assert rc == 1
    messages = [c["message"] for c in doc["checks"] if c["status"] == "fail"]
    assert messages and all(f"ValueError: could not convert string to float: 'not a number' (your file, line {line})" in m
                            for m in messages), messages


def test_user_line_is_the_deepest_frame_in_the_users_file(tmp_path):
    from drill.grader.usertrace import user_frames, user_line

    path = tmp_path / "mine.py"
    path.write_text("import json\n\ndef outer():\n    return inner()\n\ndef inner():\n    return json.loads('{')\n")
    namespace: dict = {}
    exec(compile(path.read_text(), str(path), "exec"), namespace)
    with pytest.raises(ValueError) as caught:
        namespace["outer"]()
    assert [f.lineno for f in user_frames(caught.value, str(path))] == [4, 7]
    assert user_line(caught.value, str(path)) == 7
    assert user_line(caught.value, str(tmp_path / "other.py")) is None
