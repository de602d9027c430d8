"""The seccomp filters of drill/grader/seccomp.py, applied in a forked child of the test."""

from __future__ import annotations

import ctypes
import errno
import json
import mmap
import os
import socket
import threading

import pytest

from drill.grader import seccomp

pytestmark = pytest.mark.skipif(not seccomp.available(), reason="no seccomp on this machine")


def _in_child(body) -> dict:
    """Run body() in a forked child that first installs the hiding filter; its JSON result."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        try:
            seccomp.deny_hidden_memory()
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
    segment or madvise page-out: what it holds stays in its own resident memory."""
    libc = ctypes.CDLL(None, use_errno=True)

    def body():
        seen = []
        worker = threading.Thread(target=lambda: seen.append(1))
        worker.start()
        worker.join()

        def shmget():
            if libc.shmget(0, 1 << 20, 0o1600) < 0:  # IPC_PRIVATE, IPC_CREAT | 0600
                raise OSError(ctypes.get_errno(), "shmget")

        return {"thread": seen == [1],
                "fork": _errno_of(os.fork),
                "memfd": _errno_of(lambda: os.memfd_create("x")),
                "socketpair": _errno_of(socket.socketpair),
                "shmget": _errno_of(shmget),
                "pageout": _errno_of(lambda: mmap.mmap(-1, 4096).madvise(21)),
                "dontneed": _errno_of(lambda: mmap.mmap(-1, 4096).madvise(mmap.MADV_DONTNEED))}

    got = _in_child(body)
    assert got == {"thread": True, "fork": errno.EACCES, "memfd": errno.EACCES, "socketpair": errno.EACCES,
                   "shmget": errno.EACCES, "pageout": errno.EACCES, "dontneed": 0}
