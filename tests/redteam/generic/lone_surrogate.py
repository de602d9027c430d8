# drill: flashattention/{{ID}}
# Attack on the report: a lone surrogate ("\ud800") in an exception message. JSON carries it from
# the subject to the report, but no encoding can write it: `drill check` ended in a
# UnicodeEncodeError traceback while printing the report, instead of giving a verdict.


def _attack(*args, **kwargs):
    raise ValueError("checks passed \ud800\udfff")


for _name in {{FUNCTIONS}}:
    globals()[_name] = _attack
