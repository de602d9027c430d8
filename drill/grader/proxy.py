"""The trusted side's handle on the subject process, and the `sub` object checks call.

`Subject` starts the sandboxed subject (drill/grader/subject.py, run from a scratch
folder that holds copies of it, of the modules it imports and of the user's file), loads the user's
file there, and sends it calls. Everything that comes back is a plain value; an error in
user code comes back as a description and is raised here as `UserCodeError`.

Two extensions for the torch exercises: a call may go through a helper module the checks
copy beside subject.py (`SubmissionProxy.use_helper`; 07's probe), whose observations come
back in `Outcome.extra` and are advice only; and `Subject.run_script` runs another script
from a scratch folder under the same containment (06's ring launcher), ending its whole
tree before the caller reads what it left (`read_regular`, `load_array`).
"""

from __future__ import annotations

import base64
import io
import os
import select
import shutil
import subprocess
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from drill import userfile
from drill.grader import protocol, sandbox
from drill.grader.expect import note

HERE = Path(__file__).parent
OUTPUT_LIMIT_BYTES = 64 * 1024 * 1024  # what the user's code may print before it is stopped
RESULT_LIMIT_BYTES = 2 * 1024**3
WATCH_INTERVAL_S = 0.05
TIMED_OUT = "did not answer in time"


class UserCodeError(Exception):
    """The user's function raised (or exited); carries the subject's description."""

    def __init__(self, info: dict):
        self.info = info
        super().__init__(f"{info.get('type')}: {info.get('message')}")


class SubjectGone(Exception):
    """The subject process ended, or broke the protocol, in the middle of a call."""

    def __init__(self, reason: str):
        self.reason = reason
        super().__init__(reason)


def _unpacked_reads(packed) -> list | None:
    """subject._packed_reads undone: one [name, first row, past-the-last row, rows, kind] per access,
    equal accesses sharing one list. A record that does not decode broke the protocol."""
    if packed is None:
        return None
    try:
        entries = [list(entry) for entry in packed["entries"]]
        order = np.frombuffer(base64.b64decode(packed["order"], validate=True), dtype=np.int32)
        if order.size and (int(order.min()) < 0 or int(order.max()) >= len(entries)):
            raise ValueError("index out of range")
        return [entries[i] for i in order.tolist()]
    except (KeyError, TypeError, ValueError) as exc:  # binascii.Error is a ValueError
        raise SubjectGone(f"the subject's record of reads did not decode ({exc})") from None


@dataclass
class Outcome:
    """One call's result and what was seen around it."""

    result: object
    warnings: list = field(default_factory=list)  # [category, message] raised inside the call
    geterr: str | None = None  # numpy's error settings, when the call changed them
    args: list | None = None  # the arguments as they were after the call (return_args=True)
    peak_bytes: int | None = None  # resident memory above the subject's start (measure_memory=True)
    output: str = ""
    reads: list | None = None  # [name, first row, past-the-last row, rows] per access (record=...)
    extra: dict = field(default_factory=dict)  # what a helper returned beside the result (plain values)
    seconds: float = 0.0  # the call's round trip, timed here


class Subject:
    """One sandboxed subject process with the user's file loaded."""

    def __init__(self, user_file: Path, functions: list[str], *, scratch_root: Path, hidden: list[Path],
                 memory_mb: int, cap_address_space: bool = True, env: dict | None = None, cuda: bool = False):
        self.user_file = user_file
        self.functions = functions
        self.scratch_root = scratch_root
        self.hidden = hidden
        self.memory_mb = memory_mb
        self.cap_address_space = cap_address_space
        self.env = env or {}
        self.cuda = cuda  # CUDA needs its own /proc entries writable (see runner.grade)
        self.helpers: list[Path] = []  # trusted modules copied beside subject.py (see SubmissionProxy.use_helper)
        self.proc: subprocess.Popen | None = None
        self.load_error = ""
        self.base_rss = self.base_group = 0
        self.group: sandbox.MemoryGroup | None = None
        self.calls = self.tree_peak = 0
        self._count = 0

    # --- life cycle

    def start(self, wait: bool = True) -> None:
        """Start a fresh subject and load the user's file; sets load_error on failure.

        With wait=False the process starts and `wait_loaded` finishes the job later, so the
        caller can do its own imports while the subject does its own.
        """
        self.close()
        self._count += 1
        self.scratch = self.scratch_root / f"subject-{self._count}"
        self.scratch.mkdir(parents=True)
        for source in [HERE / "subject.py", HERE / "protocol.py", HERE / "recording.py", HERE / "usertrace.py",
                       HERE / "seccomp.py",
                       *self.helpers]:
            shutil.copyfile(source, self.scratch / source.name)
        target = self.scratch / self.user_file.name
        target.write_bytes(self.user_file.read_bytes())
        self.output = open(self.scratch_root / f"output-{self._count}.txt", "w+b")
        req_r, req_w = os.pipe()
        res_r, res_w = os.pipe()
        self.calls = 0
        self.contained = sandbox.Contained.start(
            self.scratch / "subject.py",
            [str(target), ",".join(self.functions), str(req_r), str(res_w), "cuda" if self.cuda else "cpu"],
            scratch=self.scratch, hidden=self.hidden, memory_mb=self.memory_mb,
            name=f"drill-{os.getpid()}-{self._count}", cap_address_space=self.cap_address_space, env=self.env,
            stdout=self.output, output_limit=OUTPUT_LIMIT_BYTES, pass_fds=(req_r, res_w),
            cuda=self.cuda)
        self.proc, self.group = self.contained.proc, self.contained.group
        os.close(req_r)
        os.close(res_w)
        self.requests = os.fdopen(req_w, "wb")
        self.responses = os.fdopen(res_r, "rb", buffering=0)
        if wait:
            self.wait_loaded()

    def wait_loaded(self, deadline: float | None = None) -> None:
        """Finish start(): the handshake, then the user's file is imported (by `deadline`, a time.time())."""
        limit = None if deadline is None else time.monotonic() + max(0.0, deadline - time.time())
        try:
            header, _ = self._receive(time.monotonic() + 60)
            if header.get("event") != "hello":
                raise SubjectGone("the subject did not start")
            self.base_rss = sandbox.status_bytes(self.contained.pid, "VmRSS")
            self.base_group = self.group.read("usage") if self.group else 0
            protocol.send(self.requests, {"op": "load"})
            header, _ = self._receive(limit)
        except SubjectGone as gone:
            self.load_error = gone.reason
            return
        if header.get("event") == "load_error":
            self.load_error = str(header.get("message", "your file could not be loaded"))
        elif header.get("event") != "loaded":
            self.load_error = "your file could not be loaded"

    def close(self) -> None:
        if self.proc is None:
            return
        for stream in (getattr(self, "requests", None), getattr(self, "responses", None)):
            try:
                stream.close()
            except (OSError, AttributeError):
                pass
        self.contained.close()
        self.proc = self.group = None

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    # --- other contained scripts (the ring-attention launcher)

    def script_scratch(self, name: str) -> Path:
        """A fresh folder for a contained script: the caller fills it with everything the script reads."""
        self._count += 1
        folder = self.scratch_root / f"{name}-{self._count}"
        folder.mkdir(parents=True)
        return folder

    def run_script(self, scratch: Path, script: str, args: list[str], limit_s: float, *,
                   sockets: bool = False) -> tuple[int | None, str]:
        """Run scratch/script under the subject's containment until it exits or `limit_s` passes.

        sockets=True leaves socket() allowed, with a loopback in the script's own network
        namespace: the script must shut in, before any user code runs, the processes it starts
        (06's ranks apply the seccomp filter once gloo has connected).

        Returns (exit status, or None if it was stopped; the tail of what it printed). The
        whole tree is ended before this returns, so nothing it started can still write.
        """
        log = open(self.scratch_root / f"{scratch.name}-output.txt", "w+b")
        with log:
            run = sandbox.Contained.start(scratch / script, args, scratch=scratch, hidden=self.hidden,
                                          memory_mb=self.memory_mb, name=f"drill-{os.getpid()}-{scratch.name}",
                                          cap_address_space=self.cap_address_space, env=self.env, stdout=log,
                                          output_limit=OUTPUT_LIMIT_BYTES, cuda=self.cuda, sockets=sockets)
            end = time.monotonic() + limit_s
            code = None
            try:
                while time.monotonic() < end:
                    code = run.proc.poll()
                    if code is not None:
                        break
                    if self.memory_mb and run.group is None and run.tree_bytes() > self.memory_mb * 1024 * 1024:
                        break  # no cgroup here: the /proc total is the cap
                    time.sleep(WATCH_INTERVAL_S)
            finally:
                run.close()
            size = os.fstat(log.fileno()).st_size
            tail = os.pread(log.fileno(), min(size, 4096), max(0, size - 4096)).decode("utf-8", "replace")
        return code, tail

    # --- calls

    def call(self, function: str, args: list, kwargs: dict, *, return_args: bool = False,
             measure_memory: bool = False, torch: dict | None = None, record: dict | None = None,
             timeout: float | None = None, helper: dict | None = None) -> Outcome:
        # A measured call gets a fresh subject: its peak then counts everything the user's
        # code holds, including buffers kept from import time, and nothing older.
        if not self.alive or self.load_error or (measure_memory and self.calls):
            self.start()
            if self.load_error:
                raise SubjectGone(f"your file could not be loaded again: {self.load_error}")
        header = {"op": "call", "function": function, "return_args": return_args}
        if torch:
            header["torch"] = torch
        if record:
            header["record"] = {str(k): v for k, v in record.items()}
        if helper:
            header["helper"] = helper
        start_offset = self._output_size()
        self.calls += 1
        self.tree_peak = 0
        try:
            protocol.send(self.requests, header, {"args": list(args), "kwargs": dict(kwargs)})
        except (BrokenPipeError, OSError):
            raise SubjectGone(self._ended("before the call")) from None
        sent = time.perf_counter()
        deadline = time.monotonic() + timeout if timeout else None
        try:
            reply, value = self._receive(deadline)
            seconds = time.perf_counter() - sent
        except BaseException:
            self.close()  # a check stopped mid-call (time-out): the subject is in an unknown state
            raise
        peak = None
        if measure_memory:
            peak = max(sandbox.status_bytes(self.contained.pid, "VmHWM"), self.tree_peak) - self.base_rss
            if self.group is not None:  # the whole tree: a forked helper's memory counts too
                peak = max(peak, self.group.read("peak") - self.base_group)
            peak = max(0, peak)
            if _measurements and sandbox.maps_library(self.contained.pid, "libtorch"):
                _measurements[-1].torch_loaded = True
        output = self._read_output(start_offset)
        if not reply.get("ok"):
            error = UserCodeError(dict(reply.get("error") or {}))
            error.output = output
            raise error
        value = value if isinstance(value, dict) else {}
        extra = {k: v for k, v in value.items() if k not in ("result", "args")} if helper else {}
        return Outcome(result=value.get("result"), warnings=list(reply.get("warnings") or []),
                       geterr=reply.get("geterr"), args=value.get("args"), peak_bytes=peak, output=output,
                       reads=_unpacked_reads(reply.get("reads")), extra=extra, seconds=seconds)

    def _receive(self, deadline: float | None):
        """Wait for a message, watching the tree's memory; SubjectGone if the subject dies or lies."""
        while True:
            wait = WATCH_INTERVAL_S if deadline is None else max(0.0, min(WATCH_INTERVAL_S, deadline - time.monotonic()))
            ready, _, _ = select.select([self.responses], [], [], wait)
            if ready:
                break
            tree = sandbox.tree_rss_bytes(self.contained.pid)
            self.tree_peak = max(self.tree_peak, tree)  # without a cgroup, a forked helper shows up here
            if self.memory_mb and self.group is None and tree > self.memory_mb * 1024 * 1024:
                self.close()
                raise SubjectGone(f"your code used more than {self.memory_mb} MB of memory (all its processes together)")
            if self.proc.poll() is not None:
                break
            if deadline is not None and time.monotonic() >= deadline:
                self.close()
                raise SubjectGone(TIMED_OUT)
        try:
            return protocol.receive(self.responses, RESULT_LIMIT_BYTES)
        except EOFError:
            raise SubjectGone(self._ended("during the call")) from None
        except (protocol.ProtocolError, ValueError, OSError) as exc:
            self.close()
            raise SubjectGone(f"the subject process sent something that is not a result ({exc})") from None

    def _ended(self, when: str) -> str:
        if self.proc is not None:
            try:
                self.proc.wait(timeout=2)
            except subprocess.TimeoutExpired:
                pass
            code = self.proc.returncode
        else:
            code = None
        if code is not None and code < 0:
            how = f"was killed by signal {-code}" + (" (out of memory?)" if code == -9 else "")
        elif code is not None:
            how = f"ended with exit status {code} (os._exit, or a crash?)"
        else:
            how = "closed the grader's channel"
        self.close()
        return f"the process running your code {how} {when}"

    # --- printed output

    def _output_size(self) -> int:
        try:
            return os.fstat(self.output.fileno()).st_size
        except (OSError, AttributeError):
            return 0

    def _read_output(self, start: int, limit: int = 2000) -> str:
        end = self._output_size()
        if end <= start:
            return ""
        data = os.pread(self.output.fileno(), min(end - start, 64 * 1024), start)
        text = data.decode("utf-8", "replace")
        if len(text) <= limit:
            return text
        more = f"\n… ({end - start} bytes in all)"
        return text[:limit - len(more)] + more

    def leading_output(self, limit: int = 2000) -> str:
        """What the user's file printed while being imported."""
        return self._read_output(0, limit) if hasattr(self, "output") else ""


def _place(source: Path, target: Path) -> None:
    """Copy into a folder the subject can write: never through a link or file it left there."""
    try:
        os.unlink(target)
    except FileNotFoundError:
        pass
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    with os.fdopen(fd, "wb") as f:
        f.write(source.read_bytes())


def read_regular(path: Path, limit: int) -> bytes | None:
    """The bytes of a regular file the subject wrote; None if it is missing, not a regular file
    (a FIFO, a device, a link) or over `limit` bytes. Never blocks."""
    try:
        return userfile.read_bytes(path, limit, follow_links=False)
    except userfile.UnreadableFile:
        return None


def load_array(path: Path, limit: int):
    """A .npy file the subject wrote, loaded without pickle; None if absent or malformed."""
    data = read_regular(path, limit)
    if data is None:
        return None
    try:
        array = np.load(io.BytesIO(data), allow_pickle=False)
    except (ValueError, OSError, EOFError):
        return None
    return array if isinstance(array, np.ndarray) else None


class FunctionProxy:
    """One of the user's functions, called by value in the subject."""

    def __init__(self, subject: Subject, name: str):
        self.subject = subject
        self.__name__ = name

    def __call__(self, *args, **kwargs):
        return self.observe(*args, **kwargs).result

    def observe(self, *args, return_args: bool = False, record: dict | None = None, helper: dict | None = None,
                timeout: float | None = None, **kwargs) -> Outcome:
        """Call, and return the result with what was seen around it (warnings, arguments after).

        record={position: name}: the rows of those arguments the code read come back in
        Outcome.reads. helper={"module": NAME, "spec": {...}}: the subject runs the call
        through the helper module NAME (added with SubmissionProxy.use_helper); what it
        returns beside the result is in Outcome.extra. timeout: seconds before the subject is
        ended and SubjectGone raised (none by default: the grader's deadline stops a hung check).
        """
        measuring = _measurements[-1] if _measurements else None
        SubmissionProxy.last_call = (self.__name__, list(args), dict(kwargs))
        try:
            outcome = self.subject.call(self.__name__, list(args), kwargs, return_args=return_args,
                                        measure_memory=measuring is not None, torch=SubmissionProxy.torch,
                                        record=record, helper=helper, timeout=timeout)
        except UserCodeError as error:
            SubmissionProxy.outputs.append(getattr(error, "output", ""))
            raise
        SubmissionProxy.outputs.append(outcome.output)
        if measuring is not None:
            measuring.peak = max(measuring.peak, outcome.peak_bytes or 0)
        if Shadow.current is not None and helper is None:
            Shadow.current.compare(self.__name__, list(args), dict(kwargs), outcome.result)
        return outcome

    def __repr__(self) -> str:
        return f"<your function {self.__name__}>"


class Shadow:
    """A second subject holding another version of the file (the learner's original, for a
    what-if mutant): every plain call the checks make is repeated there and the two results
    compared by value. It only ever observes; no verdict depends on it."""

    current: "Shadow | None" = None
    RTOL, ATOL = 1e-9, 1e-12

    def __init__(self, subject: Subject):
        self.subject = subject
        self.compared = 0
        self.differs = ""  # the first call whose results differ, in words
        self.broken = ""  # why comparing stopped early, if it did

    def compare(self, name: str, args: list, kwargs: dict, result) -> None:
        if self.differs:
            return
        try:
            theirs = self.subject.call(name, args, kwargs).result
        except (UserCodeError, SubjectGone) as exc:
            # Not evidence of a difference: the shadow runs without the fresh subject and memory
            # budget a measured call gets, so a big input can end it. Comparison stops here.
            self.broken = f"{name}: the original could not be called again ({str(exc)[:120]})"
            Shadow.current = None
            return
        self.compared += 1
        why = _difference(result, theirs, self.RTOL, self.ATOL)
        if why:
            self.differs = f"{name}: {why}"


def _difference(mine, theirs, rtol: float, atol: float, where: str = "the result") -> str:
    """'' when two plain values agree (arrays within rtol/atol, NaN equal to NaN), else how they differ."""
    import numpy as np

    if isinstance(mine, (tuple, list)) and isinstance(theirs, (tuple, list)):
        if len(mine) != len(theirs):
            return f"{where} has {len(mine)} parts instead of {len(theirs)}"
        for i, (a, b) in enumerate(zip(mine, theirs)):
            why = _difference(a, b, rtol, atol, f"part {i} of {where}")
            if why:
                return why
        return ""
    if isinstance(mine, dict) and isinstance(theirs, dict):
        if set(mine) != set(theirs):
            return f"{where} has other keys"
        for k in mine:
            why = _difference(mine[k], theirs[k], rtol, atol, f"{where}[{k!r}]")
            if why:
                return why
        return ""
    if isinstance(mine, (np.ndarray, np.generic, int, float, bool)) and \
            isinstance(theirs, (np.ndarray, np.generic, int, float, bool)):
        a, b = np.asarray(mine), np.asarray(theirs)
        if a.shape != b.shape:
            return f"{where} has shape {a.shape} instead of {b.shape}"
        if a.dtype.kind in "biuf" and b.dtype.kind in "biuf":
            same = np.isclose(a.astype(float), b.astype(float), rtol=rtol, atol=atol, equal_nan=True)
            if not same.all():
                at = tuple(int(i) for i in np.argwhere(~same)[0])
                return f"{where} differs at {at}: {a[at].item()!r} instead of {b[at].item()!r}"
            return ""
        return "" if np.array_equal(a, b) else f"{where} differs"
    return "" if mine == theirs else f"{where} differs: {mine!r:.60} instead of {theirs!r:.60}"


class Measurement:
    peak = 0
    torch_loaded = False  # the measured subject had torch loaded: its libraries alone are ~200 MB

# Said beside a NumPy exercise's peak when the file brought torch in, so a failed memory check
# does not read as the learner's arrays being too large.
TORCH_NOTE = ("your file loads torch, whose libraries alone hold about 200 MB of the measured peak: "
              "the memory checks count everything the file loads, so write this exercise in NumPy")


_measurements: list[Measurement] = []


@contextmanager
def memory_measured():
    """Calls made inside run in a fresh subject each; `.peak` is the largest resident peak seen."""
    box = Measurement()
    _measurements.append(box)
    try:
        yield box
    finally:
        _measurements.pop()
        if box.torch_loaded:
            note(TORCH_NOTE)


class SubmissionProxy:
    """What the `sub` fixture hands the checks: attribute access gives a FunctionProxy."""

    torch: dict | None = None  # set by torch exercises: {"device": ..., "dtype": ...}
    outputs: list[str] = []
    last_call: tuple | None = None  # (function, args, kwargs) of the latest call, for --repro

    def __init__(self, subject: Subject):
        self._subject = subject

    def use_helper(self, path: Path) -> None:
        """Copy a trusted helper module (from the installed checks) beside subject.py, now and at every restart.

        It runs inside the subject, next to the user's code: what it reports is advice.
        """
        path = Path(path)
        if path not in self._subject.helpers:
            self._subject.helpers.append(path)
            scratch = getattr(self._subject, "scratch", None)
            if scratch is not None and scratch.is_dir():
                _place(path, scratch / path.name)

    def __getattr__(self, name: str) -> FunctionProxy:
        if name.startswith("_"):
            raise AttributeError(name)
        return FunctionProxy(self._subject, name)
