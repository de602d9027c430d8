"""A seccomp-BPF filter that stops a process (and everything it starts) from making new sockets.

Landlock does not mediate connect() on a pathname unix socket, so without this a subject
could reach any local server (a terminal multiplexer, a container daemon, D-Bus) and have
it act outside the sandbox. The filter refuses socket() with EACCES and io_uring_setup
(io_uring can open sockets itself); socketpair() stays allowed, since a connected pair
reaches nothing outside the process tree. clone3 answers ENOSYS: it can start a child in any
cgroup whose folder it can open (CLONE_INTO_CGROUP), which a subject running as root may do by
mode bits alone, leaving its memory and pids caps; the C library then falls back to clone, which
cannot name a cgroup. System calls of another ABI (32-bit int 0x80 on x86_64, where sockets go
through socketcall) kill the process.

Standard library only: 06's ring harness runs a copy of this file inside the sandbox and
applies the filter in each rank once gloo's own connections are made, then a second one
(`deny_hidden_memory`) so that what a rank holds is in its own resident memory, where the
kernel counts its peak: no new process, no memfd or System V segment, no socketpair or pipe buffers,
no message queue, no pages pushed out with madvise or process_madvise.
"""

from __future__ import annotations

import ctypes
import errno
import platform
import sys

_PR_SET_NO_NEW_PRIVS, _PR_SET_SECCOMP, _SECCOMP_MODE_FILTER = 38, 22, 2
_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}  # AUDIT_ARCH_*
_DENIED = {"x86_64": {"socket": 41, "io_uring_setup": 425}, "aarch64": {"socket": 198, "io_uring_setup": 425}}
# Landlock guards what a file holds, not its metadata: a subject whose uid owns a file it may merely
# open or name (the learner's workspace and progress database, the hidden checks; all of them when
# the grader runs as root) could still chmod, chown, re-date or tag it with xattrs, and those changes
# outlive the grading. The kernel keyrings are a store no namespace here isolates for root (a key
# added to the user keyring stays after the grading, for any later subject to read). Refused too.
_METADATA = {"x86_64": {"chmod": 90, "fchmod": 91, "chown": 92, "fchown": 93, "lchown": 94, "utime": 132,
                        "setxattr": 188, "lsetxattr": 189, "fsetxattr": 190, "removexattr": 197,
                        "lremovexattr": 198, "fremovexattr": 199, "utimes": 235, "add_key": 248,
                        "request_key": 249, "keyctl": 250, "fchownat": 260, "futimesat": 261, "fchmodat": 268,
                        "utimensat": 280, "fchmodat2": 452, "setxattrat": 463, "removexattrat": 466},
             "aarch64": {"setxattr": 5, "lsetxattr": 6, "fsetxattr": 7, "removexattr": 14, "lremovexattr": 15,
                         "fremovexattr": 16, "fchmod": 52, "fchmodat": 53, "fchownat": 54, "fchown": 55,
                         "utimensat": 88, "add_key": 217, "request_key": 218, "keyctl": 219, "fchmodat2": 452,
                         "setxattrat": 463, "removexattrat": 466}}
for _machine, _numbers in _METADATA.items():
    _DENIED[_machine].update(_numbers)
# The same through ioctl on a file opened only to read (Landlock checks devices' ioctls only): inode
# flags (chattr: nodump, noatime, ...), the file's version and project attributes, fs-verity (which
# makes a file read-only for good) and an encryption policy. Matched on the command's 32 bits, which
# is all the kernel reads of it.
_IOCTL = {"x86_64": 16, "aarch64": 29}
_IOCTL_DENIED = (0x40086602, 0x40046602,  # FS_IOC_SETFLAGS, FS_IOC32_SETFLAGS
                 0x40087602, 0x40047602,  # FS_IOC_SETVERSION, FS_IOC32_SETVERSION
                 0x40086604, 0x40046604,  # EXT4_IOC_SETVERSION and its 32-bit twin
                 0x401C5820,  # FS_IOC_FSSETXATTR
                 0x40806685,  # FS_IOC_ENABLE_VERITY
                 0x800C6613)  # FS_IOC_SET_ENCRYPTION_POLICY
_ARG1 = 24  # the low word of args[1], an ioctl's command
_X32_BIT = 0x40000000
# Places a rank could keep data outside its own resident memory (see deny_hidden_memory):
# Pipe buffers and message queues are kernel memory too: a rank that fills hundreds of pipes
# (or System V / POSIX queues) holds every gathered shard there at no cost to its resident peak.
# process_madvise pages out as madvise does.
_HIDING = {"x86_64": {"fork": 57, "vfork": 58, "clone3": 435, "memfd_create": 319, "memfd_secret": 447,
                      "socketpair": 53, "shmget": 29, "pipe": 22, "pipe2": 293, "msgget": 68, "mq_open": 240,
                      "process_madvise": 440},
           "aarch64": {"clone3": 435, "memfd_create": 279, "memfd_secret": 447, "socketpair": 199, "shmget": 194,
                       "pipe2": 59, "msgget": 186, "mq_open": 180, "process_madvise": 440}}
_CLONE = {"x86_64": 56, "aarch64": 220}
_CLONE3 = 435  # the same number on x86_64 and aarch64
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
    commands = sorted(_IOCTL_DENIED)
    # Then: 4 to load and check, the x32 test, the numbers, clone3's test, ioctl's test and its
    # commands, allow, refuse, ENOSYS.
    allow = 4 + 1 + len(denied) + 1 + 2 + len(commands)
    refuse = allow + 1
    enosys = refuse + 1
    code = [(_LD_W_ABS, 0, 0, 4),
            (_JEQ_K, 1, 0, _ARCH[machine]),
            (_RET_K, 0, 0, _RET_KILL_PROCESS),
            (_LD_W_ABS, 0, 0, 0)]
    code.append((_JGE_K, refuse - len(code) - 1, 0, _X32_BIT))
    for number in denied:
        code.append((_JEQ_K, refuse - len(code) - 1, 0, number))
    code.append((_JEQ_K, enosys - len(code) - 1, 0, _CLONE3))
    code.append((_JEQ_K, 0, allow - len(code) - 1, _IOCTL[machine]))  # any other call: allowed
    code.append((_LD_W_ABS, 0, 0, _ARG1))
    for command in commands:
        code.append((_JEQ_K, refuse - len(code) - 1, 0, command))
    code.append((_RET_K, 0, 0, _RET_ALLOW))
    code.append((_RET_K, 0, 0, _RET_ERRNO | errno.EACCES))
    code.append((_RET_K, 0, 0, _RET_ERRNO | errno.ENOSYS))
    if len(code) != enosys + 1:  # the jumps above were counted for this layout
        raise RuntimeError("seccomp program: the last instructions are not where the jumps point")
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
