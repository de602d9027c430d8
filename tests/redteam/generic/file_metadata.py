# drill: flashattention/{{ID}}
# Attack: Landlock guards what a file holds, not its metadata. The subject's uid owns the learner's
# files (and every file, when drill runs as root), so it could chmod, re-date and tag with xattrs
# the notes, the workspace, the hidden checks and the progress database (none of which it may
# open), set inode flags (chattr) through ioctl on a file it may read ({{READABLE}}), and add keys
# to the kernel keyrings, which outlive the grading (a channel to any later subject). Each change
# here is harmless, but it must be refused: nothing outside the sandbox may change.
import ctypes
import fcntl
import os
import platform
import struct

_PATHS = ("{{WORKSPACE}}/notes.txt", "{{WORKSPACE}}", "{{CHECKS}}", "{{DB}}", "{{READABLE}}")


def _try(fn, *args, **kwargs):
    try:
        fn(*args, **kwargs)
    except Exception:
        pass


def _meddle():
    for path in _PATHS:
        try:
            st = os.stat(path)
        except OSError:
            continue
        _try(os.chmod, path, (st.st_mode & 0o7777) | 0o100)
        _try(os.utime, path, ns=(st.st_atime_ns, st.st_mtime_ns + 1))
        _try(os.setxattr, path, "user.drill", b"planted")
    try:
        fd = os.open("{{READABLE}}", os.O_RDONLY)
        flags = struct.unpack("l", fcntl.ioctl(fd, 0x80086601, bytes(8)))[0]  # FS_IOC_GETFLAGS
        _try(fcntl.ioctl, fd, 0x40086602, struct.pack("l", flags | 0x40))  # FS_IOC_SETFLAGS: nodump
        os.close(fd)
    except OSError:
        pass
    libc = ctypes.CDLL(None, use_errno=True)
    add_key = {"x86_64": 248, "aarch64": 217}.get(platform.machine())
    for keyring in (-4, -3):  # the user and the session keyrings
        if add_key is not None:
            libc.syscall(add_key, b"user", b"{{MARKER}}", b"the answer", 10, ctypes.c_int(keyring))


_meddle()


def _attack(*args, **kwargs):
    _meddle()
    return None


for _name in {{FUNCTIONS}}:
    globals()[_name] = _attack
