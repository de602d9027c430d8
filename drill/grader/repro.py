"""`drill check --repro`: the failing call's inputs and expected values, as a script to run.

The trusted worker saves the last call of the first failing check (arguments and the
values the check's reference returns for them) in an .npz; the runner writes a small
script beside the learner's file that loads it, calls their function and compares. Only
values travel: the script contains no reference implementation.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np

from drill.grader import protocol


def save(path: str, check: str, function: str, args: list, kwargs: dict, expected, *, seed: int | None = None) -> bool:
    arrays: list = []
    doc = {"check": check, "function": function, "seed": seed, "args": protocol._encode(list(args), arrays),
           "kwargs": protocol._encode(dict(kwargs), arrays), "expected": protocol._encode(expected, arrays)}
    try:
        np.savez(path, doc=np.array(json.dumps(doc)), **{f"a{i}": a for i, a in enumerate(arrays)})
    except (OSError, ValueError):
        return False
    return True


def write(bundle: Path, user_file: Path) -> Path:
    """Put the bundle and its script beside the user's file; returns the script's path."""
    stem = f"repro_{user_file.stem}"
    target = user_file.with_name(stem + ".npz")
    shutil.copyfile(bundle, target)
    with np.load(target, allow_pickle=False) as data:
        doc = json.loads(str(data["doc"]))
    script = user_file.with_name(stem + ".py")
    # Every name goes in as a Python literal (repr): a file name holding quotes or newlines
    # stays a string and never becomes code.
    script.write_text(SCRIPT.format(check=repr(doc["check"]), function=repr(doc["function"]),
                                    script=repr(script.name), user_file=repr(user_file.name),
                                    bundle=repr(target.name), seed=repr(doc.get("seed"))), encoding="utf-8")
    return script


SCRIPT = '''# Re-run the call behind a failing drill check, outside drill.
#
# Run this script with python, or step through it in a debugger; edit the file named in
# USER_FILE and run it again. The inputs and expected values were saved by drill (in
# BUNDLE); how the expected values were computed is not included. `drill check --seed SEED`
# grades with the same random inputs again.
CHECK = {check}
FUNCTION = {function}
SCRIPT = {script}
USER_FILE = {user_file}
BUNDLE = {bundle}
SEED = {seed}

import importlib.util
import json
import pathlib

import numpy as np

HERE = pathlib.Path(__file__).resolve().parent
data = np.load(HERE / BUNDLE, allow_pickle=False)
doc = json.loads(str(data["doc"]))


def decode(value):
    if not isinstance(value, dict):
        return value
    (kind, body), = value.items()
    if kind == "array":
        return data[f"a{{body}}"]
    if kind in ("tuple", "list"):
        items = [decode(v) for v in body]
        return tuple(items) if kind == "tuple" else items
    if kind == "dict":
        return {{k: decode(v) for k, v in body}}
    return {{"float": float, "int": int}}.get(kind, str)(body)


def compare(got, want, where="result"):
    if isinstance(want, (tuple, list)):
        if not isinstance(got, (tuple, list)) or len(got) != len(want):
            print(f"{{where}}: expected {{len(want)}} values, got {{got!r:.200}}")
            return False
        return all([compare(g, w, f"{{where}}[{{i}}]") for i, (g, w) in enumerate(zip(got, want))])
    if isinstance(want, dict):
        if not isinstance(got, dict):
            print(f"{{where}}: expected a dict, got {{type(got).__name__}}")
            return False
        return all([compare(got.get(k), w, f"{{where}}[{{k!r}}]") for k, w in want.items()])
    got, want = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
    if got.shape != want.shape:
        print(f"{{where}}: shape {{got.shape}}, expected {{want.shape}}")
        return False
    with np.errstate(invalid="ignore"):
        error = np.where(np.isfinite(want) & np.isfinite(got), np.abs(got - want), 0.0)
        error[np.isfinite(want) != np.isfinite(got)] = np.inf
        error[~np.isfinite(want) & (got != want)] = np.inf
    worst = np.unravel_index(int(np.argmax(error)), error.shape) if error.size else ()
    ok = not error.size or float(error.max()) <= 1e-9 + 1e-9 * float(np.abs(want[np.isfinite(want)]).max(initial=0))
    print(f"{{where}}: {{'matches' if ok else 'differs'}}", end="")
    if error.size and not ok:
        print(f"; largest error {{float(error[worst]):.3g}} at index {{tuple(int(i) for i in worst)}}: "
              f"yours {{float(got[worst]):.10g}}, expected {{float(want[worst]):.10g}}", end="")
    print()
    return ok


spec = importlib.util.spec_from_file_location("submission", HERE / USER_FILE)
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
args, kwargs = decode(doc["args"]), decode(doc["kwargs"])
result = getattr(module, doc["function"])(*args, **kwargs)
raise SystemExit(0 if compare(result, decode(doc["expected"])) else 1)
'''
