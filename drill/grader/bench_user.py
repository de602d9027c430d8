"""The user's flash_attention for `drill bench --kernel FILE`, timed through the grader's sandbox.

The user's file is never imported into drill's own processes. As with `drill check`, the
caller starts a trusted process (`main` below, `python -I -m drill.grader.bench_user`),
which starts a sandboxed subject (drill/grader/proxy.py) on a copy of the file and times
it the way exercise 07's speed check does (_triton_forward_support.time_seeded): the
median wall-clock round trip of calls whose q, k, v are drawn inside the subject from
seeds it cannot predict, each output checked here against PyTorch's SDPA on the same
inputs, less the median round trip of drill's do-nothing kernel in a clean subject (the
calibrated transfer). Forward only: the backward is not timed.

The file defines flash_attention(q, k, v, causal, sm_scale) and is called positionally,
q, k, v as [B, H, S, D] tensors on the device.

  time_user(file, table_kw)       the figures for `drill bench --kernel`: the table's forward sizes
  time_user_kernel(file, cases)   the caller's side: one result per case, by (d, s, causal)
  main()                          the trusted process: JSON job on stdin, JSON lines out
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import sys
import time
from pathlib import Path
from typing import Callable

MEMORY_MB = 16384  # the subject and everything it starts (as for exercise 07)
LOAD_TIMEOUT_S = 300.0  # importing the file (Triton decorates its kernels then)
WARMUP_TIMEOUT_S = 300.0  # the first call at each size compiles the kernel
CALL_TIMEOUT_S = 60.0  # each timed call
CALLS = 9  # timed calls per size, after one warm-up (as in exercise 07's speed check)
FUNCTION = "flash_attention"
METHOD = (f"round trip minus calibrated transfer: the median wall-clock round trip of {CALLS} calls into the "
          "sandboxed process running your file (each on inputs drawn there from a seed it cannot predict, each "
          "output checked against SDPA), minus the same for a kernel that computes nothing (the transfer); "
          "forward only")


class CannotTime(Exception):
    """Nothing could be timed: the file did not load, or the timing process failed."""


def case_key(case: dict) -> tuple:
    return (case["d"], case["s"], bool(case["causal"]))


# --------------------------------------------------------------------------- the caller's side


def time_user(path, table_kw: dict, log: Callable[[str], None] = print) -> dict:
    """The user's kernel timed in the sandbox at the forward sizes of the benchmark's table
    (drill.kernels.benchmarks.training.bench_table(**table_kw))."""
    from drill.kernels.benchmarks.training import bench_cases

    sizes = {k: table_kw[k] for k in ("ds", "seqs", "tokens", "causals") if k in table_kw}
    log("yours: timed first, forward only, in the grader's sandboxed process (round trip minus calibrated transfer)")
    return time_user_kernel(path, bench_cases(**sizes), dtype=table_kw.get("dtype", "bfloat16"), log=log)



def time_user_kernel(path, cases: list[dict], *, dtype: str = "bfloat16", device: str = "cuda",
                     calls: int = CALLS, log: Callable[[str], None] = print) -> dict[tuple, dict]:
    """Time the file's flash_attention at each case ({"d", "s", "b", "h", "causal"}) in a sandboxed subject.

    Returns {(d, s, causal): result}; a result holds ms (round trip - transfer), round_trip_ms,
    transfer_ms, within_noise, max_err (vs SDPA) and calls, or `error` (why this case has no
    figure). Raises CannotTime if the file does not load or the timing process fails.
    """
    from drill import userfile
    from drill.grader import runner

    path = Path(os.path.abspath(path))
    try:
        source = userfile.read_bytes(path)
    except userfile.UnreadableFile as exc:
        raise CannotTime(str(exc)) from None
    cuda = runner.nvidia_driver_present()
    nonce = secrets.token_hex(16)
    limit_s = LOAD_TIMEOUT_S + len(cases) * (WARMUP_TIMEOUT_S + 2 * CALL_TIMEOUT_S) + 60
    with runner.ScratchFolder(prefix="drill-bench-", ignore_cleanup_errors=True) as tmp:  # any depth (runner)
        copy = runner.place_copy(source, path.name, Path(tmp) / "submission")
        job = {"nonce": nonce, "user_file": str(copy), "scratch": tmp, "hidden": runner.hidden_paths(),
               "memory_mb": MEMORY_MB, "cap_address_space": not cuda, "cuda": cuda,
               "env": runner.triton_subject_env(), "cases": cases, "dtype": dtype, "device": device,
               "calls": calls}
        with open(Path(tmp) / "bench-stderr.txt", "w+b") as stderr:
            proc = runner.start_trusted("drill.grader.bench_user", job, cwd=Path(tmp), stderr=stderr)
            try:
                events, timed_out = runner.read_events(proc, limit_s, on_event=lambda e: _progress(e, log))
            finally:
                runner.stop_trusted(proc)
            stderr.seek(0)
            trouble = stderr.read()[-2000:].decode("utf-8", "replace").strip()
    return _results(events, nonce, timed_out, limit_s, trouble)


def _progress(event: dict, log: Callable[[str], None]) -> None:
    if event.get("event") != "case":
        return
    where = f"yours D={event.get('d')} S={event.get('s')} {'causal' if event.get('causal') else 'full'} fwd"
    if event.get("error"):
        log(f"{where}: {event['error']}")
    else:
        log(f"{where}: round trip {event['round_trip_ms']:.3g} ms, of which transfer {event['transfer_ms']:.3g} ms"
            + (" (within the transfer's noise)" if event.get("within_noise") else ""))


def _results(events: list[dict], nonce: str, timed_out: bool, limit_s: float, trouble: str) -> dict[tuple, dict]:
    from drill.grader.runner import clean

    load_error = next((e for e in events if e.get("event") == "load_error"), None)
    if load_error is not None:
        raise CannotTime(clean(load_error.get("message", "your file could not be loaded")))
    done = next((e for e in events if e.get("event") == "done"), None)
    if done is None or done.get("nonce") != nonce:
        why = f"did not finish within {limit_s:g} s" if timed_out else "ended early"
        last = trouble.splitlines()[-1] if trouble else ""
        raise CannotTime(f"the timing process {why}" + (f" ({clean(last)})" if last else ""))
    results = {}
    for e in events:
        if e.get("event") == "case":
            result = {k: v for k, v in e.items() if k != "event"}
            if result.get("error"):
                result["error"] = clean(result["error"])
            results[case_key(result)] = result
    return results


# --------------------------------------------------------------------------- the trusted process


def _reference(device: str):
    """SDPA on the inputs drawn here: what every output of the user's kernel is checked against."""
    import torch
    import torch.nn.functional as F

    def run(q, k, v, causal):
        with torch.no_grad():
            if device != "cuda":
                return F.scaled_dot_product_attention(q, k, v, is_causal=causal)
            from torch.nn.attention import SDPBackend, sdpa_kernel

            with sdpa_kernel([SDPBackend.CUDNN_ATTENTION, SDPBackend.FLASH_ATTENTION]):
                return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

    return run


def _user_error(exc) -> str:
    """One line for an error raised by the user's code (proxy.UserCodeError)."""
    info = exc.info
    line = f" (line {info['line']} of your file)" if info.get("line") else ""
    message = f": {info.get('message')}" if info.get("message") else ""
    return f"your kernel raised {info.get('type')}{message}{line}"


def time_cases(user, calibration, cases: list[dict], dtype: str, device: str, calls: int,
               emit: Callable[..., None]) -> None:
    """Time each case through `user` (a SubmissionProxy), less `calibration`; emit one `case` event each."""
    import torch

    from drill.exercises.flashattention.checks import _triton_forward_support as tf
    from drill.grader.expect import CheckFailure
    from drill.grader.proxy import TIMED_OUT, SubjectGone, UserCodeError

    torch_dtype = getattr(torch, dtype)
    reference = _reference(device)
    stopped = ""
    for case in cases:
        if stopped:
            emit(event="case", **case, error=f"not timed: {stopped}")
            continue
        shape = (case["b"], case["h"], case["s"], case["d"])
        call = tf.describe(torch.empty(shape, dtype=torch_dtype, device="meta"), case["causal"], None)
        call += " (inputs drawn in your process from a seed)"
        try:
            timing = tf.time_seeded(user, calibration, shape, torch_dtype, case["causal"], reference, call,
                                    calls=calls, positional=True, device=device,
                                    warmup_timeout=WARMUP_TIMEOUT_S, timeout=CALL_TIMEOUT_S)
        except CheckFailure as failure:
            seen = "".join(f"; {label}: {text}" for label, text in (("yours", failure.got), ("expected", failure.expected))
                           if text)
            emit(event="case", **case, error=f"wrong output: {failure.summary}{seen}")
        except UserCodeError as exc:
            emit(event="case", **case, error=_user_error(exc))
        except SubjectGone as gone:
            reason = gone.reason
            if gone.reason == TIMED_OUT:
                reason = f"a call did not answer within {WARMUP_TIMEOUT_S:g} s (first call) or {CALL_TIMEOUT_S:g} s"
                stopped = "an earlier size did not answer in time"
            emit(event="case", **case, error=reason)
        except Exception as exc:  # noqa: BLE001 - drill's side of a case (the calibration): say so, go on
            emit(event="case", **case, error=f"drill could not time this case: {type(exc).__name__}: {exc}"[:300])
        else:
            emit(event="case", **case, ms=timing.kernel, round_trip_ms=timing.round_trip,
                 transfer_ms=timing.transfer, within_noise=timing.within_noise, max_err=timing.max_error,
                 calls=calls)


def main() -> int:
    from drill.grader.worker import event_channel, load_error_message

    job = json.loads(sys.stdin.readline())
    emit = event_channel()

    from drill.grader import sandbox
    from drill.grader.proxy import TIMED_OUT, Subject, SubmissionProxy

    sandbox.become_subreaper()
    subject = Subject(Path(job["user_file"]), [FUNCTION], scratch_root=Path(job["scratch"]),
                      hidden=[Path(p) for p in job["hidden"]], memory_mb=job["memory_mb"],
                      cap_address_space=job["cap_address_space"], env=job["env"], cuda=bool(job["cuda"]))
    subjects = [subject]

    def close() -> None:
        for each in reversed(subjects):  # the first close ends every process; each removes its own cgroup
            each.close()

    def stop(signum, frame):
        close()
        os._exit(3)

    signal.signal(signal.SIGTERM, stop)
    emit(event="start", sandbox=sandbox.level())
    try:
        subject.start(wait=False)
        # torch, while the subject imports the user's file
        from drill.exercises.flashattention.checks import _triton_forward_support as tf

        subject.wait_loaded(deadline=time.time() + LOAD_TIMEOUT_S)
        if subject.load_error:
            raw = subject.load_error
            if raw == TIMED_OUT:
                raw = f"importing your file took more than {LOAD_TIMEOUT_S:g} s"
            emit(event="load_error", message=load_error_message(raw), output=subject.leading_output())
        else:
            user = SubmissionProxy(subject)
            calibration = tf.null_subject(user)
            subjects.append(calibration._subject)
            time_cases(user, calibration, job["cases"], job["dtype"], job["device"], int(job["calls"]), emit)
    finally:
        close()
    emit(event="done", nonce=job["nonce"])
    os._exit(0)  # skip interpreter teardown


if __name__ == "__main__":
    sys.exit(main())
