"""The learner's loop as a new user meets it: where a failure is in their own file, which file and
workspace `drill check` graded, what -k selected, what --repro writes, and what the docs promise."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from drill import catalog, progress, selection
from drill.cli import cli
from drill.commands.start import workspace_readme

ROOT = Path(__file__).resolve().parent.parent
TOPIC = catalog.load_topic("flashattention")
FORWARD = TOPIC.get("flash-forward")
MERGE = TOPIC.get("lse-merge")
PLANTED = ROOT / "tests" / "planted" / "flashattention"


def run(*args):
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    return result.exit_code, result.output


@pytest.fixture
def workspace(tmp_path, monkeypatch):
    ws = tmp_path / "ws"
    assert run("start", "flashattention", "--dir", str(ws))[0] == 0
    monkeypatch.chdir(ws)
    return ws


# -- where the failure is ---------------------------------------------------------------------


def test_a_raising_check_shows_the_learners_frame_with_path_line_and_source(workspace):
    code, out = run("check", FORWARD.file)
    assert code == 1
    line = next(n for n, text in enumerate(FORWARD.stub_path.read_text().splitlines(), 1)
                if "raise NotImplementedError" in text)
    assert f'File "{workspace / FORWARD.file}", line {line}, in flash_attention_forward' in out
    assert "raise NotImplementedError" in out
    code, out = run("check", FORWARD.file, "--json")
    frames = json.loads(out)["checks"][0]["details"]["traceback"]
    assert str(workspace / FORWARD.file) in frames and "your file" not in frames


def test_a_syntax_error_shows_the_source_line_and_a_caret(workspace):
    path = workspace / FORWARD.file
    text = path.read_text()
    path.write_text(text.replace("def flash_attention_forward(", "def flash_attention_forward((", 1))
    code, out = run("check", FORWARD.file)
    assert code == 2
    lines = out.splitlines()
    at = next(i for i, text in enumerate(lines) if text.strip().startswith(f'File "{path}", line'))
    assert "def flash_attention_forward((" in lines[at + 1] and lines[at + 2].strip() == "^"
    assert lines[at + 3].startswith("SyntaxError")


# -- which file, which workspace ---------------------------------------------------------------


def test_a_header_that_disagrees_with_the_file_name_is_said_and_not_counted(workspace):
    shutil.copy(FORWARD.solution_path, workspace / MERGE.file)  # 03's code saved as 04's file
    code, out = run("check", MERGE.file)
    text = " ".join(out.split())
    assert code == 0 and "flashattention/flash-forward" in text  # the header decides
    assert (f"warning: {MERGE.file} is named for 04 lse-merge, but its header says flashattention/flash-forward: "
            "graded as 03 flash-forward") in text
    assert f"not saved to your progress: only a file named {FORWARD.file} counts" in text
    rows = {r["id"]: r for r in json.loads(run("list", "--json")[1])["exercises"]}
    assert rows["flash-forward"]["state"] == "not started" and rows["lse-merge"]["state"] == "not started"


def test_a_mistyped_name_gets_did_you_mean(workspace):
    code, out = run("check", "03_flash_forwad.py")
    assert code == 2 and "did you mean 03_flash_forward.py?" in out
    code, out = run("check", "flash-froward")
    assert code == 2 and "did you mean flash-forward?" in out
    code, out = run("check", "zzzz.py")
    assert code == 2 and "did you mean" not in out


def test_a_second_start_dir_says_which_workspace_check_now_uses(tmp_path, monkeypatch):
    first, second = tmp_path / "one", tmp_path / "two"
    run("start", "flashattention", "--dir", str(first))
    code, out = run("start", "flashattention", "--dir", str(second))
    text = " ".join(out.split())
    assert code == 0 and "this is now the flashattention workspace" in text and f"no longer in {first}" in text
    assert f"--dir {first} switches back" in text
    # The report names the file graded with its folder when it is not where you stand.
    monkeypatch.chdir(tmp_path)
    code, out = run("check", "03")
    assert f"(two/{FORWARD.file})" in out


# -- -k -----------------------------------------------------------------------------------------


def test_selection_matches_whole_words():
    causal = selection.parse("causal")
    assert causal.matches("Causal: query i sees keys j <= i + (sk - sq) [sq == sk]")
    assert causal.matches("Peak memory at sq = sk = 4096 stays far below one score matrix [causal]")
    assert not causal.matches("Peak memory at sq = sk = 4096 stays far below one score matrix [non-causal]")
    assert selection.parse("non-causal").matches("x [non-causal]")
    assert selection.parse("peak memory and not causal").matches("Peak memory at s [non-causal]")
    assert not selection.parse("memory peak").matches("Peak memory at s")  # side by side, in order
    assert selection.parse("(causal or shapes) and not peak").matches("Matches attention for awkward shapes")
    for bad, why in (("causal and", "ends too early"), ("(causal", "never closed"), ("or x", "expected a word")):
        with pytest.raises(selection.SelectionError, match=re.escape(why)):
            selection.parse(bad)


def test_k_says_how_many_checks_it_selected_and_one_notice(workspace):
    shutil.copy(FORWARD.solution_path, workspace / FORWARD.file)
    code, out = run("check", FORWARD.file, "-k", "causal")
    names = [line for line in out.splitlines() if line.startswith("✔")]
    assert code == 0 and not any("non-causal" in name for name in names)
    head = out.splitlines()[0]
    total = int(head.split(" of ")[1].split()[0])
    assert total > len(names) and head.startswith(f"{len(names)} of {total} checks selected: passed · "
                                                  "flashattention/flash-forward")
    assert "PASSED" not in out
    assert out.count("-k causal") == 1 and "not saved to your progress" in out
    doc = json.loads(run("check", FORWARD.file, "-k", "causal", "--json")[1])
    assert doc["selection"]["keyword"] == "causal" and doc["selection"]["selected"] == len(names)
    assert doc["selection"]["of"] == total
    assert json.loads(run("list", "--json")[1])["exercises"][2]["state"] == "not started"


# -- --repro ------------------------------------------------------------------------------------


@pytest.mark.parametrize("ex_id, planted", [("flash-decoding", "global_normalised"), ("paged-attention", "head_mod")])
def test_repro_replays_the_failing_call_of_08_and_09(tmp_path, ex_id, planted):
    ex = TOPIC.get(ex_id)
    path = tmp_path / ex.file
    shutil.copy(PLANTED / ex_id / f"{planted}.py", path)
    code, out = run("check", str(path), "--repro")
    script = tmp_path / f"repro_{path.stem}.py"
    assert code == 1 and f"wrote {script.name}" in out and script.is_file()
    replay = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert "differs" in replay.stdout, replay.stdout + replay.stderr
    shutil.copy(ex.solution_path, path)  # the fix: the same call now matches
    replay = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert "matches" in replay.stdout and "differs" not in replay.stdout, replay.stdout + replay.stderr


# -- small things --------------------------------------------------------------------------------


def test_json_on_a_file_that_is_not_an_exercise_claims_no_sandbox(tmp_path):
    notes = tmp_path / "notes.py"
    notes.write_text("x = 1\n")
    code, out = run("check", str(notes), "--json")
    doc = json.loads(out)
    assert code == 2 and doc["status"] == "error" and doc["sandbox"] is None


def test_the_last_hint_after_a_pass_does_not_say_after_a_pass(workspace):
    ex = TOPIC.get("online-softmax")
    for _ in ex.hints[:-1]:
        run("hint", ex.id)
    shutil.copy(ex.solution_path, workspace / ex.file)
    assert run("check", ex.file)[0] == 0
    code, out = run("hint", ex.id)
    text = " ".join(out.split())
    assert "That was the last hint. You have passed online-softmax: drill solution online-softmax" in text
    assert "After a pass" not in text


def test_status_names_the_pytorch_build_without_importing_torch(tmp_path):
    probe = ("import sys; from drill.cli import cli\n"
             "try:\n    cli(['status'], prog_name='drill')\nexcept SystemExit:\n    pass\n"
             "print('TORCH IMPORTED' if 'torch' in sys.modules else 'no torch import')")
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert "no torch import" in proc.stdout, proc.stdout + proc.stderr
    from drill.install_hint import torch_build

    build = torch_build()
    if build is not None:
        assert f"PyTorch {build.version}, the {'CPU' if build.kind == 'cpu' else 'CUDA'}" in proc.stdout
    else:
        assert "PyTorch: not installed" in proc.stdout


def test_docs_say_what_each_exercise_needs():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    numpy_only = [ex.number for ex in TOPIC.exercises if ex.needs == "cpu"]
    sentence = " ".join(readme[readme.index("`python -m pip install .` alone"):].split("\n\n")[0].split())
    listed = re.search(r"NumPy exercises \(([^)]*)\)", sentence).group(1)
    numbers = set()
    for part in re.split(r",\s*|\s+and\s+", listed):
        if "–" in part:
            a, b = part.split("–")
            numbers |= {f"{n:02d}" for n in range(int(a), int(b) + 1)}
        elif part.strip():
            numbers.add(part.strip())
    assert numbers == set(numpy_only)
    # The workspace README: the Triton exercises grade under the interpreter without a GPU.
    text = workspace_readme(TOPIC)
    for ex in TOPIC.exercises:
        row = next(line for line in text.splitlines() if f"`{ex.file}`" in line)
        assert row.endswith(f"| {progress.needs_in_words(ex)} |")
        if ex.needs == "gpu":
            assert "interpreter" in row
    # The intro names the decoding exercises too.
    intro = " ".join(TOPIC.intro.split())
    for words in ("FlashDecoding", "PagedAttention", "decode kernels in Triton"):
        assert words in intro


@pytest.mark.slow
@pytest.mark.parametrize("ex_id", ["ring-attention", "ring-backward"])
def test_ring_exercises_time_each_check_from_its_set_up(tmp_path, ex_id):
    ex = TOPIC.get(ex_id)
    pytest.importorskip("torch")
    path = tmp_path / ex.file
    shutil.copy(ex.solution_path, path)
    code, out = run("check", str(path), "--json")
    doc = json.loads(out)
    assert code == 0, [(c["name"], c["message"][:300]) for c in doc["checks"] if c["status"] != "pass"]
    # The first check starts every rank (a fixture shared by all): its time is the real launch.
    assert doc["checks"][0]["seconds"] > 0.5
    assert sum(c["seconds"] for c in doc["checks"]) <= doc["seconds"] + 0.1


def test_piped_output_has_no_trailing_spaces(workspace):
    for args in (("start", "flashattention", "--dir", str(workspace)), ("status",), ("list",),
                 ("check", FORWARD.file), ("hint", "flash-forward")):
        _, out = run(*args)
        padded = [line for line in out.splitlines() if line != line.rstrip()]
        assert not padded, (args, padded[:3])
