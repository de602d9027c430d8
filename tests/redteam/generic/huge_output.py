# drill: flashattention/{{ID}}
# Attack on the grader's resources: print far more than any report could hold.
import sys


def _attack(*args, **kwargs):
    line = "x" * 1_000_000
    while True:
        sys.stdout.write(line)


for _name in {{FUNCTIONS}}:
    globals()[_name] = _attack
