# drill: flashattention/{{ID}}
# Attack: leave the process with status 0 in the middle of a check, at every level Python offers.
import os
import sys

_calls = [0]


def _attack(*args, **kwargs):
    _calls[0] += 1
    if _calls[0] % 3 == 0:
        raise KeyboardInterrupt
    if _calls[0] % 3 == 1:
        sys.exit(0)
    os._exit(0)


for _name in {{FUNCTIONS}}:
    globals()[_name] = _attack
