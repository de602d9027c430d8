"""Terminal pictures of the algorithms, for `drill show`.

Each module pairs pure functions that compute the numbers (tested directly)
with rich renderables that draw them. Nothing here imports numpy, torch or
matplotlib at module level.
"""
