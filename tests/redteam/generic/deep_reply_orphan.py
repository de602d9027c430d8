# drill: flashattention/{{ID}}
# Attack: fork a helper at import that keeps running, then answer a call with a message nested
# thousands deep. json.loads raised RecursionError inside the trusted worker, which died before
# ending its subjects, and the helper lived on under init. The reply must be refused as the
# learner's error, and the helper must end with the grading.
import ctypes
import os
import struct
import sys
import time


def _helper():
    if os.fork() == 0:
        os.setsid()
        ctypes.CDLL(None).prctl(15, b"{{MARKER}}", 0, 0, 0)  # PR_SET_NAME, so the test can look
        for _ in range(1200):
            time.sleep(0.05)
        os._exit(0)


_helper()


def _attack(*args, **kwargs):
    body = ('{"ok": true, "arrays": 0, "payload": ' + "[" * 200_000 + "]" * 200_000 + "}").encode()
    os.write(int(sys.argv[4]), struct.pack("<Q", len(body)) + body)  # the subject's reply channel
    time.sleep(30)


for _name in {{FUNCTIONS}}:
    globals()[_name] = _attack
