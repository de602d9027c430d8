"""Golden report files: per exercise, a passing, a failing and an ungradable submission, with the
--json document and the plain report each must produce (exercism keeps results.json the same way).

    pass: the solution; fail: one planted file (FAILING); error: the solution with one edit (BROKEN)
    tests/golden/<topic>/<id>/<case>.json   the expected `drill check --json` document, normalised
    tests/golden/<topic>/<id>/<case>.txt    the expected plain report, normalised

Regenerate after an intended change with DRILL_REGOLD=1 (then read the diff before committing).
"""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

from rich.console import Console

from drill import authoring, catalog
from drill.console import THEME
from drill.grader.result import GradeResult
from drill.report import report

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = ROOT / "tests" / "golden"
PLANTED = ROOT / "tests" / "planted"
# Every exercise graded the same way on every machine; ring attention (06) and the Triton
# exercises (07, 10) are graded differently with and without a GPU, so their reports are not fixed.
# The Triton backward (11) has golden files for its interpreter report: checked only where no GPU
# driver is found (CPU_ONLY), the case CI runs. The ring backward (12) runs on CPU ranks only.
EXERCISES = ["online-softmax", "tiling-shapes", "flash-forward", "lse-merge", "flash-backward",
             "flash-decoding", "paged-attention", "triton-backward", "ring-backward", "mla-decode",
             "block-mask"]
CPU_ONLY = {"triton-backward"}
CASES = ("pass", "fail", "error")
FAILING = {"online-softmax": "l_not_rescaled", "tiling-shapes": "floor_instead_of_ceil",
           "flash-forward": "missing_scale", "lse-merge": "weights_swapped", "flash-backward": "dq_missing_scale",
           "flash-decoding": "global_normalised", "paged-attention": "head_mod",
           "mla-decode": "rope_dropped", "block-mask": "window_one_too_wide",
           "triton-backward": "causal_unmasked_in_dkdv", "ring-backward": "left_on_visitor"}
# (text in the solution, what replaces it): each makes the file ungradable in another way.
BROKEN = {
    "online-softmax": ("def online_softmax(", "def online_softmax(:"),  # a syntax error
    "tiling-shapes": ("def hbm_elements(", "def hbm_elements_renamed("),  # a function missing
    "flash-forward": ("import numpy as np", "import numpy as np\nimport scipy_not_installed_here"),
    "lse-merge": ("import numpy as np", "import numpy as np\n\nTABLE = {}[\"missing\"]"),  # raises on import
    "flash-backward": ("def flash_attention_backward(", "  def flash_attention_backward("),  # bad indent
    "flash-decoding": ("def flash_decode(", "def flash_decode_renamed("),  # the second function missing
    "paged-attention": ("import numpy as np", "import numpy as np\n\nraise SystemExit(3)"),  # exits on import
    "ring-backward": ("def ring_attention_backward(", "def ring_attention_backward(:"),  # a syntax error
    "mla-decode": ("def mla_decode(", "def mla_decode_absorbed("),  # the function missing
    "triton-backward": ("import triton\n", "import triton\nimport triton.language.no_such_module\n"),  # a bad import
    "block-mask": ("import math", "import math\n\nWINDOW = default_window"),  # a NameError on import
}
WIDTH = 100
GOLDEN_SEED = 1  # the checks' random inputs, fixed so that figures in messages are the same every run

# Figures that differ from run to run: times, and measured memory.
VOLATILE = [
    (re.compile(r"\d+(\.\d+)?\s?(ms|s)\b"), "<time>"),
    (re.compile(r"\d+(\.\d+)?\s?(KB|MB|GB|KiB|MiB|GiB|kB)\b"), "<size>"),
]


def submission(ex: catalog.Exercise, case: str, folder: Path) -> Path:
    if case == "pass":
        return ex.solution_path
    if case == "fail":
        return PLANTED / ex.topic / ex.id / f"{FAILING[ex.id]}.py"
    old, new = BROKEN[ex.id]
    text = ex.solution_path.read_text(encoding="utf-8")
    assert old in text, f"{ex.solution_path} no longer contains {old!r}: update BROKEN in tests/golden.py"
    path = folder / "broken" / ex.file
    path.parent.mkdir(exist_ok=True)
    path.write_text(text.replace(old, new, 1), encoding="utf-8")
    return path


def normalised_text(text: str, folder: str) -> str:
    text = text.replace(folder, "<dir>")
    # Whether Landlock confines the subject depends on the machine's kernel, not the submission.
    text = re.sub(r"sandbox: (full|partial)", "sandbox: <level>", text)
    for pattern, mark in VOLATILE:
        text = pattern.sub(mark, text)
    return text


def normalised_json(result: GradeResult, folder: str) -> dict:
    doc = result.to_json()

    def walk(value):
        if isinstance(value, dict):
            return {k: (0.0 if k == "seconds" else "<level>" if k in ("sandbox", "layers") else walk(v))
                    for k, v in value.items()}
        if isinstance(value, list):
            return [walk(v) for v in value]
        if isinstance(value, str):
            return normalised_text(value, folder)
        return value

    return walk(doc)


def plain_report(result: GradeResult, ex: catalog.Exercise) -> str:
    out = io.StringIO()
    Console(file=out, width=WIDTH, color_system=None, theme=THEME).print(
        report(result, f"{ex.key}  ({ex.file})", plain=True), soft_wrap=True)
    return out.getvalue()


def produce(ex: catalog.Exercise, case: str, folder: Path) -> tuple[str, str]:
    """(JSON document, plain report) for one case, both normalised, as stored in the golden files."""
    result = authoring.grade_copy(ex, submission(ex, case, folder), folder, seed=GOLDEN_SEED)
    doc = json.dumps(normalised_json(result, str(folder)), indent=1, ensure_ascii=False, sort_keys=True) + "\n"
    return doc, normalised_text(plain_report(result, ex), str(folder))
