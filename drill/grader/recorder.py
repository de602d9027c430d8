"""A pytest plugin that records each hidden check's outcome as a JSON line.

Runs inside the trusted worker process. Each check gets a time limit of its own
(SIGALRM) that keeps time back for the checks after it, so a check that hangs fails
alone and the rest still run while the exercise's limit allows. Its failure is turned
into a message written for the learner. The user's code is never in this process: what
it did arrives as values, as a UserCodeError (it raised or exited) or as SubjectGone
(its process ended).
"""

from __future__ import annotations

import errno
import signal
import time

import pytest

from drill.grader.expect import CheckFailure, noted, take_notes
from drill.grader.proxy import TORCH_NOTE, SubjectGone, SubmissionProxy, UserCodeError
from drill.grader.result import TOO_MUCH_OUTPUT


OUTPUT_LIMIT = 2000
STOP_MARGIN_S = 0.5  # stop a hung check this long before the deadline, to report it
# Time kept back for the checks after the running one: three times what the checks so far took
# on average, at least MIN_RESERVE_S, at most half of what is left.
MIN_RESERVE_S = 5.0
LAST_CHANCE_S = 0.2  # less than this left: the remaining checks are reported as not run
MEMORY_NOT_RUN = ("not run: a check had already failed, and what-if grading leaves out the peak-memory checks "
                  "(each starts a fresh process) once one has")


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
        return (f"did not finish in {limit_s:.1f} s (its share of the time limit): an infinite loop, "
                "or a loop that never advances?", {})
    if isinstance(exc, UserCodeError):
        return explain_user_error(exc.info, memory_mb), {"traceback": exc.info.get("traceback", "")}
    if isinstance(exc, SubjectGone):
        return (exc.reason, {})
    if isinstance(exc, MemoryError):
        return ("the grader ran out of memory checking your result: is it far larger than expected?", {})
    kind = type(exc).__name__
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return (f"your result could not be checked: {kind}{': ' + text if text else ''}", {})


def explain_user_error(info: dict, memory_mb: int) -> str:
    """One line for an exception (or exit) raised by the user's function in the subject."""
    kind = str(info.get("type", "Exception"))
    text = str(info.get("message") or "")
    where = f" (your file, line {info['line']})" if info.get("line") else ""
    if kind == "NotImplementedError":
        return f"not written yet: your code raises NotImplementedError{where}; replace the TODO"
    if kind == "MemoryError":
        return (f"your code ran out of memory (the limit is {memory_mb} MB): "
                "is something building a huge array, such as a full sq×sk matrix?")
    if kind == "OSError" and info.get("errno") == errno.EFBIG:
        return TOO_MUCH_OUTPUT
    if kind == "SystemExit":
        return f"your code called sys.exit({info.get('exit_code')}) inside a check{where}"
    if kind == "RuntimeError" and "active drivers" in text:
        # Triton's autotuner times its configs on a GPU; the interpreter has no driver to time with.
        return (f"your code raised RuntimeError: {text}{where}: under the Triton interpreter "
                "triton.autotune cannot time its configs; choose the block sizes yourself on a CPU, "
                "or give autotune a do_bench that runs the kernel once and returns equal times")
    if str(info.get("module", "")).startswith(("_pytest", "pytest")):
        return f"your code raised pytest's {kind}{where}: skipping or ending a check from your code is a failure"
    return f"your code raised {kind}{': ' + text if text else ''}{where}"


class Recorder:
    def __init__(self, emit, deadline: float, memory_mb: int, *, first_failure: bool = False,
                 repro_path: str = "", seed: int | None = None, keyword: str = "", prefixes: tuple = (),
                 memory_after_failure: bool = True):
        self.emit = emit
        self.seed = seed  # the run's seed, kept with --repro's values
        self.keyword = keyword  # `drill check -k`: whole words of the names shown (drill.selection)
        self.prefixes = tuple(prefixes)  # authoring: only the checks whose names start so (planted files)
        self.first_failure = first_failure
        # False for a what-if mutant: a failure has killed it, and the peak-memory checks, each in a
        # fresh subject, are most of a grading's time (three of 03's 1.2 s of CPU).
        self.memory_after_failure = memory_after_failure
        self.repro_path = repro_path  # where `drill check --repro` wants the failing call's values
        self.deadline = deadline  # time.time() by which a running check is stopped
        self.limit_s = 0.0  # the time the running check was given
        self.memory_mb = memory_mb
        self.started: dict[str, float] = {}
        self.failed_phase: dict[str, dict] = {}
        self.skipped: dict[str, str] = {}
        self.total = 0  # checks collected before -k selected some
        self.left = 0  # checks not yet started
        self.finished: list[float] = []  # seconds of the checks that ended without timing out
        self.item_end = 0.0  # time.time() by which the running check must end
        self.timed_out: set[str] = set()

    @pytest.hookimpl(tryfirst=True)
    def pytest_collection_modifyitems(self, config: pytest.Config, items: list[pytest.Item]) -> None:
        self.total = len(items)
        if not self.memory_after_failure:  # the peak-memory checks last, so that any failure comes before them
            items.sort(key=lambda item: item.get_closest_marker("peak_memory") is not None)
        if not self.keyword and not self.prefixes:
            return
        if self.keyword:
            from drill.selection import parse

            expression = parse(self.keyword)  # the CLI has read it already
            wanted = expression.matches
        else:
            wanted = lambda name: name.startswith(self.prefixes)  # noqa: E731
        chosen = [item for item in items if wanted(check_name(item))]
        dropped = [item for item in items if not wanted(check_name(item))]
        if dropped:
            config.hook.pytest_deselected(items=dropped)
        items[:] = chosen

    @pytest.hookimpl
    def pytest_collection_finish(self, session: pytest.Session) -> None:
        take_notes()  # anything noted while the user's file was imported is not a check's
        for item in session.items:
            # pytest's own failure text (source, locals) is never shown and costs ~0.1 s a check.
            item.repr_failure = lambda excinfo: excinfo.exconly()
        self.left = len(session.items)
        self.emit(event="collected", count=len(session.items), total=self.total)

    def _share(self) -> float:
        """The seconds the next check may take: what is left, less the time kept for the rest."""
        left_s = self.deadline - time.time() - STOP_MARGIN_S
        after = self.left - 1  # checks still to run after this one
        if after <= 0:
            return max(0.1, left_s)
        mean = sum(self.finished) / len(self.finished) if self.finished else 0.0
        reserve = min(left_s / 2, max(MIN_RESERVE_S, 3 * mean * after))
        return max(0.1, left_s - reserve)

    def _alarm(self, seconds: float):
        def on_alarm(signum, frame):
            raise CheckTimeout()

        previous = signal.signal(signal.SIGALRM, on_alarm)
        signal.setitimer(signal.ITIMER_REAL, max(0.05, seconds))
        return previous

    @staticmethod
    def _disarm(previous) -> None:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem):
        """A peak-memory check after a failure, when those are left out: reported not run, never started."""
        if self.memory_after_failure or not self.failed_phase or not item.get_closest_marker("peak_memory"):
            return None
        self.left -= 1
        self.emit(event="check", name=check_name(item), kind="verified", status="not-run", message=MEMORY_NOT_RUN,
                  details={}, seconds=0.0, output="", notes=[])
        return True

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_setup(self, item: pytest.Item):
        # A check's time and its limit start with its set-up: a shared fixture (06 starts
        # every rank in one) is timed in the check that builds it.
        self.started[item.nodeid] = time.perf_counter()
        self.limit_s = self._share()
        self.item_end = time.time() + self.limit_s
        previous = self._alarm(self.limit_s)
        try:
            yield
        finally:
            self._disarm(previous)

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_call(self, item: pytest.Item):
        previous = self._alarm(self.item_end - time.time())
        try:
            yield
        finally:
            self._disarm(previous)

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo):
        outcome = yield
        report: pytest.TestReport = outcome.get_result()
        if report.skipped and isinstance(report.longrepr, tuple):
            self.skipped[item.nodeid] = str(report.longrepr[-1]).removeprefix("Skipped: ")
        if report.when == "setup":
            SubmissionProxy.last_call = None
        if report.failed and call.excinfo is not None and item.nodeid not in self.failed_phase:
            if isinstance(call.excinfo.value, CheckFailure) and call.excinfo.value.hint and noted(TORCH_NOTE):
                call.excinfo.value.hint = TORCH_NOTE  # torch's own ~200 MB is what to fix first
            message, details = explain(call.excinfo, self.limit_s, self.memory_mb)
            self.failed_phase[item.nodeid] = {"message": message, "details": details}
            if isinstance(call.excinfo.value, CheckTimeout):
                self.timed_out.add(item.nodeid)
            if self.repro_path and report.when == "call":
                self._save_repro(item)
            if self.first_failure:
                item.session.shouldstop = "stopped at the first failure"
                self.emit(event="stopped", reason="first failure")
        if report.when == "teardown":
            failure = self.failed_phase.get(item.nodeid)
            skipped = self.skipped.get(item.nodeid)
            notes = take_notes()
            if failure and failure["details"].get("hint") == TORCH_NOTE:
                notes.remove(TORCH_NOTE)  # said once, as the likely mistake
            output = "".join(SubmissionProxy.outputs)[-OUTPUT_LIMIT:]  # what the user's code printed
            SubmissionProxy.outputs.clear()
            seconds = time.perf_counter() - self.started.get(item.nodeid, time.perf_counter())
            self.left -= 1
            if item.nodeid not in self.timed_out:
                self.finished.append(seconds)
            if self.left > 0 and self.deadline - time.time() - STOP_MARGIN_S < LAST_CHANCE_S \
                    and not item.session.shouldstop:
                item.session.shouldstop = "the time limit is used up"
                self.emit(event="stopped", reason="time limit")
            self.emit(
                event="check",
                name=check_name(item),
                # Observed checks rest on what the subject reports of itself (DESIGN.md, Grading).
                kind="observed" if item.get_closest_marker("observed") else "verified",
                status="fail" if failure else ("skip" if skipped is not None else "pass"),
                message=failure["message"] if failure else (skipped or ""),
                details=failure["details"] if failure else {},
                seconds=round(seconds, 4),
                output=output,
                notes=notes,
            )

    def _save_repro(self, item: pytest.Item) -> None:
        """The failing check's last call and the values it should have returned (once per run)."""
        from drill.grader.repro import save

        references = getattr(item.module, "REFERENCES", {})
        if SubmissionProxy.last_call is None or SubmissionProxy.last_call[0] not in references:
            return
        name, args, kwargs = SubmissionProxy.last_call
        try:
            expected = references[name](*args, **kwargs)
        except Exception:  # noqa: BLE001 - no repro is better than a broken grading run
            return
        if save(self.repro_path, check_name(item), name, args, kwargs, expected, seed=self.seed):
            self.emit(event="repro", check=check_name(item), function=name)
            self.repro_path = ""
