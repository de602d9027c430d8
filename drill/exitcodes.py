"""Exit codes shared by every command."""

OK = 0  # everything passed / the command did what was asked
FAILED = 1  # the user's code ran and some check failed
CANNOT = 2  # nothing could be graded or done: bad input, unknown name, time-out, no GPU
