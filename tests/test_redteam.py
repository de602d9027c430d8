"""The red team: submissions written to fake a pass are graded fail or error, and leave no trace.

See tests/redteam/README.md for the attack files and their placeholders.
"""

from __future__ import annotations

import fcntl
import hashlib
import importlib.util
import json
import os
import socket
import sqlite3
import threading
import time
from pathlib import Path

import pytest

from drill import catalog, paths
from drill.grader.runner import grade
from drill.store import Store
from sampling import sample

REDTEAM = Path(__file__).parent / "redteam"
GENERIC = sorted((REDTEAM / "generic").glob("*.py"))
SPECIFIC = sorted((REDTEAM / "specific").glob("*/*.py"))
NUMPY_EXERCISES = [ex for ex in catalog.all_exercises() if ex.needs == "cpu"]
TORCH_EXERCISES = [ex for ex in catalog.all_exercises() if ex.needs != "cpu"]  # ring ranks, Triton kernel
MARKER = f"drill-esc-{os.getpid() % 100000}"  # per test process (15 characters at most, as comm keeps)
READABLE = importlib.util.find_spec("numpy").origin  # a file every subject may read, and must not change
QUICK_TIMEOUT = 20.0  # attacks that hang are stopped sooner than a learner's file would be
TORCH_TIMEOUT = 90.0  # the torch exercises' checks alone take 15-30 s on a CPU


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _metadata(path) -> tuple:
    """What Landlock does not guard: a file's mode, owner, modification time, xattrs and inode flags."""
    st = os.stat(path)
    try:
        xattrs = sorted(os.listxattr(path))
    except OSError:
        xattrs = None
    try:
        fd = os.open(path, os.O_RDONLY)
        try:
            flags = fcntl.ioctl(fd, 0x80086601, bytes(8))  # FS_IOC_GETFLAGS
        finally:
            os.close(fd)
    except OSError:
        flags = None
    return st.st_mode, st.st_uid, st.st_gid, st.st_mtime_ns, xattrs, flags


def _survivors() -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if Path(f"/proc/{entry}/comm").read_text().strip() == MARKER:
                    found.append(int(entry))
            except OSError:
                pass
    return found


class Listener:
    """A local server outside the sandbox (a stand-in for a terminal multiplexer or a daemon):
    it records every connection or datagram that reaches it."""

    def __init__(self, tmp: Path):
        self.reached: list[str] = []
        self.path = str(tmp / "outside.sock")
        self.unix = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.unix.bind(self.path)
        self.tcp = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.tcp.bind(("127.0.0.1", 0))
        self.port = self.tcp.getsockname()[1]
        self.udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.udp.bind(("127.0.0.1", self.port))
        for server in (self.unix, self.tcp):
            server.listen(8)
            threading.Thread(target=self._accept, args=(server,), daemon=True).start()
        threading.Thread(target=self._datagrams, daemon=True).start()

    def _accept(self, server):
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            self.reached.append(f"a connection to {server.getsockname()}")
            conn.close()

    def _datagrams(self):
        while True:
            try:
                self.udp.recv(1024)
            except OSError:
                return
            self.reached.append("a datagram")

    def close(self):
        for s in (self.unix, self.tcp, self.udp):
            s.close()


@pytest.fixture(scope="module")
def listener(tmp_path_factory):
    server = Listener(tmp_path_factory.mktemp("outside"))
    yield server
    server.close()


SYSV_KEY = 0x6472696C  # the key shm_channel.py asks for


def _machine_traces() -> dict:
    """What an attack could leave on the machine outside files: its /dev/shm entries, its System V
    segment, memory cgroups of a grading process that has ended (others may be grading meanwhile)."""
    from drill.grader import sandbox

    shm = sorted(n for n in os.listdir("/dev/shm") if n.startswith(MARKER)) if os.path.isdir("/dev/shm") else []
    try:
        sysv = [line.split()[0] for line in Path("/proc/sysvipc/shm").read_text().splitlines()[1:]
                if int(line.split()[0]) == SYSV_KEY]
    except (OSError, ValueError, IndexError):
        sysv = []
    groups = sorted(str(p) for root, *_ in sandbox.MemoryGroup.LAYOUTS for p in Path(root).glob("drill-*-*")
                    if not Path(f"/proc/{p.name.split('-')[1]}").exists())
    try:
        keys = [line.split()[0] for line in Path("/proc/keys").read_text().splitlines() if MARKER in line]
    except OSError:
        keys = []
    return {"/dev/shm": shm, "System V shared memory": sysv, "cgroups of ended graders": groups, "kernel keys": keys}


def _new_traces(before: dict) -> dict:
    """Traces that were not there before; another worker's grader may end meanwhile, so a trace
    gets a second to be cleaned up before it counts."""
    for wait in (0.0, 1.0):
        time.sleep(wait)
        new = {k: sorted(set(v) - set(before[k])) for k, v in _machine_traces().items()}
        if not any(new.values()):
            return {}
    return new


def _attack(template: Path, ex: catalog.Exercise, workspace: Path, listener: Listener | None = None) -> Path:
    text = template.read_text(encoding="utf-8")
    fill = {"{{ID}}": ex.id, "{{FUNCTIONS}}": repr(list(ex.functions)), "{{DB}}": str(paths.database()),
            "{{CHECKS}}": str(ex.checks_path), "{{SOLUTION}}": str(ex.solution_path),
            "{{WORKSPACE}}": str(workspace), "{{MARKER}}": MARKER,
            "{{SOCKET}}": listener.path if listener else "/nonexistent", "{{PORT}}": str(listener.port if listener else 9),
            "{{READABLE}}": READABLE}
    for key, value in fill.items():
        text = text.replace(key, value)
    target = workspace / ex.file
    target.write_text(text, encoding="utf-8")
    return target


def _graded_without_trace(template: Path, ex: catalog.Exercise, tmp_path: Path, listener: Listener | None = None):
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    sentinel = workspace / "notes.txt"
    sentinel.write_text("the learner's own notes")
    with Store() as store:  # a progress database with one real attempt in it
        store.record_attempt(ex.key, "fail", "earlier.py", 1.0, {"status": "fail"})
    database = paths.database()
    before_db, before_checks = _digest(database), _digest(ex.checks_path)
    cache = ex.checks_path.parent / "__pycache__"
    cached_before = set(os.listdir(cache)) if cache.exists() else set()
    traces_before = _machine_traces()
    target = _attack(template, ex, workspace, listener)  # written before the workspace's times are taken
    watched = [database, ex.checks_path, sentinel, workspace, READABLE]
    metadata_before = [_metadata(p) for p in watched]
    reached_before = len(listener.reached) if listener else 0

    result = grade(ex, target,
                   timeout=QUICK_TIMEOUT if ex.needs == "cpu" else TORCH_TIMEOUT)

    assert result.status in ("fail", "error"), f"{template.name} as {ex.id} passed: {result.message}"
    assert not _survivors(), f"{template.name}: a process of the submission outlived grading"
    assert not _new_traces(traces_before), f"{template.name} left something on the machine"
    if listener:
        assert listener.reached[reached_before:] == [], f"{template.name} reached a server outside the sandbox"
    assert _digest(database) == before_db, f"{template.name} changed the progress database"
    with sqlite3.connect(database) as conn:
        assert conn.execute("SELECT status FROM attempts").fetchall() == [("fail",)]
    assert _digest(ex.checks_path) == before_checks, f"{template.name} changed the hidden checks"
    assert (set(os.listdir(cache)) if cache.exists() else set()) == cached_before, \
        f"{template.name} planted a file beside the hidden checks"
    assert sentinel.read_text() == "the learner's own notes", f"{template.name} touched the workspace"
    assert [_metadata(p) for p in watched] == metadata_before, \
        f"{template.name} changed a file's mode, times, xattrs or flags"
    report = json.dumps(result.to_json(), ensure_ascii=False)
    report.encode("utf-8")  # a lone surrogate cannot be printed: drill check would end in a traceback
    assert "\x1b" not in report, f"{template.name}: a terminal escape reached the report"
    return result


# The generic attacks against the NumPy exercises (22 x 9): a default run grades a third of them
# against the six whose checks take about a second (so every attack meets two of those), none
# against 03, 05 and 14, whose peak-memory checks take 5-10 s; DRILL_FULL_MATRIX=1 (as .ci/run
# sets) grades the whole matrix.
HEAVY = {"flash-forward", "flash-backward", "block-mask"}
LIGHT = [ex for ex in NUMPY_EXERCISES if ex.id not in HEAVY]
NUMPY_MATRIX = [pytest.param(t, ex, id=f"{t.stem}-{ex.id}",
                             marks=pytest.mark.full if ex.id in HEAVY or (LIGHT.index(ex) + j) % 3 else ())
                for ex in NUMPY_EXERCISES for j, t in enumerate(GENERIC)]


@pytest.mark.parametrize("template, ex", NUMPY_MATRIX)
def test_generic_attack_never_passes(template, ex, tmp_path, listener):
    _graded_without_trace(template, ex, tmp_path, listener)


# The generic attacks against the torch exercises take 5-20 s each on a CPU: a default run grades
# one in eleven, two attacks per exercise (tests/sampling.py); the full run grades them all. Every
# attack meets three NumPy exercises above in a default run.
TORCH_MATRIX = [pytest.param(t, ex, id=f"{t.stem}-{ex.id}", marks=pytest.mark.full if (i + j) % 11 else ())
                for i, ex in enumerate(TORCH_EXERCISES) for j, t in enumerate(GENERIC)]


@pytest.mark.slow
@pytest.mark.parametrize("template, ex", TORCH_MATRIX)
def test_generic_attack_never_passes_torch_exercises(template, ex, tmp_path, listener):
    _graded_without_trace(template, ex, tmp_path, listener)


# The attacks written against one torch exercise (5-20 s each on a CPU): half in a default run.
SPECIFIC_PARAMS = sample([pytest.param(p, id=f"{p.parent.name}/{p.stem}") for p in SPECIFIC], every=2,
                         slow=lambda p: p.values[0].parent.name in {ex.id for ex in TORCH_EXERCISES})


@pytest.mark.parametrize("template", SPECIFIC_PARAMS)
def test_specific_attack_never_passes(template, tmp_path, listener):
    ex = catalog.load_topic("flashattention").get(template.parent.name)
    result = _graded_without_trace(template, ex, tmp_path, listener)
    if template.stem.startswith("memory_"):
        # Their values are exact: the memory check must catch them (the traffic checks may too).
        failed = [c.name for c in result.checks if c.status == "fail"]
        assert any(name.startswith("Peak memory") for name in failed), failed


def test_report_names_the_sandbox_level(tmp_path):
    from drill.grader import sandbox

    ex = catalog.load_topic("flashattention").get("online-softmax")
    target = tmp_path / ex.file
    target.write_bytes(ex.solution_path.read_bytes())
    result = grade(ex, target)
    assert result.status == "pass"
    assert result.sandbox == sandbox.level()
    assert result.to_json()["sandbox"] in ("full", "partial")


def test_sandbox_imports_beside_a_hidden_folder_but_never_reads_it(tmp_path, monkeypatch):
    """`pip install .` puts drill (hidden from the subject) and numpy in one site-packages. An import
    lists the folder it searches, so the subject must be able to list that folder to import numpy
    (before this, every NumPy exercise was "not graded" after a non-editable install); it must still
    fail to open a file of the hidden folder."""
    import subprocess
    import sys

    from drill.grader import sandbox

    if sandbox.landlock_abi() < 1:
        pytest.skip("no Landlock on this kernel")
    site = tmp_path / "site"
    (site / "hidden").mkdir(parents=True)
    (site / "hidden" / "checks.py").write_text("ANSWER = 1\n")
    (site / "beside").mkdir()
    (site / "beside" / "__init__.py").write_text("VALUE = 42\n")
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.syspath_prepend(str(site))  # a read root, as site-packages is
    paths_ = sandbox.policy_paths(sandbox.Policy(scratch, [site / "hidden"]))
    code = (f"import sys; sys.path.insert(0, {str(site)!r}); import beside; print(beside.VALUE)\n"
            f"try:\n    open({str(site / 'hidden' / 'checks.py')!r}).read(); print('read')\n"
            "except PermissionError:\n    print('denied')\n")
    proc = subprocess.run([sys.executable, "-s", "-B", "-c", code], capture_output=True, text=True, cwd=scratch,
                          preexec_fn=sandbox.preexec(0, 10**7, paths_), timeout=60)
    assert proc.stdout.split() == ["42", "denied"], proc.stdout + proc.stderr


@pytest.mark.parametrize("attempt", range(5))
def test_a_killed_worker_leaves_no_process_and_no_cgroup(attempt, tmp_path, monkeypatch):
    """The worker killed at a random point (importing, mid-check, while sweeping): the PID
    namespace (through the relay's PDEATHSIG) or the runner's cgroup sweep still ends the
    subject and the helper it forked, and no cgroup stays behind."""
    import random
    import signal

    from drill.grader import runner, sandbox

    workers = []
    real = runner.start_trusted

    def start_and_kill_later(*args, **kwargs):
        proc = real(*args, **kwargs)
        workers.append(proc.pid)
        def kill():
            try:
                os.kill(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass  # grading had already ended

        threading.Timer(random.uniform(0.05, 2.5), kill).start()
        return proc

    monkeypatch.setattr(runner, "start_trusted", start_and_kill_later)
    ex = catalog.load_topic("flashattention").get("flash-forward")  # checks that run for a few seconds
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    grade(ex, _attack(REDTEAM / "generic" / "escape_setsid.py", ex, workspace), timeout=QUICK_TIMEOUT)
    assert not _survivors(), "a process of the submission outlived its killed worker"
    left = [p for root, *_ in sandbox.MemoryGroup.LAYOUTS for p in Path(root).glob(f"drill-{workers[0]}-*")]
    assert not left, f"cgroups left behind: {left}"


@pytest.mark.parametrize("attack", ["plant_symlinks", "rewrite_files", "shm_channel"])
def test_scratch_and_drill_home_under_dev_shm_stay_out_of_reach(attack, tmp_path, monkeypatch, listener):
    """TMPDIR and DRILL_HOME under /dev/shm (common on CI and HPC machines) once made the scratch
    root and the progress database writable by the subject. Grading moves its scratch root out
    of every tree the subject may reach, and /dev/shm is the subject's own private one."""
    import shutil
    import tempfile

    from drill.grader import runner

    if not os.path.isdir("/dev/shm"):
        pytest.skip("no /dev/shm here")
    shared = Path(tempfile.mkdtemp(prefix=f"{MARKER}-", dir="/dev/shm"))
    try:
        (shared / "tmp").mkdir()
        monkeypatch.setenv("TMPDIR", str(shared / "tmp"))
        monkeypatch.setenv("DRILL_HOME", str(shared / "home"))
        monkeypatch.setattr(tempfile, "tempdir", None)
        seen = []
        real = runner.place_copy
        monkeypatch.setattr(runner, "place_copy", lambda *a: seen.append(a[2]) or real(*a))
        ex = catalog.load_topic("flashattention").get("lse-merge")
        _graded_without_trace(REDTEAM / "generic" / f"{attack}.py", ex, tmp_path, listener)
        assert seen and not str(seen[0]).startswith("/dev/"), f"graded in {seen[0]}"
        assert not any((shared / "tmp").iterdir()), "something was written in the shared TMPDIR"
    finally:
        shutil.rmtree(shared, ignore_errors=True)


def test_a_hidden_path_inside_the_scratch_folder_is_refused(tmp_path):
    from drill.grader import sandbox

    with pytest.raises(sandbox.SandboxRefused, match="inside the subject's scratch folder"):
        sandbox.Policy(tmp_path, [tmp_path / "drill-home"])


def test_no_scratch_folder_inside_the_subjects_reach():
    import sys

    from drill.grader import sandbox

    assert sandbox.scratch_parent([sys.prefix, "/dev/shm", "/tmp"]) == str(Path("/tmp").resolve())
    with pytest.raises(sandbox.SandboxRefused, match="TMPDIR"):
        sandbox.scratch_parent([sys.prefix, "/dev/shm"])
