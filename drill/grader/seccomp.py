"""A seccomp-BPF filter that stops a process (and everything it starts) from making new sockets.

Landlock does not mediate connect() on a pathname unix socket, so without this a subject
could reach any local server (a terminal multiplexer, a container daemon, D-Bus) and have
it act outside the sandbox. The filter refuses socket() with EACCES and io_uring_setup
(io_uring can open sockets itself); socketpair() stays allowed, since a connected pair
reaches nothing outside the process tree. System calls of another ABI (32-bit int 0x80 on
x86_64, where sockets go through socketcall) kill the process.

Standard library only: 06's ring harness runs a copy of this file inside the sandbox and
applies the filter in each rank once gloo's own connections are made.
"""

from __future__ import annotations

import ctypes
import errno
import platform
import sys

_PR_SET_NO_NEW_PRIVS, _PR_SET_SECCOMP, _SECCOMP_MODE_FILTER = 38, 22, 2
_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}  # AUDIT_ARCH_*
_DENIED = {"x86_64": {"socket": 41, "io_uring_setup": 425}, "aarch64": {"socket": 198, "io_uring_setup": 425}}
_X32_BIT = 0x40000000
_LD_W_ABS, _JEQ_K, _JGE_K, _RET_K = 0x20, 0x15, 0x35, 0x06
_RET_ALLOW, _RET_KILL_PROCESS, _RET_ERRNO = 0x7FFF0000, 0x80000000, 0x00050000


class _Instruction(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint16), ("jt", ctypes.c_uint8), ("jf", ctypes.c_uint8), ("k", ctypes.c_uint32)]


class _Program(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(_Instruction))]


def available() -> bool:
    """Whether this kernel and architecture take the filter."""
    if sys.platform != "linux" or platform.machine() not in _ARCH:
        return False
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            return any(line.startswith("Seccomp:") for line in f)
    except OSError:
        return False


def program(machine: str) -> list[tuple[int, int, int, int]]:
    """The filter as (code, jt, jf, k) instructions; seccomp_data holds nr at offset 0, arch at 4."""
    denied = sorted(_DENIED[machine].values())
    refuse = 6 + len(denied)  # the last instruction: 4 to load and check, the x32 test, the numbers, allow
    code = [(_LD_W_ABS, 0, 0, 4),
            (_JEQ_K, 1, 0, _ARCH[machine]),
            (_RET_K, 0, 0, _RET_KILL_PROCESS),
            (_LD_W_ABS, 0, 0, 0)]
    code.append((_JGE_K, refuse - len(code) - 1, 0, _X32_BIT))
    for number in denied:
        code.append((_JEQ_K, refuse - len(code) - 1, 0, number))
    code.append((_RET_K, 0, 0, _RET_ALLOW))
    code.append((_RET_K, 0, 0, _RET_ERRNO | errno.EACCES))
    return code


def deny_new_sockets() -> None:
    """Install the filter on this process; raises OSError where the kernel refuses it."""
    machine = platform.machine()
    code = program(machine)
    instructions = (_Instruction * len(code))(*[_Instruction(*i) for i in code])
    prog = _Program(len(code), instructions)
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "no_new_privs failed")
    if libc.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.byref(prog), 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "seccomp filter refused")
