"""The commands, driven as a user drives them."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner

from terminal import as_from_a_terminal  # noqa: E402  (tests/ is on sys.path)

from drill.cli import cli
from drill.store import Store

ROOT = Path(__file__).resolve().parent.parent
SOLUTIONS = ROOT / "solutions" / "flashattention"


def run(*args):
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    return result.exit_code, result.output


def test_help_lists_the_commands_without_importing_heavy_modules():
    code = ("import sys, drill.cli\n"
            "drill.cli.cli.main(['--help'], standalone_mode=False)\n"
            "heavy = [m for m in ('torch', 'triton', 'numpy', 'fsrs', 'genanki', 'snowballstemmer') if m in sys.modules]\n"
            "print('HEAVY', heavy)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert "HEAVY []" in out
    for command in ("start", "check", "hint", "solution", "status", "export"):
        assert command in out


def test_start_lays_out_workspace_and_keeps_edits(tmp_path):
    ws = tmp_path / "ws"
    code, out = run("start", "flashattention", "--dir", str(ws))
    assert code == 0 and "HBM" in out and "01_online_softmax.py" in out
    assert (ws / "01_online_softmax.py").is_file() and (ws / "README.md").is_file()
    (ws / "01_online_softmax.py").write_text("# drill: flashattention/online-softmax\n# my work\n")
    code, out = run("start", "flashattention", "--dir", str(ws))
    assert code == 0 and "kept your edited" in out and "01_online_softmax.py" in out
    assert "# my work" in (ws / "01_online_softmax.py").read_text()


def test_start_unknown_topic_lists_known(tmp_path):
    code, out = run("start", "cuda-graphs", "--dir", str(tmp_path / "x"))
    assert code == 2 and "known topics: flashattention" in out


def test_check_by_name_inside_workspace_records_progress(tmp_path):
    ws = tmp_path / "ws"
    run("start", "flashattention", "--dir", str(ws))
    code, out = run("check", "01_online_softmax.py", "--json")  # found through the workspace
    doc = json.loads(out)
    assert code == 1 and doc["status"] == "fail" and doc["exercise"] == "flashattention/online-softmax"
    assert {"schema", "exercise", "status", "checks", "message", "seconds"} <= set(doc)
    assert all({"name", "status", "message", "seconds"} <= set(c) for c in doc["checks"])
    shutil.copy(SOLUTIONS / "01_online_softmax.py", ws / "01_online_softmax.py")
    code, out = run("check", str(ws / "01_online_softmax.py"))
    assert code == 0 and "PASSED" in out and "drill check 02_tiling_shapes.py" in " ".join(out.split())
    with Store() as store:
        assert [a.status for a in store.attempts("flashattention/online-softmax")] == ["fail", "pass"]
    code, out = run("status", "--json")
    states = {e["exercise"]: e["state"] for e in json.loads(out)["exercises"]}
    assert states["flashattention/online-softmax"] == "passed"
    assert states["flashattention/tiling-shapes"] == "not started"
    assert json.loads(out)["next"] == "flashattention/tiling-shapes"


def test_header_wins_over_file_name(tmp_path):
    path = tmp_path / "my_attempt.py"
    shutil.copy(SOLUTIONS / "02_tiling_shapes.py", path)
    code, out = run("check", str(path), "--json")
    assert code == 0 and json.loads(out)["exercise"] == "flashattention/tiling-shapes"


def test_hints_are_progressive_and_remembered():
    code, first = run("hint", "online-softmax")
    assert code == 0 and "hint 1 of 3" in first
    code, second = run("hint", "online-softmax")
    assert "hint 2 of 3" in second and "hint 1 of 3" not in second
    run("hint", "online-softmax")
    code, again = run("hint", "online-softmax")
    assert "hint 3 of 3" in again and "last hint" in again
    code, everything = run("hint", "online-softmax", "--all")
    assert all(f"hint {n} of 3" in everything for n in (1, 2, 3))
    code, out = run("hint", "no-such-exercise")
    assert code == 2 and "unknown exercise" in out


def test_hint_without_argument_follows_the_current_exercise():
    code, out = run("hint")
    assert code == 0 and "online-softmax" in out


def test_solution_is_locked_until_passed(tmp_path):
    code, out = run("solution", "tiling-shapes")
    assert code == 2 and "--force" in out
    code, out = run("solution", "tiling-shapes", "--force")
    assert code == 0 and "def block_sizes" in out and "before you have passed" in out
    path = tmp_path / "02_tiling_shapes.py"
    shutil.copy(SOLUTIONS / "02_tiling_shapes.py", path)
    run("check", str(path))
    code, out = run("solution", "tiling-shapes")
    assert code == 0 and "def block_sizes" in out and "before you have passed" not in out


def test_status_before_start_suggests_start():
    code, out = run("status")
    assert code == 0 and "not started" in out and "drill start flashattention" in out


def test_check_without_file_grades_the_current_exercise(tmp_path):
    run("start", "flashattention", "--dir", str(tmp_path / "ws"))
    code, out = run("check", "--json")
    assert code == 1 and json.loads(out)["exercise"] == "flashattention/online-softmax"


def test_hint_text_keeps_square_brackets():
    from drill import catalog

    hint = catalog.load_topic("flashattention").get("flash-forward").hints[0]
    assert "[" in hint  # shapes such as [br, bc]: they must not be read as rich markup
    code, out = run("hint", "flash-forward")
    assert code == 0 and hint.split("[", 1)[1].split("]")[0] in " ".join(out.split())


def test_start_inside_the_workspace_reuses_it(tmp_path, monkeypatch):
    ws = tmp_path / "ws"
    run("start", "flashattention", "--dir", str(ws))
    monkeypatch.chdir(ws)
    code, out = run("start", "flashattention")
    assert code == 0 and not (ws / "flashattention").exists()


def test_piped_solution_is_runnable_python(tmp_path):
    import ast

    proc = subprocess.run([sys.executable, "-m", "drill", "solution", "online-softmax", "--force"],
                          capture_output=True, text=True)
    assert proc.returncode == 0 and "before you have passed" in proc.stderr  # the warning stays off stdout
    ast.parse(proc.stdout)
    assert proc.stdout.startswith("# drill: flashattention/online-softmax")


def test_ctrl_c_during_a_check_exits_130(tmp_path):
    import signal
    import time

    path = tmp_path / "01_online_softmax.py"
    path.write_text("# drill: flashattention/online-softmax\nimport time\ntime.sleep(30)\n")
    scratch = tmp_path / "tmp"  # the grading's folder goes here, so its processes can be found
    scratch.mkdir()
    proc = subprocess.Popen([sys.executable, "-m", "drill", "check", str(path)], stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "TMPDIR": str(scratch)}, preexec_fn=as_from_a_terminal)
    time.sleep(1.5)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=20)
    assert proc.returncode == 130 and "interrupted" in err and "Traceback" not in err
    # The worker runs in a session of its own, out of the signal's reach: drill must end it (and the
    # subject under it) itself, not leave it to run until its deadline.
    assert not _processes_working_in(scratch)


def _processes_working_in(folder: Path) -> list[int]:
    """Pids whose working directory lies in `folder` (the trusted worker's is the grading's folder)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cwd = os.readlink(entry / "cwd")
            except OSError:  # gone, or not ours to read
                continue
            if cwd.startswith(str(folder)):
                found.append(int(entry.name))
    return found


def test_check_by_number_grades_the_folder_you_stand_in(tmp_path, monkeypatch):
    first, last = tmp_path / "first", tmp_path / "last"
    run("start", "flashattention", "--dir", str(first))
    run("start", "flashattention", "--dir", str(last))  # the workspace started last
    shutil.copy(SOLUTIONS / "01_online_softmax.py", first / "01_online_softmax.py")
    monkeypatch.chdir(first)
    code, out = run("check", "01", "--json")
    assert code == 0 and json.loads(out)["file"] == str((first / "01_online_softmax.py").resolve())
    monkeypatch.chdir(tmp_path)  # no exercise here: the current topic's workspace
    code, out = run("check", "01", "--json")
    assert code == 1 and json.loads(out)["file"] == str((last / "01_online_softmax.py").resolve())


def test_check_help_states_the_catalog_limits():
    from drill import catalog

    code, out = run("check", "--help")
    text = " ".join(out.split())
    for ex in catalog.all_exercises():
        assert f"{ex.timeout:g} s for" in text
    assert "60 s" not in text  # no exercise has a 60-second limit


def test_keyword_and_first_failure_reach_the_grader_and_a_partial_run_is_not_saved(tmp_path, monkeypatch):
    import drill.grader.runner as runner
    from drill.grader.result import GradeResult

    seen = []

    def fake_grade(ex, path, timeout=None, **options):
        seen.append(options)
        return GradeResult(ex.key, str(path), "pass", "all 1 checks passed")

    monkeypatch.setattr(runner, "grade", fake_grade)
    path = tmp_path / "01_online_softmax.py"
    shutil.copy(SOLUTIONS / "01_online_softmax.py", path)
    code, out = run("check", str(path), "-k", "causal and not ragged")
    assert code == 0 and "not saved" in out
    code, out = run("check", str(path), "--first-failure")
    assert seen == [{"keyword": "causal and not ragged", "first_failure": False, "repro": False, "seed": None},
                    {"keyword": None, "first_failure": True, "repro": False, "seed": None}]
    with Store() as store:  # only the full run counts
        assert len(store.attempts("flashattention/online-softmax")) == 1
    code, out = run("check", str(path), "-k", " ")
    assert code == 2 and "-k needs" in out


def test_keyword_runs_only_matching_checks_and_first_failure_stops(tmp_path):
    path = tmp_path / "01_online_softmax.py"
    shutil.copy(SOLUTIONS / "01_online_softmax.py", path)
    code, out = run("check", str(path), "-k", "worked and", "--json")
    assert code == 2 and "ends too early" in json.loads(out)["message"]
    code, out = run("check", str(path), "-k", "nothing-like-this", "--json")
    assert code == 2 and "no check's name has the word" in json.loads(out)["message"]
    code, out = run("check", str(path), "-k", "worked and example", "--json")
    doc = json.loads(out)
    assert code == 0 and [c["name"] for c in doc["checks"]] == [
        "The worked example (1, 3 | 2, 5) stepped block by block"]
    stub = tmp_path / "stub" / "01_online_softmax.py"
    stub.parent.mkdir()
    shutil.copy(SOLUTIONS.parent.parent / "exercises" / "flashattention" / "01_online_softmax.py", stub)
    code, out = run("check", str(stub), "--first-failure", "--json")
    doc = json.loads(out)
    assert code == 1 and [c["status"] for c in doc["checks"]][:1] == ["fail"]
    assert doc["checks"][-1]["status"] == "not-run" and "first failure" in doc["message"]


def test_start_inside_a_git_checkout_says_where_the_workspace_went_and_how_to_move_it(tmp_path, monkeypatch):
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    (repo / "pyproject.toml").write_text('[project]\nname = "mlsys-drill"\n')
    monkeypatch.chdir(repo)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    code, out = run("start", "flashattention")
    text = " ".join(out.split())
    assert code == 0 and "inside drill's own source checkout" in text
    move = next(line for line in out.splitlines() if line.strip().startswith("mv "))
    target = tmp_path / "home" / "drill-flashattention"
    assert move.split() == ["mv", str(repo / "flashattention"), str(target), "&&", "drill", "start",
                            "flashattention", "--dir", str(target)]
    # The advice works: moving and starting there keeps the files and registers the new place.
    (repo / "flashattention" / "01_online_softmax.py").write_text("# drill: flashattention/online-softmax\n# mine\n")
    target.parent.mkdir()
    (repo / "flashattention").rename(target)
    code, out = run("start", "flashattention", "--dir", str(target))
    assert code == 0 and "kept your edited" in out and "Note:" not in out
    with Store() as store:
        assert store.workspace("flashattention") == target
    monkeypatch.chdir(tmp_path)  # outside any repository: no note about one
    code, out = run("start", "flashattention")
    text = " ".join(out.split())
    assert code == 0 and "workspace is inside" not in text
    # ...but the workspace moved from `target`, whose files are still there: said, with the way back.
    assert "this is now the flashattention workspace" in text and f"no longer in {target}" in text


def test_a_file_name_that_is_not_utf8_is_graded_and_recorded(tmp_path):
    import os

    # The exercise's own name (only that counts for progress) in a folder whose name is not UTF-8.
    path = Path(os.fsdecode(bytes(tmp_path) + b"/attempt-\xff/01_online_softmax.py"))
    path.parent.mkdir()
    shutil.copy(SOLUTIONS / "01_online_softmax.py", path)
    proc = subprocess.run([sys.executable, "-m", "drill", "check", str(path)], capture_output=True)
    assert proc.returncode == 0 and b"Traceback" not in proc.stderr, proc.stderr
    assert "attempt-\ufffd/01_online_softmax.py" in proc.stdout.decode("utf-8")
    with Store() as store:
        assert store.passed("flashattention/online-softmax")
        assert store.attempts("flashattention/online-softmax")[0].file == str(path)


def test_repro_writes_a_script_that_replays_the_failing_call(tmp_path):
    planted = Path(__file__).parent / "planted" / "flashattention" / "flash-forward" / "acc_not_rescaled.py"
    path = tmp_path / "03_flash_forward.py"
    shutil.copy(planted, path)
    code, out = run("check", str(path), "--repro")
    script = tmp_path / "repro_03_flash_forward.py"
    assert code == 1 and "wrote repro_03_flash_forward.py" in " ".join(out.split())
    text = script.read_text()
    assert "np.exp" not in text and "softmax" not in text  # values only, no reference implementation
    replay = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, cwd=tmp_path)
    assert replay.returncode == 1 and "differs" in replay.stdout
    shutil.copy(SOLUTIONS / "03_flash_forward.py", path)
    replay = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, cwd=tmp_path)
    assert replay.returncode == 0 and "differs" not in replay.stdout
