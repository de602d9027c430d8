"""Containment for the subject process: what it may read and write, and its end.

Linux only. In the child, before the interpreter starts (`preexec`):
  * resource limits: address space per process, file size (caps printed output), no core;
  * no_new_privs, then Landlock (Linux 5.13+): read and execute only the interpreter, the
    import path without drill's hidden checks and solutions, system libraries and a few
    devices; write only the scratch folder; since ABI 6 also no signals to, and no abstract
    unix sockets of, processes outside the sandbox (ptrace and /proc/<pid> of outsiders
    are closed by Landlock itself);
  * every capability dropped, so a grader running as root gives the subject none;
  * a new session; SIGKILL when the grading process dies.
The grading process makes itself a child subreaper, so descendants that called setsid()
stay its descendants, and `end_tree` kills every one of them at the end.

Where Landlock is missing the subject still runs, with the other measures: the level in
force is reported as "full" or "partial". `Contained` puts all of this together for one
process tree (the subject, or 06's ring launcher and its ranks).
"""

from __future__ import annotations

import ctypes
import os
import platform
import resource
import signal
import sys
import time
from pathlib import Path

try:
    from drill.grader import namespaces, seccomp
except (ImportError, OSError):  # the copy beside 06's ring harness, in the sandbox, where drill is hidden
    import namespaces
    import seccomp

_SYSCALLS = {"x86_64": (444, 445, 446), "aarch64": (444, 445, 446)}  # create_ruleset, add_rule, restrict_self
_PR_SET_NO_NEW_PRIVS = 38
_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36

# Landlock filesystem rights (linux/landlock.h).
_EXECUTE, _WRITE_FILE, _READ_FILE, _READ_DIR = 1 << 0, 1 << 1, 1 << 2, 1 << 3
_WRITE_TREE = sum(1 << b for b in range(4, 13))  # remove, make dir/file/sock/fifo/sym/char/block
_REFER, _TRUNCATE = 1 << 13, 1 << 14
_SCOPE_ABSTRACT_UNIX, _SCOPE_SIGNAL = 1 << 0, 1 << 1

READ = _EXECUTE | _READ_FILE | _READ_DIR
_FILE_RIGHTS = _EXECUTE | _WRITE_FILE | _READ_FILE | _TRUNCATE

SYSTEM_READ = ("/usr", "/lib", "/lib64", "/lib32", "/bin", "/sbin", "/etc", "/proc", "/sys", "/opt")
DEVICES = ("/dev/null", "/dev/zero", "/dev/urandom", "/dev/random", "/dev/full")
PRIVATE_SHM = "/dev/shm"  # writable only where it is the subject's own tmpfs (namespaces.enter)


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64), ("handled_access_net", ctypes.c_uint64),
                ("scoped", ctypes.c_uint64)]


class _PathBeneath(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def _libc():
    return ctypes.CDLL(None, use_errno=True)


def landlock_abi() -> int:
    """The kernel's Landlock ABI version, 0 where there is none."""
    numbers = _SYSCALLS.get(platform.machine())
    if sys.platform != "linux" or numbers is None:
        return 0
    version = _libc().syscall(numbers[0], None, ctypes.c_size_t(0), ctypes.c_uint32(1))
    return max(int(version), 0)


def layers(cuda: bool = False) -> dict[str, str]:
    """Each containment layer on this machine: 'held (how)', or 'not held: why'."""
    abi = landlock_abi()
    isolation = namespaces.probe()
    found = {
        "files": f"held (Landlock ABI {abi})" if abi >= 1 else "not held: this kernel has no Landlock",
        "sockets": ("not held: no seccomp filter here" if not seccomp.available() else
                    "held (seccomp: no new socket once CUDA has started)" if cuda else
                    "held (seccomp: no new socket)"),
        "network": "held (a network namespace of its own)" if not isolation else f"not held: {isolation}",
        "shared memory": ("held (a private /dev/shm and IPC namespace)" if not isolation else
                          "held (/dev/shm not writable)" if abi >= 1 else "not held: /dev/shm is shared"),
        "processes": ("held (a PID namespace, and a memory cgroup or subreaper sweep)" if not isolation and not cuda
                      else "held in part (subreaper sweep and memory cgroup; no PID namespace"
                      + (", which CUDA refuses)" if cuda else ")")),
        "user": ("held (not root)" if os.geteuid() != 0 else
                 "held in part (root without capabilities; root-only files are not readable)"),
    }
    return found


def level(found: dict[str, str] | None = None) -> str:
    """'full' when every layer held, else 'partial' (the report lists which did not)."""
    found = found or layers()
    return "full" if all(v.startswith("held") for v in found.values()) else "partial"


def _handled(abi: int) -> int:
    rights = READ | _WRITE_FILE | _WRITE_TREE
    if abi >= 2:
        rights |= _REFER
    if abi >= 3:
        rights |= _TRUNCATE
    return rights


class SandboxRefused(Exception):
    """The sandbox cannot be set up as it must be here; the message says why, in one line."""


def read_roots() -> list[str]:
    """Every tree the subject may read: system folders, the interpreter and its import path."""
    roots = set(SYSTEM_READ)
    for entry in [sys.prefix, sys.base_prefix, sys.exec_prefix, os.path.dirname(os.path.realpath(sys.executable)),
                  *sys.path]:
        if entry and os.path.isdir(entry):
            roots.add(os.path.realpath(entry))
    return sorted(r for r in roots if os.path.exists(r))


def scratch_parent(candidates: list[str]) -> str:
    """The first candidate folder outside every tree a subject may read or write: the scratch root
    holds what the trusted side writes (worker files, other subjects' folders), which a subject
    must neither read nor plant links in. Raises SandboxRefused if none is."""
    reach = [Path(r) for r in read_roots()] + [Path(d) for d in (*DEVICES, PRIVATE_SHM, "/dev")]
    for candidate in candidates:
        try:
            path = Path(candidate).resolve()
        except OSError:
            continue
        if path.is_dir() and not any(path == r or r in path.parents for r in reach):
            return str(path)
    raise SandboxRefused(f"no folder for grading outside what the graded code may read (tried {', '.join(candidates)}); "
                         "set TMPDIR to a folder outside the Python installation, /dev and the system folders")


class Policy:
    """What the subject may touch: read-only roots, with some paths carved out, and writable roots."""

    def __init__(self, scratch: Path, hidden: list[Path]):
        self.scratch = scratch.resolve()
        self.hidden = [p.resolve() for p in hidden] + [Path(p) for p in root_only_files()]
        inside = [h for h in self.hidden if h == self.scratch or self.scratch in h.parents]
        if inside:  # never a silent grant: the caller chose a scratch folder around a hidden path
            raise SandboxRefused(f"{inside[0]} lies inside the subject's scratch folder {self.scratch}")
        self.read_roots = read_roots()

    def paths(self) -> tuple[list[str], list[str]]:
        """(read, list-only): the read roots, each expanded around the hidden paths it contains, and
        the folders on the way down to a hidden path, whose entries may be listed but not read. An
        import lists the folder it searches, so without the second a package installed beside drill
        (in one site-packages, as `pip install .` puts them) could not be imported. Landlock grants a
        folder's rights to everything below it, so the hidden folder's file names can be listed too;
        its files still cannot be opened (tests/test_redteam.py)."""
        read: list[str] = []
        listed: list[str] = []
        for root in self.read_roots:
            self._expand(Path(root), read, listed)
        return sorted(set(read)), sorted(set(listed))

    def _expand(self, path: Path, read: list[str], listed: list[str]) -> None:
        if any(path == h for h in self.hidden):
            return
        if not any(_inside(h, path) for h in self.hidden):
            read.append(str(path))
            return
        # A hidden path lies below: allow the siblings on the way down, never the hidden one.
        try:
            children = list(path.iterdir())
        except OSError:
            return
        listed.append(str(path))
        for child in children:
            if child.is_symlink():
                continue  # a link could lead back into a hidden folder
            self._expand(child, read, listed)


_root_only: list[str] | None = None


def root_only_files(top: str = "/etc") -> list[str]:
    """Where drill runs as root, the subject runs as root too (without capabilities) and so could
    read files only root may read (/etc/shadow, private keys): those under /etc are hidden."""
    global _root_only
    if os.geteuid() != 0:
        return []
    if _root_only is None:
        found = []
        for root, dirs, files in os.walk(top):
            for name in dirs + files:
                path = os.path.join(root, name)
                try:
                    mode = os.lstat(path).st_mode
                except OSError:
                    continue
                if not (mode & 0o004) and not (mode & 0o170000) == 0o120000:  # not world-readable, not a link
                    found.append(path)
            dirs[:] = [d for d in dirs if os.path.join(root, d) not in found]
        _root_only = found
    return _root_only


def _inside(child: Path, parent: Path) -> bool:
    return child != parent and parent in child.parents


def _apply_landlock(policy_paths: tuple[list[str], list[str], list[str], list[str]], net: int = 0,
                    scoped: bool = True, own_proc: bool = False) -> None:
    """Restrict this process (and what it starts) to the paths given; `net`: TCP rights to deny (ABI 4+)."""
    read_paths, write_paths, device_paths, list_paths = policy_paths
    libc = _libc()
    create, add, restrict = _SYSCALLS[platform.machine()]
    abi = int(libc.syscall(create, None, ctypes.c_size_t(0), ctypes.c_uint32(1)))
    if abi < 1:
        return
    scopes = (_SCOPE_ABSTRACT_UNIX | _SCOPE_SIGNAL) if abi >= 6 and scoped else 0
    attr = _RulesetAttr(_handled(abi), net if abi >= 4 else 0, scopes)
    size = ctypes.sizeof(_RulesetAttr) if abi >= 6 else (16 if abi >= 4 else 8)
    ruleset = libc.syscall(create, ctypes.byref(attr), ctypes.c_size_t(size), ctypes.c_uint32(0))
    if ruleset < 0:
        raise OSError(ctypes.get_errno(), "landlock_create_ruleset failed")
    handled = _handled(abi)

    def allow(path: str, rights: int) -> None:
        try:
            fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
        except OSError:
            return
        try:
            if not os.path.isdir(path):
                rights &= _FILE_RIGHTS
            rule = _PathBeneath(rights & handled, fd)
            libc.syscall(add, ctypes.c_int(ruleset), ctypes.c_int(1), ctypes.byref(rule), ctypes.c_uint32(0))
        finally:
            os.close(fd)

    for path in read_paths:
        allow(path, READ)
    for path in list_paths:  # names only: a hidden file below still cannot be opened
        allow(path, _READ_DIR)
    for path in device_paths:
        allow(path, READ | _WRITE_FILE | (_WRITE_TREE if path == PRIVATE_SHM else 0))
    for path in write_paths:
        allow(path, handled)
    if own_proc:
        # The NVIDIA driver writes to its own /proc entries when CUDA starts (error 304 without
        # this, measured on an H200). Resolved here, in the child, so it is this process's own
        # (through /proc/self: inside a PID namespace os.getpid() is 1).
        allow(os.path.realpath("/proc/self"), READ | _WRITE_FILE | _TRUNCATE)  # fopen(..., "w") truncates
    if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "no_new_privs failed")
    if libc.syscall(restrict, ctypes.c_int(ruleset), ctypes.c_uint32(0)) != 0:
        raise OSError(ctypes.get_errno(), "landlock_restrict_self failed")
    os.close(ruleset)


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def _drop_capabilities() -> None:
    """Give up every capability; with no_new_privs, exec cannot bring them back even for uid 0."""
    libc = _libc()
    libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
    header = _CapHeader(0x20080522, 0)
    data = (_CapData * 2)()
    libc.capset(ctypes.byref(header), ctypes.byref(data))


def preexec(memory_mb: int, output_limit: int, paths: tuple[list[str], list[str], list[str], list[str]] | None,
            group: "MemoryGroup | None" = None, cuda: bool = False, *, isolate: bool = False,
            sockets: bool = False, loopback: bool = False, shm_bytes: int = 64 << 20):
    """The function subprocess runs in the child before exec (computed paths are passed in).

    isolate: enter private namespaces (namespaces.enter; the subject is then a grandchild).
    sockets: leave socket() allowed (06's launcher, whose ranks shut themselves in later).
    """

    def apply() -> None:
        os.setsid()
        if group is not None:
            group.join()
        _libc().prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        mem = memory_mb * 1024 * 1024
        if memory_mb:
            resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
        resource.setrlimit(resource.RLIMIT_FSIZE, (output_limit, output_limit))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        if isolate:
            namespaces.enter(shm_bytes, loopback, pid=not cuda)
        if paths is not None:
            _apply_landlock(paths, own_proc=cuda)
        _drop_capabilities()
        # CUDA opens sockets while it starts (error 304 without them, measured on an H200): a CUDA
        # subject applies the filter itself once CUDA is up, before the user's file is loaded.
        if not sockets and not cuda and seccomp.available():
            seccomp.deny_new_sockets()

    return apply


def policy_paths(policy: Policy, private_shm: bool = False) -> tuple[list[str], list[str], list[str], list[str]]:
    """(read, write, device, list-only) paths, as _apply_landlock takes them."""
    devices = list(DEVICES) + [str(p) for p in Path("/dev").glob("nvidia*")] + ["/dev/dri"]
    devices += [PRIVATE_SHM] if private_shm else []
    read, listed = policy.paths()
    return read, [str(policy.scratch)], [d for d in devices if os.path.exists(d)], listed


# --- one contained process tree ---------------------------------------------------------------


def contained_env(scratch: Path, extra: dict) -> dict[str, str]:
    """A small environment: caches and HOME point into the scratch folder, nothing of drill's."""
    keep = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "CUDA_VISIBLE_DEVICES", "TRITON_INTERPRET",
            "LD_LIBRARY_PATH", "SYSTEMROOT")
    env = {k: v for k, v in os.environ.items() if k in keep}
    env.update(HOME=str(scratch), TMPDIR=str(scratch), PYTHONDONTWRITEBYTECODE="1", PYTHONUNBUFFERED="1",
               TRITON_CACHE_DIR=str(scratch / ".triton"), XDG_CACHE_HOME=str(scratch / ".cache"),
               MPLCONFIGDIR=str(scratch / ".mpl"), OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1",
               MKL_NUM_THREADS="1")
    env.update(extra)
    return env


class Contained:
    """A process started inside the sandbox, with every descendant of it under the same rules.

    `start` runs `python -s -B SCRIPT ARGS` from `scratch` (which must already hold the
    script and whatever it needs: nothing is read from elsewhere at run time) with
    Landlock where the kernel has it, no capabilities, its own session, a memory cgroup
    for the whole tree (or per-process address-space cap and /proc polling), and a cap on
    what it may print. `close` ends the tree, including processes that called setsid.
    """

    def __init__(self, proc, group: "MemoryGroup | None", scratch: Path, pid: int):
        self.proc, self.group, self.scratch = proc, group, scratch
        self.pid = pid  # the subject itself: proc.pid, or the relay's child inside the namespaces

    @classmethod
    def start(cls, script: Path, args: list[str], *, scratch: Path, hidden: list[Path], memory_mb: int,
              name: str, cap_address_space: bool = True, env: dict | None = None, stdout=None,
              output_limit: int = 64 * 1024 * 1024, pass_fds: tuple = (), cuda: bool = False,
              sockets: bool = False) -> "Contained":
        """sockets=True leaves socket() allowed and brings up a loopback (06's launcher)."""
        import subprocess

        isolate = not namespaces.probe()
        policy = Policy(scratch, hidden)
        paths = policy_paths(policy, private_shm=isolate) if landlock_abi() >= 1 else None
        group = MemoryGroup.create(name, memory_mb * 1024 * 1024) if memory_mb else None
        proc = subprocess.Popen(
            [sys.executable, "-s", "-B", str(script), *args],
            stdin=subprocess.DEVNULL, stdout=stdout if stdout is not None else subprocess.DEVNULL,
            stderr=stdout if stdout is not None else subprocess.DEVNULL, cwd=str(scratch),
            env=contained_env(scratch, env or {}), pass_fds=pass_fds, close_fds=True,
            preexec_fn=preexec(memory_mb if cap_address_space else 0, output_limit, paths, group, cuda,
                               isolate=isolate, sockets=sockets, loopback=sockets,
                               shm_bytes=min(memory_mb or 64, 256) << 20),
        )
        # Popen returns once the exec-error pipe is closed everywhere: the relay closed it at once,
        # its child when it exec'd; so the subject is running (or gone) by now.
        pid = next(iter(descendants(proc.pid)), proc.pid) if isolate and not cuda else proc.pid
        return cls(proc, group, scratch, pid)

    def tree_bytes(self) -> int:
        return tree_rss_bytes(self.pid)

    def close(self) -> None:
        """End the tree: every descendant of this grading process (a setsid escapee is one too)."""
        end_tree()
        self.proc.wait()
        if self.group is not None:
            self.group.remove()
            self.group = None


# --- the end of the tree ---------------------------------------------------------------------


def become_subreaper() -> None:
    """Orphans of our descendants (setsid or not) are re-parented to this process, not to init."""
    if sys.platform == "linux":
        _libc().prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)


def descendants(root: int) -> list[int]:
    """Every process below `root`, read from /proc."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        ppid = int(stat[stat.rindex(b")") + 2:].split()[1])
        children.setdefault(ppid, []).append(int(entry))
    found, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def end_tree(root: int = 0) -> None:
    """Kill every descendant of `root` (default: this process) and reap what is ours to reap."""
    root = root or os.getpid()
    for _ in range(50):
        pids = descendants(root)
        if not pids:
            return
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        _reap()
        time.sleep(0.01)


def _reap() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def tree_rss_bytes(root: int) -> int:
    """Resident memory of `root` and all its descendants together."""
    total = 0
    page = os.sysconf("SC_PAGE_SIZE")
    for pid in [root, *descendants(root)]:
        try:
            with open(f"/proc/{pid}/statm", "rb") as f:
                total += int(f.read().split()[1]) * page
        except (OSError, ValueError, IndexError):
            pass
    return total


def status_bytes(pid: int, field: str) -> int:
    """A memory figure of /proc/<pid>/status (VmRSS, VmHWM), in bytes; 0 if the process is gone."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return 0


def maps_library(pid: int, name: str) -> bool:
    """Whether a shared library whose file name starts with `name` is mapped in process pid."""
    try:
        with open(f"/proc/{pid}/maps", encoding="utf-8", errors="replace") as f:
            return any(line.rsplit("/", 1)[-1].startswith(name) for line in f if "/" in line)
    except OSError:
        return False


class MemoryGroup:
    """A memory cgroup for the subject's whole tree: a cap on all of it and its true peak.

    Made where this process may create one (root, cgroup v1 or v2 with the memory
    controller); elsewhere `create` returns None and the caller watches /proc instead.
    """

    LAYOUTS = (("/sys/fs/cgroup/memory", "memory.limit_in_bytes", "memory.max_usage_in_bytes", "memory.usage_in_bytes"),
               ("/sys/fs/cgroup", "memory.max", "memory.peak", "memory.current"))
    # A cap on the tree's processes and threads. Memory alone allows tens of thousands of them (a
    # thread costs a few pages), enough to use up the machine's PIDs (pid_max, 32768 by default) for
    # as long as the grading lasts, so that nothing else on the machine could fork; RLIMIT_NPROC does
    # not bind uid 0. cgroup v1 keeps pids.max in a hierarchy of its own, v2 in the memory group.
    PIDS_ROOT = "/sys/fs/cgroup/pids"
    MAX_TASKS = 4096

    def __init__(self, path: Path, limit_file: str, peak_file: str, usage_file: str):
        self.path, self.peak_file, self.usage_file = path, peak_file, usage_file
        self.limit_file = limit_file
        self.pids: Path | None = None  # the v1 pids group beside this one, if made

    def _cap_tasks(self, name: str) -> None:
        """Best effort: where no pids controller is reachable, memory stays the only cap."""
        if (self.path / "pids.max").exists():
            try:
                (self.path / "pids.max").write_text(str(self.MAX_TASKS))
            except OSError:
                pass
            return
        base = Path(self.PIDS_ROOT)
        if not (base / "cgroup.procs").exists():
            return
        _remove_stale_groups(base)
        path = base / name
        try:
            path.mkdir()
            (path / "pids.max").write_text(str(self.MAX_TASKS))
            self.pids = path
        except OSError:
            try:
                path.rmdir()
            except OSError:
                pass

    @classmethod
    def create(cls, name: str, limit_bytes: int) -> "MemoryGroup | None":
        for root, limit_file, peak_file, usage_file in cls.LAYOUTS:
            base = Path(root)
            if not (base / peak_file).exists() and not (base / "cgroup.procs").exists():
                continue
            _remove_stale_groups(base)
            path = base / name
            try:
                path.mkdir()
                (path / limit_file).write_text(str(limit_bytes))
                if not (path / peak_file).exists():
                    raise OSError("no peak counter")
            except OSError:
                try:
                    path.rmdir()
                except OSError:
                    pass
                continue
            group = cls(path, limit_file, peak_file, usage_file)
            group._cap_tasks(name)
            return group
        return None

    def join(self) -> None:
        """Called in the child before exec: move this process into the group."""
        with open(self.path / "cgroup.procs", "w") as f:
            f.write(str(os.getpid()))
        if self.pids is not None:
            with open(self.pids / "cgroup.procs", "w") as f:
                f.write(str(os.getpid()))

    def read(self, which: str) -> int:
        try:
            return int((self.path / (self.peak_file if which == "peak" else self.usage_file)).read_text().split()[0])
        except (OSError, ValueError, IndexError):
            return 0

    def remove(self) -> None:
        for path in (self.path, self.pids):
            for _ in range(100 if path is not None else 0):
                try:
                    path.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.01)  # the killed processes are still leaving


    @classmethod
    def sweep(cls, owner: int) -> None:
        """Kill every process in the groups a grading process `owner` made, then remove them: the
        runner's backstop for a worker that died before it could end its own subjects."""
        for root in [layout[0] for layout in cls.LAYOUTS] + [cls.PIDS_ROOT]:
            for path in Path(root).glob(f"drill-{owner}-*"):
                for _ in range(100):
                    try:
                        pids = [int(p) for p in (path / "cgroup.procs").read_text().split()]
                    except (OSError, ValueError):
                        break
                    for pid in pids:
                        try:
                            os.kill(pid, signal.SIGKILL)
                        except ProcessLookupError:
                            pass
                    if not pids:
                        break
                    time.sleep(0.01)
                cls(path, "", "", "").remove()


def _remove_stale_groups(base: Path) -> None:
    """Empty groups left by a grader that was killed (named drill-<its pid>-<n>): remove them."""
    for path in base.glob("drill-*-*"):
        pid = path.name.split("-")[1]
        if pid.isdigit() and not Path(f"/proc/{pid}").exists():
            try:
                path.rmdir()  # fails, harmlessly, while processes are still inside
            except OSError:
                pass
