"""Which layer of the grader's sandbox, if any, keeps CUDA from starting in the subject.

Run by kernels/benchmarks/suite.py (step `sandbox_cuda`, as `python -m drill.grader.sandbox_cuda`)
on a GPU machine. Each variant starts a small script the way drill.grader.sandbox.Contained
starts the subject, with one layer changed, and asks it to initialise CUDA and run one kernel. `full` is what grading uses for a
CUDA subject (its own /proc entry writable); `no_own_proc` is that sandbox without the entry,
where the NVIDIA driver fails (BENCHMARKS.md, "Trusted grading on the H200"), and every other
variant changes one layer of `no_own_proc`, to show which layer mattered.
"""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

from drill.grader import sandbox

PROBE = "import torch; x = torch.ones(4, device='cuda'); print('cuda ok', int((x * 2).sum().item()))\n"
VARIANTS = ("full", "no_own_proc", "no_landlock", "landlock_fs_only", "no_capability_drop", "no_memory_group",
            "no_file_size_cap", "reads_run", "reads_var", "reads_tmp", "reads_dev", "wide_reads",
            "write_proc", "write_sys", "write_dev", "write_reads")
EXTRA_WRITES = {"write_proc": ["/proc"], "write_sys": ["/sys"], "write_dev": ["/dev"]}
EXTRA_READS = {"reads_run": ["/run"], "reads_var": ["/var"], "reads_tmp": ["/tmp"], "reads_dev": ["/dev"],
               "wide_reads": ["/run", "/var", "/tmp", "/dev"]}


def _preexec(variant: str, paths, group, output_limit: int = 64 * 1024 * 1024):
    def apply() -> None:
        os.setsid()
        if group is not None and variant != "no_memory_group":
            group.join()
        sandbox._libc().prctl(sandbox._PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        if variant != "no_file_size_cap":
            resource.setrlimit(resource.RLIMIT_FSIZE, (output_limit, output_limit))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        if paths is not None and variant != "no_landlock":
            sandbox._apply_landlock(paths, scoped=variant != "landlock_fs_only", own_proc=variant == "full")
        if variant != "no_capability_drop":
            sandbox._drop_capabilities()

    return apply


def run_variant(variant: str) -> tuple[bool, str]:
    with tempfile.TemporaryDirectory(prefix="drill-cuda-probe-") as tmp:
        scratch = Path(tmp)
        (scratch / "probe.py").write_text(PROBE)
        policy = sandbox.Policy(scratch, [])
        paths = sandbox.policy_paths(policy) if sandbox.landlock_abi() >= 1 else None
        if paths is not None and variant in EXTRA_READS:
            paths = (paths[0] + EXTRA_READS[variant], *paths[1:])
        if paths is not None and variant in EXTRA_WRITES:
            paths = (paths[0], paths[1] + EXTRA_WRITES[variant], *paths[2:])
        if paths is not None and variant == "write_reads":
            paths = (paths[0], paths[1] + paths[0], *paths[2:])
        group = sandbox.MemoryGroup.create(f"drill-probe-{os.getpid()}-{variant}", 16 * 2**30)
        try:
            proc = subprocess.run([sys.executable, "-s", "-B", "probe.py"], cwd=tmp, capture_output=True, text=True,
                                  env=sandbox.contained_env(scratch, {}), timeout=120,
                                  preexec_fn=_preexec(variant, paths, group))
        finally:
            if group is not None:
                group.remove()
    text = (proc.stdout + proc.stderr).strip().splitlines()
    return proc.returncode == 0 and "cuda ok" in proc.stdout, (text[-1] if text else "")[:300]


def main() -> int:
    print(f"landlock ABI {sandbox.landlock_abi()}, uid {os.getuid()}")
    ok_full = False
    for variant in VARIANTS:
        ok, last = run_variant(variant)
        ok_full = ok_full or (variant == "full" and ok)
        print(f"{variant:22s} {'ok  ' if ok else 'FAIL'} {last}", flush=True)
    return 0 if ok_full else 1


if __name__ == "__main__":
    sys.exit(main())
