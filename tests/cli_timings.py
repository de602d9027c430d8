"""Time the CLI as a user meets it on this machine; prints a markdown table for BENCHMARKS.md.

usage: python tests/cli_timings.py [--repeat N]   (not a test: figures belong in BENCHMARKS.md)
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DRILL = [sys.executable, "-m", "drill"]


def timed(args: list[str], cwd: Path, env: dict, repeat: int) -> tuple[float, float, int]:
    times, code = [], 0
    for _ in range(repeat):
        started = time.perf_counter()
        code = subprocess.run(DRILL + args, cwd=cwd, env=env, capture_output=True).returncode
        times.append(time.perf_counter() - started)
    return statistics.median(times), min(times), code


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=5)
    repeat = parser.parse_args().repeat
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "DRILL_HOME": f"{tmp}/home"}
        ws = Path(tmp) / "ws"
        subprocess.run(DRILL + ["start", "flashattention", "--dir", str(ws)], env=env, capture_output=True, check=True)
        rows = [("drill --help", ["--help"]), ("drill status", ["status"]),
                ("drill show online-softmax 1 3 2 5", ["show", "online-softmax", "1", "3", "2", "5"])]
        results = [(label, *timed(args, ws, env, repeat)) for label, args in rows]
        for stub in sorted(ws.glob("[0-9][0-9]_*.py")):
            results.append((f"drill check {stub.name} (stub)", *timed(["check", stub.name], ws, env, repeat)))
            shutil.copy(ROOT / "solutions" / "flashattention" / stub.name, stub)
            results.append((f"drill check {stub.name} (solution)", *timed(["check", stub.name], ws, env, repeat)))
    print("| command | median (s) | best (s) | exit |\n|---|---|---|---|")
    for label, median, best, code in results:
        print(f"| `{label}` | {median:.2f} | {best:.2f} | {code} |")


if __name__ == "__main__":
    main()
