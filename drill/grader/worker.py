"""The trusted grading process: run the hidden checks against a sandboxed subject.

Started by drill.grader.runner as `python -I -X pycache_prefix=PRIVATE -m drill.grader.worker`
with a JSON job on stdin. It never imports the user's file: that happens in the subject
process (drill/grader/subject.py) that it starts, contains and ends. It writes JSON lines
to its stdout, a pipe only the runner reads: start, loaded | load_error, collected, one
`check` per check, done (with the runner's nonce, so a run cut short never looks finished).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
from pathlib import Path


def event_channel():
    """For a trusted process started by the runner: stdout becomes a JSON-lines channel that only
    `emit(**event)` writes to (anything else printed goes to /dev/null). Returns emit."""
    events = os.fdopen(os.dup(1), "w", encoding="utf-8")
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)  # nothing but events reaches the caller

    def emit(**event) -> None:
        events.write(json.dumps(event) + "\n")
        events.flush()

    return emit


def main() -> int:
    if sys.argv[1:2] == ["--serve"]:
        return serve(socket.socket(fileno=int(sys.argv[2])))
    return run(json.loads(sys.stdin.readline()))


def run(job: dict) -> int:
    emit = event_channel()
    from drill.grader import sandbox

    sandbox.become_subreaper()
    try:
        return grade(job, emit)
    finally:
        # Whatever ended the grading (an exception of any kind, even one raised while a reply
        # was decoded), nothing the subject started outlives it.
        sandbox.end_tree()
        sandbox.MemoryGroup.sweep(os.getpid())


def serve(sock: socket.socket) -> int:
    """A fork server for a run of gradings (what-if mutants), on `sock` (the runner's ForkServer): it
    imports once, then forks one worker per job.

    It never starts a subject and reads nothing but the runner's requests, so each child begins
    from the same state as a fresh `python -m drill.grader.worker`, less about 0.15 s of CPU
    of interpreter start and imports (numpy, pytest, the grader). Requests, one packet each:
    a job with two descriptors (the child's stdout and stderr), answered with the child's pid;
    {"stop": pid}, which ends that child as runner.stop_trusted ends a worker and answers
    with its exit status. Only this process reaps its children, so a pid is never reused
    while the runner may still name it. Ends at end of input. (No random state is shared: Python's
    `random` reseeds in a forked child, numpy.random is not imported here, and the checks draw
    from the job's secret seed.)
    """
    import numpy  # noqa: F401 - what every child imports: loaded once, here
    import pytest  # noqa: F401

    from drill.grader import fixtures, proxy, recorder, sandbox, submission  # noqa: F401

    children: set[int] = set()
    while True:
        message, fds, _flags, _address = socket.recv_fds(sock, 1 << 20, 2)
        if not message:
            return 0
        request = json.loads(message)
        if "stop" in request:
            pid = int(request["stop"])
            code = _stop_child(pid) if pid in children else None
            children.discard(pid)
            sock.send(json.dumps({"exit": code}).encode())
            continue
        pid = os.fork()
        if pid == 0:
            sock.close()
            os.setsid()  # as start_new_session: the runner ends the child's whole group
            os.dup2(fds[0], 1)
            os.dup2(fds[1], 2)
            for fd in fds:
                os.close(fd)
            devnull = os.open(os.devnull, os.O_RDONLY)
            os.dup2(devnull, 0)
            os.close(devnull)
            os.chdir(request["scratch"])
            code = 1
            try:
                code = run(request)
            except BaseException:  # as an uncaught exception ends a worker: the traceback, for the runner
                import traceback

                traceback.print_exc()
                sys.stderr.flush()
            finally:
                os._exit(code)
        for fd in fds:
            os.close(fd)
        children.add(pid)
        sock.send(json.dumps({"pid": pid}).encode())


def _stop_child(pid: int) -> int:
    """runner.stop_trusted for a child of this process: SIGTERM, 2 s, then SIGKILL to its group; its exit status."""
    import time

    done, status = os.waitpid(pid, os.WNOHANG)
    if not done:
        os.kill(pid, signal.SIGTERM)
        end = time.monotonic() + 2
        while not done and time.monotonic() < end:
            time.sleep(0.01)
            done, status = os.waitpid(pid, os.WNOHANG)
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    if not done:
        _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def grade(job: dict, emit) -> int:
    from drill.grader import sandbox
    from drill.grader.proxy import TIMED_OUT, Subject, SubmissionProxy

    subject = Subject(
        Path(job["user_file"]), job["functions"], scratch_root=Path(job["scratch"]),
        hidden=[Path(p) for p in job["hidden"]], memory_mb=job["memory_mb"],
        cap_address_space=job["cap_address_space"], env=job["env"], cuda=bool(job.get("cuda")),
    )

    def stop(signum, frame):
        subject.close()  # ends the tree and removes its memory cgroup
        os._exit(3)

    signal.signal(signal.SIGTERM, stop)
    found = sandbox.layers(cuda=bool(job.get("cuda")))
    emit(event="start", sandbox=sandbox.level(found), layers=found)
    subject.start(wait=False)

    import pytest  # while the subject imports numpy and the user's file

    from drill.grader import fixtures, submission
    from drill.grader.recorder import Recorder

    fixtures.set_run_seed(int(job["seed"]))

    subject.wait_loaded(deadline=float(job["deadline"]))
    if subject.load_error == TIMED_OUT:
        subject.load_error = (f"timed out after {job['timeout']:g} s while importing your file: "
                              "an infinite loop at the top level, or far too slow?")
    if subject.load_error:
        emit(event="load_error", message=load_error_message(subject.load_error), output=subject.leading_output())
        return finish(emit, subject, job["nonce"], 2)
    emit(event="loaded", output=subject.leading_output())

    shadow = None
    if job.get("shadow_file"):  # a what-if mutant: every call is repeated on the original and compared
        from drill.grader.proxy import Shadow

        shadow_root = Path(job["scratch"]) / "shadow"
        shadow_root.mkdir()
        shadow = Shadow(Subject(
            Path(job["shadow_file"]), job["functions"], scratch_root=shadow_root,
            hidden=[Path(p) for p in job["hidden"]], memory_mb=job["memory_mb"],
            cap_address_space=job["cap_address_space"], env=job["env"]))
        shadow.subject.start()
        if shadow.subject.load_error:
            emit(event="load_error", message="the original file does not load: " + shadow.subject.load_error[:200])
            shadow.subject.close()
            return finish(emit, subject, job["nonce"], 2)
        Shadow.current = shadow
    submission.set_loaded(SubmissionProxy(subject), job["user_file"])
    recorder = Recorder(emit, float(job["deadline"]), int(job["memory_mb"]),
                        first_failure=bool(job.get("first_failure")), repro_path=job.get("repro") or "",
                        seed=int(job["seed"]), keyword=job.get("keyword") or "",
                        prefixes=tuple(job.get("prefixes") or ()),
                        memory_after_failure=job.get("memory_after_failure", True))
    checks = job["checks_file"]
    # Only drill's own plugins: a pytest plugin installed beside drill (xdist, rerunfailures, ...)
    # has no say in a verdict, and not loading them saves a fifth of a second per grading.
    os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    args = [checks, "-c", os.devnull, "--rootdir", os.path.dirname(checks),
            "-p", "no:cacheprovider", "-p", "no:randomly", "-p", "no:terminal", "-p", "no:stepwise",
            # none of these reaches a verdict (the recorder does); they cost 0.1 s of CPU per grading
            "-p", "no:unraisableexception", "-p", "no:threadexception", "-p", "no:faulthandler", "-p", "no:logging"]
    code = pytest.main(args, plugins=[recorder, fixtures])
    if shadow is not None:
        Shadow.current = None
        emit(event="equivalence", compared=shadow.compared, differs=shadow.differs, broken=shadow.broken)
        shadow.subject.close()
    return finish(emit, subject, job["nonce"], int(code))


def finish(emit, subject, nonce: str, code: int) -> int:
    subject.close()
    emit(event="done", nonce=nonce, exit=code)
    os._exit(0)  # skip interpreter teardown


def load_error_message(raw: str) -> str:
    """The subject's load problem in words (the subject sends a few as codes)."""
    from drill.grader.result import TOO_MUCH_OUTPUT
    from drill.install_hint import missing_package_advice

    if raw.startswith("module-not-found:"):
        name = raw.split(":", 1)[1]
        package = name.split(".")[0]
        advice = missing_package_advice(package)
        return f"your file imports {name!r}, which is not installed here" + (f"; {advice}" if advice else "")
    if raw == "too-much-output":
        return TOO_MUCH_OUTPUT
    return raw


if __name__ == "__main__":
    sys.exit(main())
