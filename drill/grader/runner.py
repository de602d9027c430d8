"""Grade a user's file: start the trusted worker, read its events, give the verdict.

The worker (drill.grader.worker) runs the hidden checks; the user's file runs only in
the sandboxed subject process the worker starts. This process never imports either.
The verdict is `pass` only when the worker reached its end (its `done` event carries
the nonce we gave it), pytest exited cleanly, at least one check ran, every collected
check reported, and none failed.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from drill import userfile
from drill.words import plural
from drill.catalog import Exercise
from drill.grader import sandbox
from drill.grader.result import CheckResult, GradeResult
from drill.install_hint import nvidia_driver_present

KILL_GRACE_S = 3.0  # time the worker gets past the deadline to report a hung check
EVENTS_LIMIT_BYTES = 16 * 1024 * 1024
SHOWN_OUTPUT = 2000


def _worker_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DRILL_", "PYTEST_", "PYTHON"))}
    # The checks' references multiply small matrices: one BLAS thread is faster there (05 graded in
    # 2.7 s instead of 3.5 s on 2 cores) and spends 40 % less CPU; the subject has one too.
    return env | {"OPENBLAS_NUM_THREADS": "1"}  # NumPy's BLAS; torch keeps its threads


def subject_env(exercise: Exercise) -> dict[str, str]:
    """Variables the subject needs beyond the sandbox's defaults."""
    return triton_subject_env() if exercise.needs == "gpu" else {}


def triton_subject_env() -> dict[str, str]:
    """For a subject running Triton kernels: the interpreter where no NVIDIA driver is found."""
    env = {}
    if not nvidia_driver_present():
        # Triton reads this when a kernel is decorated, i.e. while the user's file is imported.
        env["TRITON_INTERPRET"] = "1"
    return env


def hidden_paths() -> list[str]:
    """What the subject must not read: drill itself (checks, solutions) and the progress data."""
    from importlib.util import find_spec

    from drill import paths as drill_paths

    found = []
    for package in ("drill", "drill.exercises", "drill.solutions", "drill.kernels"):
        spec = find_spec(package)  # finds without importing (drill.kernels would import torch)
        found += list(spec.submodule_search_locations or []) if spec else []
    found.append(str(drill_paths.home()))
    return [str(Path(p).resolve()) for p in found]


def pycache_dir() -> Path:
    """Bytecode for the trusted side lives here, out of the subject's reach (never __pycache__ beside the checks)."""
    from platformdirs import user_cache_dir

    path = Path(os.environ.get("DRILL_PYCACHE") or user_cache_dir("drill")) / "pycache"
    path.mkdir(parents=True, exist_ok=True)
    return path


def grade(exercise: Exercise, user_file: Path, timeout: float | None = None, *,
          keyword: str | None = None, first_failure: bool = False, repro: bool = False,
          seed: int | None = None, shadow: bytes | None = None, only: tuple[str, ...] = (),
          memory_after_failure: bool = True, server: "ForkServer | None" = None) -> GradeResult:
    """Grade `user_file`. `seed` replays a run's random inputs (from --json or --repro); by default a
    secret one is drawn, so no file can know its inputs before the checks send them.

    `shadow`: another version of the file (a what-if mutant's original); every call the checks
    make is repeated on it and the results compared, reported in `result.equivalence`.
    `only`: grade just the checks whose names start with one of these (a planted file's claims).
    `memory_after_failure=False`: once a check has failed, the peak-memory checks are reported not run
    (a what-if mutant is killed by then; each of them starts a fresh subject).
    `server`: fork the worker from this ForkServer (a run of gradings) instead of starting one."""
    user_file = Path(os.path.abspath(user_file))
    seed_chosen = seed is not None
    seed = int(seed) if seed_chosen else secrets.randbelow(2**63)
    timeout = timeout or exercise.timeout
    # The worker stops a hung check itself just before this deadline, so the checks that
    # ran are still reported; the kill below is the backstop.
    deadline = time.time() + timeout
    started = time.perf_counter()
    nonce = secrets.token_hex(16)
    gpu = exercise.needs == "gpu" and nvidia_driver_present()
    try:
        source = userfile.read_bytes(user_file)
    except userfile.UnreadableFile as exc:
        return GradeResult(exercise=exercise.key, file=os.fsdecode(user_file), status="error", message=str(exc))
    try:
        parent = sandbox.scratch_parent([tempfile.gettempdir(), "/tmp", "/var/tmp", pycache_dir().parent])
    except sandbox.SandboxRefused as exc:
        return GradeResult(exercise=exercise.key, file=os.fsdecode(user_file), status="error", message=str(exc))
    with ScratchFolder(prefix="drill-grade-", dir=parent, ignore_cleanup_errors=True) as tmp:
        # The worker and the subject see only this copy, taken once: the learner's file can
        # change (or vanish) while it is graded without changing what is graded.
        copy = place_copy(source, user_file.name, Path(tmp) / "submission")
        shadow_copy = place_copy(shadow, user_file.name, Path(tmp) / "original") if shadow is not None else None
        job = {
            "nonce": nonce, "user_file": str(copy), "checks_file": str(exercise.checks_path),
            "functions": list(exercise.functions), "deadline": deadline, "memory_mb": exercise.memory_mb,
            # CUDA reserves far more address space than it uses: no RLIMIT_AS on a GPU.
            "cap_address_space": not gpu, "scratch": tmp, "hidden": hidden_paths(),
            # The NVIDIA driver truncates files of its own /proc entry when CUDA starts: without
            # that right it fails with error 304 (measured on an H200, drill/grader/sandbox_cuda.py).
            "cuda": gpu,
            "env": subject_env(exercise), "keyword": keyword, "first_failure": first_failure, "timeout": timeout,
            "repro": str(Path(tmp) / "repro.npz") if repro else "", "seed": seed,
            "shadow_file": str(shadow_copy) if shadow_copy is not None else "",
            "prefixes": list(only), "memory_after_failure": memory_after_failure,
        }
        with open(Path(tmp) / "worker-stderr.txt", "w+b") as stderr:
            try:
                proc = server.start(job, stderr) if server is not None else None
            except OSError:  # the server has ended: a worker of its own, as without one
                proc = None
            proc = proc or start_trusted("drill.grader.worker", job, cwd=Path(tmp), stderr=stderr)
            try:
                events, timed_out = read_events(proc, timeout + KILL_GRACE_S)
            finally:  # also on Ctrl-C: the worker has a session of its own, so the signal never reached it
                stop_trusted(proc)
                sandbox.MemoryGroup.sweep(proc.pid)  # a worker that died cannot have ended its subjects
            stderr.seek(0)
            worker_error = stderr.read()[-SHOWN_OUTPUT:].decode("utf-8", "replace")
        result = _verdict(exercise, user_file, events, nonce, proc.returncode, timed_out, timeout, worker_error,
                          keyword)
        result.seed, result.seed_chosen = seed, seed_chosen
        compared = next((e for e in events if e.get("event") == "equivalence"), None)
        if compared is not None:
            result.equivalence = {"compared": int(compared.get("compared", 0)),
                                  "differs": clean(compared.get("differs", "")),
                                  "broken": clean(compared.get("broken", ""))}
        if result.status == "error" and result.message:
            from drill.sourceview import load_frame

            result.traceback = load_frame(result.message, source, os.fsdecode(user_file))
        if repro:
            result.notes.append(_write_repro(Path(tmp) / "repro.npz", user_file, events))
    result.seconds = round(time.perf_counter() - started, 3)
    return result


class ScratchFolder(tempfile.TemporaryDirectory):
    """A grading's scratch folder, removed at the end whatever the subject left in its own folder.

    shutil.rmtree recurses once per level: a folder nested a few thousand deep (made with chdir,
    so no path is ever long) raised RecursionError out of the `with`, which ended `drill check` in
    a traceback and left the folder on disk. `rm -rf` walks any depth."""

    def cleanup(self) -> None:
        try:
            super().cleanup()
        except RecursionError:
            try:
                subprocess.run(["rm", "-rf", "--", self.name], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, check=False)
            except OSError:
                pass


def _write_repro(bundle: Path, user_file: Path, events: list[dict]) -> str:
    """Write the --repro script beside the learner's file; the line that says so (or why not)."""
    from drill.grader import repro

    saved = next((e for e in events if e.get("event") == "repro"), None)
    if saved is None or not bundle.is_file():
        return "--repro: no failing check with a call to replay (a pass, or a check that compares no single call)"
    try:
        script = repro.write(bundle, user_file)
    except OSError as exc:
        return f"--repro: could not write beside {os.fsdecode(user_file.name)} ({exc.strerror})"
    return (f"wrote {script.name}: `python {script.name}` replays the failing call of "
            f"'{clean(saved.get('check', ''))}' and compares with the expected values")


def _safe_name(name: str) -> str:
    """The file's name as the subject will see it: ASCII-safe, still ending in .py."""
    cleaned = re.sub(r"[^A-Za-z0-9_.-]", "_", os.fsdecode(name).encode("ascii", "replace").decode())
    return cleaned if cleaned.endswith(".py") else cleaned + ".py"


def place_copy(source: bytes, name, folder: Path) -> Path:
    """The learner's file, read once (userfile.read_bytes), written into a new `folder` under a safe name.

    The trusted process and the subject see only this copy: the learner's file can change
    (or vanish) meanwhile without changing what is graded or timed.
    """
    folder.mkdir()
    copy = folder / _safe_name(name)
    copy.write_bytes(source)
    return copy


def start_trusted(module: str, job: dict, *, cwd: Path, stderr) -> subprocess.Popen:
    """Start a trusted process (`python -I -m MODULE`, its own session, bytecode kept private) with
    `job` as one JSON line on its stdin; it answers in JSON lines on its stdout (`read_events`)."""
    proc = subprocess.Popen(
        [sys.executable, "-I", "-X", f"pycache_prefix={pycache_dir()}", "-m", module],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr, env=_worker_env(),
        cwd=cwd, start_new_session=True,
    )
    try:
        proc.stdin.write((json.dumps(job) + "\n").encode())
        proc.stdin.close()
    except BrokenPipeError:
        pass
    return proc


def read_events(proc: subprocess.Popen, limit_s: float, on_event=None) -> tuple[list[dict], bool]:
    """The worker's JSON lines, read within the time limit and a size cap; (events, timed out).

    on_event(event), if given, sees each event as it arrives (progress lines).
    """
    events, buffer, total = [], b"", 0
    end = time.monotonic() + limit_s
    fd = proc.stdout.fileno()
    while True:
        left = end - time.monotonic()
        if left <= 0:
            return events, True
        ready, _, _ = select.select([fd], [], [], left)
        if not ready:
            continue
        chunk = os.read(fd, 65536)
        if not chunk:
            return events, False
        total += len(chunk)
        if total > EVENTS_LIMIT_BYTES:
            return events, False
        buffer += chunk
        *lines, buffer = buffer.split(b"\n")
        for line in lines:
            try:
                event = json.loads(line)
            except json.JSONDecodeError:
                return events, False  # everything after a broken line is untrustworthy
            if isinstance(event, dict):
                events.append(event)
                if on_event is not None:
                    on_event(event)


class ForkServer:
    """Trusted workers forked from one process that has imported the grader (worker.serve), for a run
    of gradings (what-if mutants): each skips about 0.15 s of CPU of start-up (a third of a killed
    mutant's grading). Thread-safe.

    Each child starts from the server's state before any grading, never from another child's: the
    server starts no subject and reads nothing but these requests. It is the children's parent,
    so it also ends them (`stop`): a pid is not reused while the runner can still name it.
    """

    def __init__(self):
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        with theirs:
            self._proc = subprocess.Popen(
                [sys.executable, "-I", "-X", f"pycache_prefix={pycache_dir()}", "-m", "drill.grader.worker",
                 "--serve", str(theirs.fileno())],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=_worker_env(),
                pass_fds=(theirs.fileno(),), start_new_session=True)
        self._socket = ours
        self._lock = threading.Lock()

    def _ask(self, request: dict, fds: list[int] = ()) -> dict:
        with self._lock:
            socket.send_fds(self._socket, [json.dumps(request).encode()], list(fds))
            reply = self._socket.recv(4096)
        if not reply:
            raise OSError("the fork server has ended")
        return json.loads(reply)

    def start(self, job: dict, stderr) -> "Forked":
        """A worker grading `job` (in its scratch folder), its events on `.stdout`, its errors in `stderr`."""
        read, write = os.pipe()
        try:
            pid = int(self._ask(job, [write, stderr.fileno()])["pid"])
        except BaseException:
            os.close(read)
            raise
        finally:
            os.close(write)
        return Forked(self, pid, os.fdopen(read, "rb", buffering=0))

    def stop(self, pid: int) -> int | None:
        """End a worker as stop_trusted does (SIGTERM, then its group killed); its exit status."""
        try:
            return self._ask({"stop": pid})["exit"]
        except OSError:
            return None  # the server is gone: the status is lost (the worker still stops at its deadline)

    def close(self) -> None:
        self._socket.close()  # the server ends at the end of its input
        self._proc.wait()


@dataclass
class Forked:
    """A worker forked by a ForkServer, read as a Popen's stdout is."""

    server: ForkServer
    pid: int
    stdout: object
    returncode: int | None = None


def stop_trusted(proc: "subprocess.Popen | Forked") -> None:
    """End the worker (it ends its subject tree on SIGTERM), then anything left in its group."""
    if isinstance(proc, Forked):
        proc.returncode = proc.server.stop(proc.pid)
        proc.stdout.close()
        return
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=2)
        except subprocess.TimeoutExpired:
            pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()
    proc.stdout.close()


# Terminal escapes, C0 and C1 controls (U+009B is a one-character CSI), and the bidirectional
# overrides and isolates that make a line read differently from what it says. Also lone surrogates:
# JSON lets the subject send "\ud800" in any string, and no encoding can write one, so a report
# that held it ended `drill check` with a UnicodeEncodeError traceback instead of a verdict.
_CONTROL = re.compile("\x1b\\[[0-?]*[ -/]*[@-~]|\x1b[@-_]|[\x00-\x08\x0b-\x1f\x7f-\x9f"
                      "\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")


def clean(text) -> str:
    """Text from the user's code without terminal escapes or control characters (newlines and tabs stay)."""
    return _CONTROL.sub("", str(text))


def _verdict(exercise, user_file, events, nonce, returncode, timed_out, timeout, worker_error,
             keyword=None) -> GradeResult:
    first = {}
    for e in events:
        first.setdefault(e.get("event"), e)
    result = GradeResult(exercise=exercise.key, file=os.fsdecode(user_file), status="error",
                         sandbox=_sandbox_level(first),
                         layers={str(k): str(v) for k, v in dict(first.get("start", {}).get("layers") or {}).items()},
                         output=clean((first.get("loaded") or first.get("load_error") or {}).get("output", "")))
    # The subject names the learner's frames "your file"; the report shows the real path, as Python does.
    real = f'File "{os.fsdecode(user_file)}"'
    checks = [CheckResult(clean(e["name"]), e["status"], clean(e.get("message", "")), e.get("seconds", 0.0),
                          clean(e.get("output", "")),
                          {k: clean(v).replace('File "your file"', real) if k == "traceback" else clean(v)
                           for k, v in e.get("details", {}).items()},
                          [clean(n) for n in e.get("notes", [])],
                          "observed" if e.get("kind") == "observed" else "verified")
              for e in events if e.get("event") == "check"]
    result.checks = checks
    result.notes += list(dict.fromkeys(n for c in checks for n in c.notes))  # each note once
    kinds = set(first)
    load_error = clean(first["load_error"]["message"]) if "load_error" in first else None
    collected = next((e["count"] for e in events if e.get("event") == "collected"), None)
    done = next((e for e in events if e.get("event") == "done"), None)

    if load_error:
        result.message = load_error
        return result
    if timed_out:
        phase = "while importing your file" if "loaded" not in kinds else (
            f"after {len(checks)} of {collected or '?'} checks" if checks else "in the first check")
        result.message = f"timed out after {timeout:g} s {phase}: an infinite loop, or far too slow?"
        return result
    if done is None or done.get("nonce") != nonce:
        how = f"signal {-returncode}" if returncode is not None and returncode < 0 else \
            f"exit status {returncode}" if returncode is not None else "an unknown status"
        phase = "while importing your file" if "loaded" not in kinds else "during the checks"
        hint = " (out of memory?)" if returncode == -signal.SIGKILL else " (os._exit, or a crash?)"
        result.message = f"the grading process ended early {phase} with {how}{hint}; nothing was graded"
        if worker_error.strip():
            result.output = worker_error
        return result
    total = next((e.get("total", e["count"]) for e in events if e.get("event") == "collected"), None)
    if keyword and collected is not None:
        result.selection = {"keyword": keyword, "selected": collected, "of": total}
    if collected == 0 and keyword:
        result.message = (f"no check's name has the word {keyword!r} (whole words count, in any case): "
                          "run without -k to see every check's name")
        return result
    # pytest exits with 2 (interrupted) when the recorder stopped the run early.
    clean_exits = (0, 1, 2) if "stopped" in kinds else (0, 1)
    if collected is None or collected == 0 or done.get("exit") not in clean_exits:
        result.message = "the hidden checks could not be run (a problem in drill itself; please report it)"
        return result
    result.message = summary(checks, collected, first.get("stopped", {}).get("reason", ""), timeout)
    failed = [c for c in checks if c.status not in ("pass", "skip")]
    if failed or len(checks) < collected or all(c.status == "skip" for c in checks):
        result.status = "fail"
        if len(checks) < collected:
            left = collected - len(checks)
            result.checks = checks + [CheckResult(f"{left} more", "not-run", f"not run: {_stop_reason(first, timeout)}")]
        return result
    result.status = "pass"
    return result


def _sandbox_level(first: dict) -> str | None:
    """The worker's sandbox level; None when no worker started (nothing of the file ran)."""
    level = first.get("start", {}).get("sandbox")
    return None if level is None else str(level)


def _stop_reason(first: dict, timeout: float) -> str:
    reason = first.get("stopped", {}).get("reason", "")
    if reason == "first failure":
        return "stopped at the first failure (-x)"
    return f"the {timeout:g} s time limit was used up"


def summary(checks: list[CheckResult], collected: int, stopped: str = "", timeout: float = 0.0) -> str:
    """The one count a run is summed up by, the same as `drill list` and `drill status` show:
    checks passed of the checks that apply here (a skipped check applies to another machine)."""
    skipped = sum(1 for c in checks if c.status == "skip")
    passed = sum(1 for c in checks if c.status == "pass")
    spared = sum(1 for c in checks if c.status == "not-run")  # peak-memory checks left out after a failure
    applicable = collected - skipped
    tail = f" ({skipped} skipped)" if skipped else ""
    if applicable == 0:
        return f"no check applies here: {plural(skipped, 'check')} skipped"
    if passed == applicable:
        return ("all " if applicable > 1 else "") + f"{plural(applicable, 'check')} passed" + tail
    text = f"{passed} of {plural(applicable, 'check')} passed"
    if spared:
        text += f"; {plural(spared, 'peak-memory check')} not run after a failure"
    left = collected - len(checks)
    if left:
        why = "after the first failure" if stopped == "first failure" else f"in the {timeout:g} s time limit"
        text += f"; {left} not run {why}"
    return text + tail
