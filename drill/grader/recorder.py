"""A pytest plugin that records each hidden check's outcome as a JSON line.

Runs inside the worker process. Each check gets a time limit of its own (SIGALRM),
and its failure is turned into a message written for the learner.
"""

from __future__ import annotations

import errno
import json
import signal
import time
import traceback

import pytest

from drill.grader import submission
from drill.grader.expect import CheckFailure, take_notes
from drill.grader.result import TOO_MUCH_OUTPUT


OUTPUT_LIMIT = 2000
STOP_MARGIN_S = 0.5  # stop a hung check this long before the deadline, to report it


class CheckTimeout(BaseException):
    """Raised by the alarm when a check runs past its limit (BaseException: user code can't swallow it)."""


def check_name(item: pytest.Item) -> str:
    doc = getattr(getattr(item, "function", None), "__doc__", None)
    if doc and doc.strip():
        name = doc.strip().splitlines()[0].rstrip(".")
    else:
        name = item.name.removeprefix("test_").replace("_", " ")
    if hasattr(item, "callspec"):
        name += f" [{item.callspec.id}]"
    return name


def explain(excinfo: pytest.ExceptionInfo, limit_s: float, memory_mb: int) -> tuple[str, dict]:
    """Turn an exception from a check into (message, details) for the learner."""
    exc = excinfo.value
    if isinstance(exc, CheckFailure):
        return exc.text(), exc.details()
    if isinstance(exc, CheckTimeout):
        return (f"did not finish in the {limit_s:.1f} s left: an infinite loop, or a loop that never advances?", {})
    if isinstance(exc, NotImplementedError):
        where = _user_line(excinfo)
        return (f"not written yet: your code raises NotImplementedError{where}; replace the TODO", {})
    if isinstance(exc, MemoryError):
        return (
            f"your code ran out of memory (the limit is {memory_mb} MB): "
            "is something building a huge array, such as a full sq×sk matrix?",
            {},
        )
    if isinstance(exc, OSError) and exc.errno == errno.EFBIG:
        return (TOO_MUCH_OUTPUT, {})
    if isinstance(exc, SystemExit):
        return (f"your code called sys.exit({exc.code!r}) inside a check{_user_line(excinfo)}", {})
    where = _user_line(excinfo)
    kind = type(exc).__name__
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    if where:
        return (f"your code raised {kind}{': ' + text if text else ''}{where}", {})
    return (f"your result could not be checked: {kind}{': ' + text if text else ''}", {})


def _user_line(excinfo: pytest.ExceptionInfo) -> str:
    """' (your file, line N)' for the deepest frame in the user's file, else ''."""
    user = submission.path()
    line = None
    for frame in traceback.extract_tb(excinfo.tb):
        if user and frame.filename == user:
            line = frame.lineno
    return f" (your file, line {line})" if line else ""


class Recorder:
    def __init__(self, events, deadline: float, memory_mb: int):
        self.events = events
        self.deadline = deadline  # time.time() by which a running check is stopped
        self.limit_s = 0.0  # the time the running check was given
        self.memory_mb = memory_mb
        self.started: dict[str, float] = {}
        self.failed_phase: dict[str, dict] = {}
        self.skipped: dict[str, str] = {}

    def emit(self, **event) -> None:
        self.events.write(json.dumps(event) + "\n")
        self.events.flush()

    @pytest.hookimpl
    def pytest_collection_finish(self, session: pytest.Session) -> None:
        take_notes()  # anything noted while the user's file was imported is not a check's
        self.emit(event="collected", count=len(session.items))

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_call(self, item: pytest.Item):
        def on_alarm(signum, frame):
            raise CheckTimeout()

        previous = signal.signal(signal.SIGALRM, on_alarm)
        self.limit_s = max(0.1, self.deadline - time.time() - STOP_MARGIN_S)
        signal.setitimer(signal.ITIMER_REAL, self.limit_s)
        try:
            yield
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo):
        outcome = yield
        report: pytest.TestReport = outcome.get_result()
        if report.when == "setup":
            self.started[item.nodeid] = time.perf_counter()
        if report.skipped and isinstance(report.longrepr, tuple):
            self.skipped[item.nodeid] = str(report.longrepr[-1]).removeprefix("Skipped: ")
        if report.failed and call.excinfo is not None and item.nodeid not in self.failed_phase:
            message, details = explain(call.excinfo, self.limit_s, self.memory_mb)
            self.failed_phase[item.nodeid] = {"message": message, "details": details}
            if isinstance(call.excinfo.value, CheckTimeout):
                # Later checks would most likely hang the same way: stop, and say so.
                item.session.shouldstop = "a check timed out; the remaining checks were not run"
                self.emit(event="stopped")
        if report.when == "teardown":
            failure = self.failed_phase.get(item.nodeid)
            skipped = self.skipped.get(item.nodeid)
            output = (report.capstdout + report.capstderr)[-OUTPUT_LIMIT:]
            self.emit(
                event="check",
                name=check_name(item),
                status="fail" if failure else ("skip" if skipped is not None else "pass"),
                message=failure["message"] if failure else (skipped or ""),
                details=failure["details"] if failure else {},
                seconds=round(time.perf_counter() - self.started.get(item.nodeid, time.perf_counter()), 4),
                output=output,
                notes=take_notes(),
            )
