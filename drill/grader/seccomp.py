"""A seccomp-BPF filter that stops a process (and everything it starts) from making new sockets.

Landlock does not mediate connect() on a pathname unix socket, so without this a subject
could reach any local server (a terminal multiplexer, a container daemon, D-Bus) and have
it act outside the sandbox. The filter refuses socket() with EACCES and io_uring_setup
(io_uring can open sockets itself); socketpair() stays allowed, since a connected pair
reaches nothing outside the process tree. System calls of another ABI (32-bit int 0x80 on
x86_64, where sockets go through socketcall) kill the process.

Standard library only: 06's ring harness runs a copy of this file inside the sandbox and
applies the filter in each rank once gloo's own connections are made, then a second one
(`deny_hidden_memory`) so that what a rank holds is in its own resident memory, where the
kernel counts its peak: no new process, no memfd or System V segment, no socketpair buffers,
no pages pushed out with madvise.
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
# Places a rank could keep data outside its own resident memory (see deny_hidden_memory):
_HIDING = {"x86_64": {"fork": 57, "vfork": 58, "clone3": 435, "memfd_create": 319, "memfd_secret": 447,
                      "socketpair": 53, "shmget": 29},
           "aarch64": {"clone3": 435, "memfd_create": 279, "memfd_secret": 447, "socketpair": 199, "shmget": 194}}
_CLONE = {"x86_64": 56, "aarch64": 220}
_MADVISE = {"x86_64": 28, "aarch64": 233}
_CLONE_THREAD, _MADV_COLD, _MADV_PAGEOUT = 0x10000, 20, 21
_ARG0, _ARG2 = 16, 32  # offsets of the low words of args[0] and args[2] in seccomp_data (little-endian)
_LD_W_ABS, _JEQ_K, _JGE_K, _JSET_K, _RET_K = 0x20, 0x15, 0x35, 0x45, 0x06
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
    _install(program(platform.machine()))


def hiding_program(machine: str) -> list[tuple[int, int, int, int]]:
    """The second filter: clone only for threads (clone3 answers ENOSYS, so the C library falls
    back to clone, whose flags a filter can read), and EACCES for the calls in _HIDING and for
    madvise(MADV_COLD / MADV_PAGEOUT). BPF jumps only forward, so each test has its own ending."""
    hiding = _HIDING[machine]
    tail = [(_RET_K, 0, 0, _RET_ALLOW),
            (_LD_W_ABS, 0, 0, _ARG0),  # clone: its flags
            (_JSET_K, 0, 1, _CLONE_THREAD),
            (_RET_K, 0, 0, _RET_ALLOW),
            (_RET_K, 0, 0, _RET_ERRNO | errno.EACCES),
            (_LD_W_ABS, 0, 0, _ARG2),  # madvise: the advice
            (_JEQ_K, 2, 0, _MADV_COLD),
            (_JEQ_K, 1, 0, _MADV_PAGEOUT),
            (_RET_K, 0, 0, _RET_ALLOW),
            (_RET_K, 0, 0, _RET_ERRNO | errno.EACCES),
            (_RET_K, 0, 0, _RET_ERRNO | errno.ENOSYS)]
    clone_at, madvise_at, eacces, enosys = 1, 5, 9, 10  # positions in tail
    code = [(_LD_W_ABS, 0, 0, 4),
            (_JEQ_K, 1, 0, _ARCH[machine]),
            (_RET_K, 0, 0, _RET_KILL_PROCESS),
            (_LD_W_ABS, 0, 0, 0)]
    tests = [(number, enosys if name == "clone3" else eacces) for name, number in hiding.items()]
    tests += [(_CLONE[machine], clone_at), (_MADVISE[machine], madvise_at)]
    for i, (number, target) in enumerate(tests):
        code.append((_JEQ_K, len(tests) - i - 1 + target, 0, number))
    return code + tail


def _install(code: list[tuple[int, int, int, int]]) -> None:
    instructions = (_Instruction * len(code))(*[_Instruction(*i) for i in code])
    prog = _Program(len(code), instructions)
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "no_new_privs failed")
    if libc.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.byref(prog), 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "seccomp filter refused")


def deny_hidden_memory() -> None:
    """Install hiding_program on this process (stacked on any filter it has)."""
    _install(hiding_program(platform.machine()))
