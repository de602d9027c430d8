"""The grading process: load the user's file, then run the hidden checks on it.

Started by drill.grader.runner in a fresh interpreter with resource limits. It
never sees the progress database. It writes JSON lines to the events file:
start, loaded | load_error, collected, one `check` per check, done (with the nonce
read from stdin, so a run cut short can never look finished).

usage: python -m drill.grader.worker USER_FILE CHECKS_FILE EVENTS_FILE FUNCTIONS DEADLINE MEMORY_MB
"""

from __future__ import annotations

import errno
import importlib.util
import json
import os
import sys
import traceback

from drill.grader.result import TOO_MUCH_OUTPUT



def load_error_message(exc: BaseException, user_file: str) -> str:
    """One line saying why the file could not be imported."""
    if isinstance(exc, SyntaxError):
        return f"syntax error in your file, line {exc.lineno}: {exc.msg}"
    if isinstance(exc, ModuleNotFoundError):
        package = (exc.name or "").split(".")[0]
        advice = f" (pip install {package})" if package in ("torch", "triton") else ""
        return f"your file imports {exc.name!r}, which is not installed here{advice}"
    if isinstance(exc, OSError) and exc.errno == errno.EFBIG:
        return TOO_MUCH_OUTPUT
    if isinstance(exc, SystemExit):
        return "your file called sys.exit() while being imported; keep top-level code to definitions"
    line = None
    for frame in traceback.extract_tb(exc.__traceback__):
        if frame.filename == user_file:
            line = frame.lineno
    where = f" at line {line}" if line else ""
    detail = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"your file raised {type(exc).__name__}{where} while being imported" + (f": {detail}" if detail else "")


def keep_user_folder_last() -> None:
    """`python -m` puts the working folder (the user's) first on sys.path, so a scratch
    random.py there would replace the standard library's for numpy and pytest. Move it last:
    the user's file can still import its neighbours."""
    here = os.getcwd()
    entries = [p for p in sys.path if p not in ("", here)]
    sys.path[:] = entries + [here]


def main(argv: list[str]) -> int:
    keep_user_folder_last()
    user_file, checks_file, events_path, functions, deadline, memory_mb = argv
    nonce = sys.stdin.readline().strip()

    # Import the grader's own modules (and numpy's comparison helpers) before any user code runs.
    import pytest

    from drill.grader import expect, submission  # noqa: F401  (binds numpy helpers early)
    from drill.grader.recorder import Recorder

    events = open(events_path, "a", encoding="utf-8")

    def emit(**event) -> None:
        events.write(json.dumps(event) + "\n")
        events.flush()

    emit(event="start")
    spec = importlib.util.spec_from_file_location("submission", user_file)
    module = importlib.util.module_from_spec(spec)
    sys.modules["submission"] = module
    try:
        spec.loader.exec_module(module)
    except BaseException as exc:  # noqa: BLE001 - any failure at import is reported, not raised
        emit(event="load_error", message=load_error_message(exc, user_file))
        emit(event="done", nonce=nonce, exit=2)
        events.close()
        os._exit(0)

    missing = [name for name in functions.split(",") if name and not callable(getattr(module, name, None))]
    if missing:
        emit(event="load_error", message=f"missing function{'s' if len(missing) > 1 else ''}: "
             + ", ".join(missing) + " (keep the names and signatures of the stub)")
        emit(event="done", nonce=nonce, exit=2)
        events.close()
        os._exit(0)
    submission.set_loaded(module, user_file)
    emit(event="loaded")

    recorder = Recorder(events, float(deadline), int(memory_mb))
    code = pytest.main(
        # No terminal reporter: the output the learner sees is their own code's, not pytest's.
        # An empty ini file keeps the checks independent of whatever project holds them.
        [checks_file, "-c", os.devnull, "--rootdir", os.path.dirname(checks_file),
         "-p", "no:cacheprovider", "-p", "no:randomly", "-p", "no:terminal"],
        plugins=[recorder],
    )
    emit(event="done", nonce=nonce, exit=int(code))
    events.close()
    # Skip interpreter teardown: user atexit handlers and threads cannot change the outcome now.
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
