"""The seccomp filters of drill/grader/seccomp.py, applied in a forked child of the test."""

from __future__ import annotations

import ctypes
import errno
import fcntl
import json
import mmap
import os
import platform
import socket
import struct
import threading

import pytest

from drill.grader import seccomp

pytestmark = pytest.mark.skipif(not seccomp.available(), reason="no seccomp on this machine")


def _in_child(body, install=seccomp.deny_hidden_memory) -> dict:
    """Run body() in a forked child that first installs a filter (the hiding one); its JSON result."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        try:
            install()
            result = body()
        except BaseException as exc:  # noqa: BLE001 - reported to the parent
            result = {"crashed": repr(exc)}
        os.write(write, json.dumps(result).encode())
        os._exit(0)
    os.close(write)
    data = b""
    while chunk := os.read(read, 65536):
        data += chunk
    os.close(read)
    os.waitpid(pid, 0)
    return json.loads(data)


def _errno_of(call) -> int:
    try:
        result = call()
    except OSError as exc:
        return exc.errno
    if isinstance(result, int) and result == 0 and call is os.fork:
        os._exit(0)  # a child that should not exist
    return 0


def test_hidden_memory_refused_threads_kept():
    """A rank keeps threads (gloo's, torch's) but gets no process, memfd, socketpair, System V
    segment, pipe or message queue, or madvise page-out: what it holds stays in its own resident
    memory."""
    libc = ctypes.CDLL(None, use_errno=True)

    def body():
        seen = []
        worker = threading.Thread(target=lambda: seen.append(1))
        worker.start()
        worker.join()

        def shmget():
            if libc.shmget(0, 1 << 20, 0o1600) < 0:  # IPC_PRIVATE, IPC_CREAT | 0600
                raise OSError(ctypes.get_errno(), "shmget")

        def msgget():
            if libc.msgget(0, 0o1600) < 0:  # IPC_PRIVATE, IPC_CREAT | 0600
                raise OSError(ctypes.get_errno(), "msgget")

        return {"thread": seen == [1],
                "fork": _errno_of(os.fork),
                "memfd": _errno_of(lambda: os.memfd_create("x")),
                "socketpair": _errno_of(socket.socketpair),
                "shmget": _errno_of(shmget),
                "pipe": _errno_of(os.pipe),
                "msgget": _errno_of(msgget),
                "pageout": _errno_of(lambda: mmap.mmap(-1, 4096).madvise(21)),
                "dontneed": _errno_of(lambda: mmap.mmap(-1, 4096).madvise(mmap.MADV_DONTNEED))}

    got = _in_child(body)
    assert got == {"thread": True, "fork": errno.EACCES, "memfd": errno.EACCES, "socketpair": errno.EACCES,
                   "shmget": errno.EACCES, "pipe": errno.EACCES, "msgget": errno.EACCES, "pageout": errno.EACCES,
                   "dontneed": 0}


def test_metadata_and_keyrings_refused(tmp_path):
    """The subject's filter: no socket, and no change to a file's metadata (mode, times, xattrs, inode
    flags), which Landlock leaves to the file's owner, nor to the kernel keyrings; files still written."""
    path = tmp_path / "owned.txt"
    path.write_text("mine")
    libc = ctypes.CDLL(None, use_errno=True)

    def body():
        fd = os.open(path, os.O_RDONLY)

        def add_key():
            number = {"x86_64": 248, "aarch64": 217}[platform.machine()]
            if libc.syscall(number, b"user", b"drill-test", b"x", 1, ctypes.c_int(-4)) < 0:  # the user keyring
                raise OSError(ctypes.get_errno(), "add_key")

        return {"socket": _errno_of(socket.socket),
                "chmod": _errno_of(lambda: os.chmod(path, 0o600)),
                "fchmod": _errno_of(lambda: os.fchmod(fd, 0o600)),
                "utime": _errno_of(lambda: os.utime(path, (0, 0))),
                "setxattr": _errno_of(lambda: os.setxattr(path, "user.drill", b"x")),
                "chattr": _errno_of(lambda: fcntl.ioctl(fd, 0x40086602, struct.pack("l", 0x40))),  # FS_IOC_SETFLAGS
                "add_key": _errno_of(add_key),
                "write": _errno_of(lambda: path.write_text("still mine"))}

    got = _in_child(body, seccomp.deny_new_sockets)
    assert got == {"socket": errno.EACCES, "chmod": errno.EACCES, "fchmod": errno.EACCES, "utime": errno.EACCES,
                   "setxattr": errno.EACCES, "chattr": errno.EACCES, "add_key": errno.EACCES, "write": 0}
    assert path.read_text() == "still mine"


def test_clone3_answers_enosys_threads_and_processes_kept():
    """clone3 could start a child in a cgroup of the subject's choosing (CLONE_INTO_CGROUP: root may,
    by mode bits alone), outside its memory and pids caps: the subject's filter answers ENOSYS, and the
    C library's threads, fork and subprocess fall back to clone."""
    import subprocess
    import sys

    libc = ctypes.CDLL(None, use_errno=True)

    def body():
        class Args(ctypes.Structure):
            _fields_ = [("flags", ctypes.c_uint64), ("pidfd", ctypes.c_uint64), ("child_tid", ctypes.c_uint64),
                        ("parent_tid", ctypes.c_uint64), ("exit_signal", ctypes.c_uint64)]

        args = Args(exit_signal=17)
        pid = libc.syscall(435, ctypes.byref(args), ctypes.c_size_t(ctypes.sizeof(args)))
        if pid == 0:
            os._exit(0)
        clone3 = ctypes.get_errno() if pid < 0 else 0
        seen = []
        thread = threading.Thread(target=lambda: seen.append(1))
        thread.start()
        thread.join()
        child = os.fork()
        if child == 0:
            os._exit(7)
        _, status = os.waitpid(child, 0)
        ran = subprocess.run([sys.executable, "-c", "print(6 * 7)"], capture_output=True, text=True).stdout
        return {"clone3": clone3, "thread": seen, "fork": os.waitstatus_to_exitcode(status), "subprocess": ran}

    assert _in_child(body, seccomp.deny_new_sockets) == {"clone3": errno.ENOSYS, "thread": [1], "fork": 7,
                                                          "subprocess": "42\n"}
