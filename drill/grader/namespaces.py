"""Private network, mount, IPC and PID namespaces for one contained process tree.

Entered in the child before exec (sandbox.preexec), where the kernel lets this process:
as root, or through an unprivileged user namespace (many distributions restrict those;
`probe` finds out once and the report says which layers held).

  * network: a namespace of its own with only a loopback (brought up for 06's ranks); no
    route to the machine's services or to another subject;
  * mount + IPC: a private /dev/shm (a small tmpfs that disappears with the tree) and no
    System V shared memory in common with anything else;
  * PID: the subject is PID 1 of its own namespace, so when it dies the kernel ends every
    process inside, whatever they did (setsid, double fork). The process that entered stays
    outside as a small relay: it waits for the subject and exits the way it did, and dies
    with the grader (PDEATHSIG), taking the namespace with it.
"""

from __future__ import annotations

import ctypes
import os
import signal
import socket
import struct
import sys

CLONE_NEWNS, CLONE_NEWIPC, CLONE_NEWUSER = 0x00020000, 0x08000000, 0x10000000
CLONE_NEWPID, CLONE_NEWNET = 0x20000000, 0x40000000
_MS_NOSUID, _MS_NODEV, _MS_REC, _MS_PRIVATE = 2, 4, 0x4000, 1 << 18
_PR_SET_PDEATHSIG = 1
_SIOCGIFFLAGS, _SIOCSIFFLAGS, _IFF_UP = 0x8913, 0x8914, 1
FLAGS = CLONE_NEWNS | CLONE_NEWIPC | CLONE_NEWPID | CLONE_NEWNET

_probed: str | None = None


def _libc():
    return ctypes.CDLL(None, use_errno=True)


def _unshare(flags: int) -> None:
    if os.geteuid() != 0:
        flags |= CLONE_NEWUSER
    uid, gid = os.geteuid(), os.getegid()
    if _libc().unshare(flags) != 0:
        raise OSError(ctypes.get_errno(), "unshare failed")
    if flags & CLONE_NEWUSER:  # the same ids inside, so files keep their owners
        for name, text in (("setgroups", "deny"), ("uid_map", f"{uid} {uid} 1"), ("gid_map", f"{gid} {gid} 1")):
            with open(f"/proc/self/{name}", "w") as f:
                f.write(text)


def probe() -> str:
    """'' where the namespaces can be entered here, else why not (tried once, in a child)."""
    global _probed
    if _probed is None:
        _probed = _try_in_child() if sys.platform == "linux" else "not Linux"
    return _probed


def _try_in_child() -> str:
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        try:
            _unshare(FLAGS)
            _private_mounts(1 << 20)
            message = b""
        except OSError as exc:
            message = (exc.strerror or str(exc)).encode()[:200] or b"refused"
        os.write(write, message or b"ok")
        os._exit(0)
    os.close(write)
    answer = os.read(read, 256).decode("utf-8", "replace")
    os.close(read)
    os.waitpid(pid, 0)
    return "" if answer == "ok" else f"namespaces refused here ({answer})"


def _private_mounts(shm_bytes: int) -> None:
    libc = _libc()
    if libc.mount(None, b"/", None, _MS_REC | _MS_PRIVATE, None) != 0:
        raise OSError(ctypes.get_errno(), "mount --make-rprivate / failed")
    if os.path.isdir("/dev/shm"):
        options = f"size={max(shm_bytes, 1 << 20)},mode=1777".encode()
        if libc.mount(b"tmpfs", b"/dev/shm", b"tmpfs", _MS_NOSUID | _MS_NODEV, options) != 0:
            raise OSError(ctypes.get_errno(), "mounting a private /dev/shm failed")


def _loopback_up() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        request = struct.pack("16sH14x", b"lo", 0)
        flags = struct.unpack("16sH14x", _ioctl(s, _SIOCGIFFLAGS, request))[1]
        _ioctl(s, _SIOCSIFFLAGS, struct.pack("16sH14x", b"lo", flags | _IFF_UP))


def _ioctl(s, request: int, data: bytes) -> bytes:
    import fcntl

    return fcntl.ioctl(s.fileno(), request, data)


def enter(shm_bytes: int, loopback: bool, pid: bool = True) -> None:
    """In a child before exec: enter the namespaces; returns in the subject (PID 1 inside).

    With pid, the calling process becomes the relay and never returns. pid=False leaves the
    PID namespace out: the NVIDIA driver fails to start CUDA inside one (error 304, measured
    on an H200). Raises OSError if a step fails, which makes the subject fail to start rather
    than run with less containment than reported.
    """
    _unshare(FLAGS if pid else FLAGS & ~CLONE_NEWPID)
    _private_mounts(shm_bytes)
    if loopback:
        _loopback_up()
    if not pid:
        return
    child = os.fork()
    if child == 0:
        _libc().prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)  # the relay died: end the namespace
        return
    _relay(child)


def _relay(child: int) -> None:
    os.closerange(0, 65536)  # nothing of the grader's (pipes, the exec-error pipe) stays open here
    while True:
        try:
            _, status = os.waitpid(child, 0)
            break
        except InterruptedError:
            continue
        except ChildProcessError:
            os._exit(1)
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        signal.signal(sig, signal.SIG_DFL)
        os.kill(os.getpid(), sig)
    os._exit(os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 1)
