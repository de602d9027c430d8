# drill: flashattention/{{ID}}
# Attack: mark every check as an expected failure from inside the user's function.
import pytest


def _attack(*args, **kwargs):
    pytest.xfail("expected")


for _name in {{FUNCTIONS}}:
    globals()[_name] = _attack
