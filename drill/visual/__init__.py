"""Terminal pictures of the algorithms, for `drill show`.

Each module pairs pure functions that compute the numbers (tested directly)
with rich renderables that draw them, and ends with the `drill show` command that
checks the options and prints them. A topic's catalog names these commands
([[view]] entries), and drill/commands/show.py builds the group from the catalogs.
Nothing here imports numpy, torch or matplotlib at module level.
"""

from __future__ import annotations

from drill.errors import cannot


def check_bytes(dtype_bytes: int) -> None:
    if not 1 <= dtype_bytes <= 16:
        cannot(f"--bytes must be the size of one element, 1 to 16 (got {dtype_bytes})")
