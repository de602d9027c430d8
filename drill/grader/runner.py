"""Run an exercise's hidden checks on a user's file in a separate, limited process.

The verdict is `pass` only when the worker reached its end (its `done` event
carries the nonce we gave it), pytest exited cleanly, at least one check ran,
every collected check reported, and none failed.
"""

from __future__ import annotations

import json
import os
import resource
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from drill.catalog import Exercise
from drill.grader.result import CheckResult, GradeResult

OUTPUT_LIMIT_BYTES = 64 * 1024 * 1024  # what the user's code may print before it is stopped
SHOWN_OUTPUT = 2000  # characters of that output kept in the report
KILL_GRACE_S = 2.0  # time the worker gets past the deadline to report a hung check


def _gpu_visible() -> bool:
    return shutil.which("nvidia-smi") is not None


def _limits(memory_mb: int, cap_address_space: bool = True):
    def apply() -> None:
        mem = memory_mb * 1024 * 1024
        if cap_address_space:
            resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
        resource.setrlimit(resource.RLIMIT_FSIZE, (OUTPUT_LIMIT_BYTES, OUTPUT_LIMIT_BYTES))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))

    return apply


def _child_env(exercise: Exercise | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DRILL_", "PYTEST_"))}
    env.update(PYTHONDONTWRITEBYTECODE="1", PYTHONUNBUFFERED="1",
               OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")
    if exercise is not None and exercise.needs == "gpu" and not _gpu_visible():
        # Triton reads this when a kernel is decorated, i.e. while the user's file is
        # imported, so only the worker's environment can switch the interpreter on in time.
        env["TRITON_INTERPRET"] = "1"
    return env


def grade(exercise: Exercise, user_file: Path, timeout: float | None = None) -> GradeResult:
    user_file = user_file.resolve()
    timeout = timeout or exercise.timeout
    # The worker stops a hung check itself just before this deadline, so the checks that
    # ran are still reported; the kill below is the backstop (import loops, C-level hangs).
    deadline = time.time() + timeout
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="drill-grade-") as tmp:
        events_path = Path(tmp) / "events.jsonl"
        out_path = Path(tmp) / "output.txt"
        nonce = secrets.token_hex(16)
        cmd = [sys.executable, "-m", "drill.grader.worker", str(user_file), str(exercise.checks_path),
               str(events_path), ",".join(exercise.functions), str(deadline), str(exercise.memory_mb)]
        with open(out_path, "wb") as out:
            proc = subprocess.Popen(
                cmd, stdin=subprocess.PIPE, stdout=out, stderr=subprocess.STDOUT,
                cwd=str(user_file.parent), env=_child_env(exercise),
                # CUDA reserves far more virtual address space than it uses: under an
                # RLIMIT_AS cap its initialisation fails with "out of memory".
                preexec_fn=_limits(exercise.memory_mb, not (exercise.needs == "gpu" and _gpu_visible())),
                start_new_session=True,
            )
            try:
                proc.stdin.write((nonce + "\n").encode())
                proc.stdin.close()
            except BrokenPipeError:
                pass
            timed_out = False
            try:
                proc.wait(timeout=timeout + KILL_GRACE_S)
            except subprocess.TimeoutExpired:
                timed_out = True
            finally:
                _kill_group(proc)
        events = _read_events(events_path)
        output = out_path.read_bytes()[-SHOWN_OUTPUT:].decode("utf-8", "replace")
        result = _verdict(exercise, user_file, events, nonce, proc.returncode, timed_out, timeout, output)
    result.seconds = round(time.perf_counter() - started, 3)
    return result


def _kill_group(proc: subprocess.Popen) -> None:
    """End the worker and anything it started (ring-attention ranks, for example)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    proc.wait()


def _read_events(path: Path) -> list[dict]:
    events = []
    if not path.exists():
        return events
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            events.append(json.loads(line))
        except json.JSONDecodeError:
            break  # a line cut off by a kill: everything after it is untrustworthy
    return events


def _verdict(exercise, user_file, events, nonce, returncode, timed_out, timeout, output) -> GradeResult:
    result = GradeResult(exercise=exercise.key, file=str(user_file), status="error", output=output)
    checks = [CheckResult(e["name"], e["status"], e.get("message", ""), e.get("seconds", 0.0),
                          e.get("output", ""), e.get("details", {}), [str(n) for n in e.get("notes", [])])
              for e in events if e.get("event") == "check"]
    result.checks = checks
    result.notes += [n for c in checks for n in c.notes]
    kinds = {e.get("event") for e in events}
    load_error = next((e["message"] for e in events if e.get("event") == "load_error"), None)
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
        how = f"signal {-returncode}" if returncode is not None and returncode < 0 else f"exit status {returncode}"
        phase = "while importing your file" if "loaded" not in kinds else "during the checks"
        hint = " (out of memory?)" if returncode == -signal.SIGKILL else " (os._exit, or a crash?)"
        result.message = f"the grading process ended early {phase} with {how}{hint}; nothing was graded"
        return result
    # pytest exits with 2 (interrupted) when the recorder stopped the run after a time-out.
    clean_exits = (0, 1, 2) if "stopped" in kinds else (0, 1)
    if collected is None or collected == 0 or done.get("exit") not in clean_exits:
        result.message = "the hidden checks could not be run (a problem in drill itself; please report it)"
        return result
    failed = [c for c in checks if c.status not in ("pass", "skip")]
    if failed or len(checks) < collected or all(c.status == "skip" for c in checks):
        result.status = "fail"
        result.message = f"{len(failed)} of {collected} checks failed" if failed else "not every check ran"
        if len(checks) < collected:
            result.message += f"; {collected - len(checks)} not run after a check timed out"
            result.checks = checks + [CheckResult(f"{collected - len(checks)} more", "not-run",
                                                  "not run: an earlier check timed out")]
        return result
    result.status = "pass"
    skipped = [c for c in checks if c.status == "skip"]
    result.message = f"all {collected - len(skipped)} checks passed" + (
        f" ({len(skipped)} skipped)" if skipped else "")
    return result
