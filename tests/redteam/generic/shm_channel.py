# drill: flashattention/{{ID}}
# Attack: /dev/shm as a channel between subjects, and a way to keep memory pinned after
# grading: leave files there (an answer for a later, fresh subject; 200 MB of ballast) and
# System V shared memory. Nothing may be left behind on the machine.
import ctypes
import os


def _leave():
    for folder in ("/dev/shm", "/run/shm"):
        try:
            with open(os.path.join(folder, "{{MARKER}}-answer"), "wb") as f:
                f.write(b"the answer, for the next subject")
            with open(os.path.join(folder, "{{MARKER}}-ballast"), "wb") as f:
                f.write(b"\0" * (200 << 20))
        except OSError:
            pass
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.shmget(0x6472696C, 64 << 20, 0o1666)  # IPC_CREAT | 0666, key "dril"
    except OSError:
        pass


_leave()


def _attack(*args, **kwargs):
    _leave()
    return None


for _name in {{FUNCTIONS}}:
    globals()[_name] = _attack
