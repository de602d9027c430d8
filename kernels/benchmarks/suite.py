"""Every GPU test and benchmark of the project, in one run: `python kernels/benchmarks/suite.py`.

The suite is a list of named steps (STEPS below). Each step is a function that takes the
shared Context, prints as it goes, appends a markdown section to the report and returns a
StepResult; a step that fails or raises is reported and the next one still runs.

Output under $OUT (default ./gpu-out), kept to a few files because the device tool brings
back at most eight:
    report.md     every step's markdown section, in order (tables ready for BENCHMARKS.md)
    results.json  every step's status, seconds and data
    pytest.log    the full output of `pytest -m gpu tests`
    triton_files.log  the Triton variants and attack files graded compiled (triton_files)
    flex_warm.log FlexAttention compiled ahead in a background process (flash_bench)
    features.json the flash_features step's rows (GQA, layouts, fp32, pinned variants)
    peers.json    the peers step's counts and every case's outcome
    (steps may add one file of their own, e.g. sweep.json)

Usage:
    python kernels/benchmarks/suite.py                       # default steps
    python kernels/benchmarks/suite.py --steps env,tests     # only these, in this order
    python kernels/benchmarks/suite.py --skip flash_bench --no-flex --quick
    python kernels/benchmarks/suite.py --steps env,tests,flash_features,flash_bench \
        --tests tests/test_kernel_flash.py --no-flex --impls ours,cudnn,flash   # the kernel alone

To add a step: write `def step_name(ctx) -> StepResult`, then add ("name", step_name,
default_on) to STEPS. Keep heavy imports (torch, triton) inside the step.

The peers step runs other projects' attention tests on our kernels from the git-ignored .peers/
(kernels/NOTES.md, "Peers' test suites"); it skips when that folder is absent.

Packages a device's image may lack (platformdirs, snowballstemmer and fsrs, which some tests
import) travel as wheels in ./.whl (git-ignored; `pip download --no-deps --only-binary=:all:
--python-version 3.12 -d .whl NAME`): the install below takes them before the project.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import os
import subprocess
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parents[2]  # the repository root


@dataclass
class StepResult:
    status: str  # "pass" | "fail" | "skip"
    summary: str  # one line for the final table
    markdown: str = ""  # section body for report.md
    data: dict = field(default_factory=dict)  # anything JSON-serialisable


@dataclass
class Context:
    out: Path
    args: argparse.Namespace
    results: dict = field(default_factory=dict)  # step name -> StepResult, as they finish
    background: dict = field(default_factory=dict)  # name -> subprocess.Popen started by the driver

    def log(self, line: str) -> None:
        print(line, flush=True)


# --------------------------------------------------------------------------- steps


def step_env(ctx: Context) -> StepResult:
    """GPU, driver and library versions: the header every table in BENCHMARKS.md needs."""
    import torch
    import triton

    info = {
        "date_utc": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M"),
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "triton": triton.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version(),
    }
    if torch.cuda.is_available():
        p = torch.cuda.get_device_properties(0)
        info.update(gpu=p.name, sms=p.multi_processor_count, memory_gib=round(p.total_memory / 2**30, 1),
                    capability=f"{p.major}.{p.minor}", gpus=torch.cuda.device_count())
    try:
        smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,clocks.sm,clocks.max.sm",
                              "--format=csv,noheader"], capture_output=True, text=True, timeout=20)
        info["nvidia_smi"] = smi.stdout.strip()
    except Exception as exc:  # no nvidia-smi
        info["nvidia_smi"] = f"unavailable ({type(exc).__name__})"
    for k, v in info.items():
        ctx.log(f"env {k}: {v}")
    md = "\n".join(f"- {k}: {v}" for k, v in info.items())
    ok = "gpu" in info
    return StepResult("pass" if ok else "fail", f"{info.get('gpu', 'no GPU')}, torch {info['torch']}, "
                      f"Triton {info['triton']}", md, info)


def step_tests(ctx: Context) -> StepResult:
    """`pytest -m gpu tests`: every GPU test of the project (xdist spreads the compiles)."""
    return _pytest(ctx, ["-m", "gpu", *ctx.args.tests.split(",")], "pytest.log")


def step_triton_files(ctx: Context) -> StepResult:
    """The Triton exercises' must-pass variants and attack files graded compiled on this GPU (on a
    CPU they run under the interpreter, which accepts kernels the compiler refuses). Three workers
    at most: each grading times its kernel against the reference, and the slowest honest variant
    (atomic dQ) stands 1.4x above 11's speed bar when graded alone."""
    return _pytest(ctx, ["tests/test_variants.py", "tests/test_redteam.py", "-k", "triton"], "triton_files.log",
                   workers=min(3, ctx.args.test_workers))


def _pytest(ctx: Context, selection: list[str], log_name: str, workers: int | None = None) -> StepResult:
    cmd = [sys.executable, "-m", "pytest", *selection, "-q", "-rfE", "--no-header", "-p", "no:randomly",
           "--continue-on-collection-errors"]
    try:
        import xdist  # noqa: F401

        cmd += ["-n", str(workers or ctx.args.test_workers)]
    except ImportError:
        pass
    ctx.log("pytest: " + " ".join(cmd))
    log_path = ctx.out / log_name
    t0 = time.time()
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                env={**os.environ, "PYTHONUNBUFFERED": "1"})
        lines = []
        for line in proc.stdout:
            log.write(line)
            lines.append(line.rstrip())
            if line.startswith(("FAILED", "ERROR", "=")) or "passed" in line or "failed" in line:
                ctx.log("  " + line.rstrip())
        rc = proc.wait()
    tail = [ln for ln in lines if ln.startswith(("FAILED", "ERROR"))] + lines[-1:]
    md = f"`{' '.join(cmd[2:])}` exit {rc} in {time.time() - t0:.0f} s\n\n```\n" + "\n".join(tail[-40:]) + "\n```"
    # pytest exit 5 = no tests collected: not a failure of the suite
    return StepResult("pass" if rc in (0, 5) else "fail", lines[-1] if lines else f"exit {rc}", md, {"rc": rc})


def step_sweep(ctx: Context) -> StepResult:
    """Time every launch config of the flash kernels (tuning only; off by default)."""
    from drill.kernels.benchmarks import training as sweep

    kinds = tuple(ctx.args.sweep_kinds.split(","))
    seqs = tuple(int(x) for x in ctx.args.sweep_seqs.split(","))
    res = sweep.sweep_configs(kinds=kinds, seqs=seqs, workers=ctx.args.compile_workers, log=ctx.log)
    (ctx.out / "sweep.json").write_text(json.dumps(res, indent=1))
    lines = ["| kernel | D | S | causal | best configs (ms) |", "|---|---|---|---|---|"]
    for r in res:
        top = ", ".join(f"{sweep.cfg_str(t['cfg'])} {t['ms']:.3f}" for t in r["ranked"][:4])
        lines.append(f"| {r['kind']} | {r['d']} | {r['s']} | {r['causal']} | {top} |")
    return StepResult("pass", f"{len(res)} cases swept", "\n".join(lines), {})


def step_flash_bench(ctx: Context) -> StepResult:
    """The reference kernel against SDPA (cuDNN, FLASH, EFFICIENT) and FlexAttention."""
    import torch
    import triton

    from drill.kernels import dispatch
    from drill.kernels.benchmarks import training as bench

    warm = ctx.background.pop("flex_warm", None)
    if warm is not None:  # let FlexAttention's compiles (started with the tests) finish first
        try:
            warm.wait(timeout=ctx.args.flex_warm_timeout)
        except subprocess.TimeoutExpired:
            warm.kill()
            ctx.log("flex warm-up still compiling: stopped; the timing process compiles what is left")
        log_file = ctx.out / "flex_warm.log"
        if log_file.exists():
            ctx.log("flex warm-up: " + " | ".join(log_file.read_text().strip().splitlines()[-3:]))
    impls = [n for n in bench.IMPLS if not (ctx.args.no_flex and n == "flex")]
    if ctx.args.impls:
        impls = [n for n in impls if n in ctx.args.impls.split(",")]
    kw = dict(ds=(128,), seqs=(4096, 16384)) if ctx.args.quick else {}
    if ctx.args.table_ds:
        kw["ds"] = tuple(int(x) for x in ctx.args.table_ds.split(","))
    if ctx.args.table_seqs:
        kw["seqs"] = tuple(int(x) for x in ctx.args.table_seqs.split(","))
    if ctx.args.compile_workers > 1 and not os.environ.get("DRILL_SUITE_PRECOMPILED"):
        bench.precompile_candidates(ds=kw.get("ds", (64, 128)), workers=ctx.args.compile_workers, log=ctx.log)
    rows = bench.bench_table(impls=impls, log=ctx.log, **kw)
    table = bench.to_markdown(rows)
    ctx.log(table)
    head = (f"{torch.cuda.get_device_name()}, torch {torch.__version__}, Triton {triton.__version__}, "
            f"bf16, B·S = 16384 tokens, H·D = 2048 (H = {bench.HEADS[64]} at D = 64, {bench.HEADS[128]} at D = 128); "
            f"TFLOP/s from do_bench medians.")
    chosen = dispatch.tuned_configs()
    cfg_md = "\n".join(f"- {k}: {v}" for k, v in sorted(chosen.items()))
    times_md = "\n".join(f"- {k}: " + ", ".join(f"{n} {ms:.3f}" if ms < float("inf") else f"{n} rejected"
                                                 for n, ms in sorted(v.items(), key=lambda x: x[1]))
                         for k, v in sorted(dispatch.PLAN_TIMES.items()))
    md = (f"{head}\n\n{table}\n\nConfigs the tuner chose (kernel D causal dtype dot-precision tile-mode host-descriptors "
          f"H/Hkv Sq-bucket Sk-bucket):\n\n{cfg_md}\n\nThe plans' timings, ms (best median of two rounds; gluon #i: "
          f"gluon_fwd.CANDIDATES[D][i]; rejected: did not compile or its output differed):\n\n{times_md}")
    ratios = [(r, r.get("ours/cudnn")) for r in rows if r.get("ours/cudnn")]
    worst = min(ratios, key=lambda x: x[1]) if ratios else None
    summary = f"{len(rows)} rows" + (f"; lowest ours/cuDNN {worst[1]:.2f} (D={worst[0]['d']} S={worst[0]['s']} "
                                     f"{worst[0]['pass']})" if worst else "")
    return StepResult("pass", summary, md, {"rows": rows, "configs": chosen, "plan_times": dict(dispatch.PLAN_TIMES)})


def step_flash_features(ctx: Context) -> StepResult:
    """The feature tables: GQA against SDPA enable_gqa, the [B, S, H, D] layout, fp32 accuracy,
    the backward's plans and kernels, the Gluon forward's configs, and host cost at S = 1k, against
    cuDNN in one run. --features picks tables by function name."""
    from drill.kernels.benchmarks import training as bench

    if ctx.args.compile_workers > 1:  # the tuner's candidates, in parallel
        bench.precompile_candidates(workers=ctx.args.compile_workers, log=ctx.log)
        os.environ["DRILL_SUITE_PRECOMPILED"] = "1"
    parts, data, failed = [], {}, []
    saved = os.environ.get("DRILL_FLASH_TUNE")
    for title, fn, env in (("GQA against SDPA enable_gqa", bench.bench_gqa, None),
                           ("[B, S, H, D] layout against [B, H, S, D]", bench.bench_layouts, None),
                           ("fp32 accuracy (DRILL_FLASH_TUNE=0: first candidate config)", bench.fp32_accuracy, "0"),
                           ("Backward variants pinned side by side", bench.bench_bwd_variants, None),
                           ("Backward: GPU time per kernel", bench.bench_bwd_kernels, None),
                           ("Gluon forward (warp-specialised, async wgmma) against Triton and cuDNN",
                            bench.bench_gluon, None),
                           ("S = 1k: host cost per call, eager and CUDA-graph time", bench.bench_short, None),
                           ("S = 1k causal backward: host and GPU time per call", bench.bench_short_backward, None)):
        if ctx.args.features and fn.__name__ not in ctx.args.features.split(","):
            continue
        ctx.log(f"-- {title}")
        if env is not None:
            os.environ["DRILL_FLASH_TUNE"] = env
        try:
            rows, md = fn(log=ctx.log)
            data[fn.__name__] = rows
            parts.append(f"### {title}\n\n{md}")
        except Exception:
            tb = traceback.format_exc()
            ctx.log(tb)
            failed.append(fn.__name__)
            parts.append(f"### {title}\n\nfailed:\n\n```\n{tb[-2000:]}\n```")
        finally:
            if saved is None:
                os.environ.pop("DRILL_FLASH_TUNE", None)
            else:
                os.environ["DRILL_FLASH_TUNE"] = saved
    (ctx.out / "features.json").write_text(json.dumps(data, indent=1, default=str))
    return StepResult("fail" if failed else "pass", f"{len(parts)} tables" + (f"; failed: {failed}" if failed else ""),
                      "\n\n".join(parts), {})


def step_sandbox_cuda(ctx: Context) -> StepResult:
    """CUDA inside the grader's sandbox: the subject's layers one at a time (drill/grader/sandbox_cuda.py,
    run as a process of its own: nothing under kernels/ imports the grader)."""
    proc = subprocess.run([sys.executable, "-m", "drill.grader.sandbox_cuda"], cwd=ROOT,
                          capture_output=True, text=True, timeout=900)
    text = (proc.stdout + proc.stderr).strip()
    ctx.log(text)
    status = "pass" if proc.returncode == 0 else "fail"
    return StepResult(status, "CUDA starts in the full sandbox" if status == "pass"
                      else "CUDA fails in the full sandbox (see which layer)", f"```\n{text[-3000:]}\n```")


def step_triton_exercise(ctx: Context) -> StepResult:
    """The Triton exercise's solution graded on this GPU by the real grader (`drill check --json`):
    fp16/bf16 accuracy and the TFLOP/s table (yours, reference kernel, SDPA) from the check notes."""
    return _grade_solution(ctx, "07_triton_forward.py", "triton_exercise.json")


def step_triton_decode(ctx: Context) -> StepResult:
    """The Triton decode exercise's solution graded on this GPU: fp16/bf16 accuracy and the GB/s
    table (yours against drill.kernels.flash_decode) from the check notes."""
    return _grade_solution(ctx, "10_triton_decode.py", "triton_decode.json")


def step_triton_backward(ctx: Context) -> StepResult:
    """The Triton backward exercise's solution graded on this GPU: fp16/bf16 accuracy beside the
    reference backward and the backward TFLOP/s table (yours, reference, SDPA) from the check notes."""
    return _grade_solution(ctx, "11_triton_backward.py", "triton_backward.json")


def _grade_solution(ctx: Context, file: str, json_name: str) -> StepResult:
    import tempfile

    solution = ROOT / "solutions" / "flashattention" / file
    # 900 s: a bare machine compiles a few dozen kernels the first time (the catalog's limit assumes warm caches)
    cmd = [sys.executable, "-m", "drill", "check", str(solution), "--json", "--timeout", "900"]
    ctx.log("triton_exercise: " + " ".join(cmd[1:]))
    with tempfile.TemporaryDirectory(prefix="drill-home-") as home:
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=1000,
                              env={**os.environ, "DRILL_HOME": home})
    try:
        doc = json.loads(proc.stdout)
    except json.JSONDecodeError:
        tail = (proc.stdout + proc.stderr)[-3000:]
        return StepResult("fail", f"drill check exited {proc.returncode} without JSON", f"```\n{tail}\n```")
    (ctx.out / json_name).write_text(json.dumps(doc, indent=1))
    checks = doc.get("checks", [])
    lines = [f"`drill check solutions/flashattention/{file}`: **{doc.get('status')}**, "
             f"{doc.get('message', '')} in {doc.get('seconds', 0):.0f} s", "",
             "| check | status | s | message |", "|---|---|---|---|"]
    for c in checks:
        first = (c.get("message") or "").splitlines()[:1]
        lines.append(f"| {c['name']} | {c['status']} | {c.get('seconds', 0):.1f} | {first[0] if first else ''} |")
    lines.append("")
    header_done = False
    for note in doc.get("notes", []):  # accuracy lines, then the speed caption and its table rows
        if " | " in note:
            lines.append(f"| {note} |")
            if not header_done:
                lines.append("|" + "---|" * (note.count(" | ") + 1))
                header_done = True
        else:
            lines += ["", note, ""] if note.startswith("speed") else [f"- {note}"]
    for line in doc.get("notes", []):
        ctx.log("  " + line)
    ratios = [cell for n in doc.get("notes", []) if " | " in n
              for cell in [n.split(" | ")[-2]] if cell.replace(".", "", 1).isdigit()]  # yours/reference
    summary = f"{doc.get('status')}: {doc.get('message', '')}" + (
        f"; yours/reference {', '.join(ratios)}" if ratios else "")
    import shutil

    skipped = [c["name"] for c in checks if c["status"] == "skip"]
    ok = doc.get("status") == "pass" and not (skipped and shutil.which("nvidia-smi"))  # a GPU skips nothing
    return StepResult("pass" if ok else "fail", summary, "\n".join(lines),
                      {"status": doc.get("status"), "notes": doc.get("notes", []),
                       "checks": [{k: c.get(k) for k in ("name", "status", "seconds", "message")} for c in checks]})


def step_ring_bench(ctx: Context) -> StepResult:
    """Ring attention on every visible GPU (NCCL): correctness against one GPU, then timing (benchmarks/ring.py)."""
    from drill.kernels.benchmarks import ring as ring_bench

    res = ring_bench.run(quick=ctx.args.quick, log=ctx.log)
    return StepResult(res["status"], res["summary"], res["markdown"], res["data"])


def step_decode_bench(ctx: Context) -> StepResult:
    """The reference decode kernel against SDPA (cuDNN, FLASH) and FlexAttention, in TB/s of K/V
    read (benchmarks/decode.py); the table BENCHMARKS.md records."""
    from drill.kernels.benchmarks import decode as decode_bench

    res = decode_bench.run(quick=ctx.args.quick, no_flex=ctx.args.no_flex, log=ctx.log)
    return StepResult(res["status"], res["summary"], res["markdown"], res["data"])


def step_fp8_bench(ctx: Context) -> StepResult:
    """The FP8 forward against cuDNN bf16: every kernel's speed, the share of the FP8 peak, the error
    with and without incoherent processing, and FA3's outlier error test (benchmarks/fp8.py)."""
    from drill.kernels.benchmarks import fp8

    rows, md = fp8.bench_fp8(log=ctx.log)
    accuracy, accuracy_md = fp8.fp8_accuracy(log=ctx.log)
    worst = min((r["tflops"][r["plan"]] / r["tflops"]["cudnn"] for r in rows if "cudnn" in r["tflops"]),
                default=None)
    return StepResult("pass", f"{len(rows)} rows" + (f"; lowest plan/cuDNN bf16 {worst:.2f}" if worst else ""),
                      md + "\n\n" + accuracy_md, {"rows": rows, "accuracy": accuracy})


def step_peers(ctx: Context) -> StepResult:
    """Other projects' attention test suites run against our kernels (.peers/run.py): per suite the
    cases their grid generates, those skipped for a feature we lack (with the reason), the sampled
    cases run, passed and failed. .peers/ is git-ignored and filled by hand (kernels/NOTES.md, Peers'
    test suites); without it the step skips."""
    runner = ROOT / ".peers" / "run.py"
    if not runner.exists():
        return StepResult("skip", ".peers/ absent (kernels/NOTES.md says how to populate it)", "")
    import tempfile

    with tempfile.TemporaryDirectory(prefix="peers-out-") as tmp:
        cmd = [sys.executable, str(runner), "--out", tmp]
        ctx.log("peers: " + " ".join(cmd))
        try:
            proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=ctx.args.peers_timeout,
                                  env={**os.environ, "PYTHONUNBUFFERED": "1"})
        except subprocess.TimeoutExpired:
            return StepResult("fail", f"runner killed after {ctx.args.peers_timeout:.0f} s", "")
        for line in proc.stdout.splitlines():
            if line.startswith("   ") or "FAIL" in line:
                ctx.log(line)
        md_path, json_path = Path(tmp) / "peers.md", Path(tmp) / "peers.json"
        if not md_path.exists():
            tail = (proc.stdout + proc.stderr)[-3000:]
            return StepResult("fail", f"runner exit {proc.returncode}, no report", f"```\n{tail}\n```")
        md = md_path.read_text()
        data = json.loads(json_path.read_text())
    # one file back (the device returns few): the counts and every case's outcome
    (ctx.out / "peers.json").write_text(json.dumps(data, indent=1, default=str))
    suites = data.get("suites", [])
    failed = sum(s["summary"]["failed"] + s["summary"]["errors"] for s in suites)
    broken = [s["suite"] for s in suites if s.get("broken")]
    summary = "; ".join(f"{s['suite']} {s['summary']['passed']}/{s['summary']['run']}" for s in suites)
    summary += f"; {failed} failed" + (f"; not collected: {', '.join(broken)}" if broken else "")
    counts = {s["suite"]: s["summary"] for s in suites}
    return StepResult("fail" if failed or broken else "pass", summary, md, {"counts": counts})


def step_model_features(ctx: Context) -> StepResult:
    """flash_decode's scale and lse, the padded head dims (96, 192, 192/128), sliding windows and a
    packed (varlen) batch, beside SDPA (and FlexAttention for the windows)."""
    from drill.kernels.benchmarks import models

    parts = [models.bench_decode(log=ctx.log)[1], models.bench_head_dims(log=ctx.log)[1],
             models.bench_window(log=ctx.log, flex=not ctx.args.no_flex)[1], models.bench_varlen(log=ctx.log)[1]]
    return StepResult("pass", f"{len(parts)} tables", "\n\n".join(parts), {})


# The steps in their default order (name, function, on by default). A new step goes here.
STEPS: list[tuple[str, Callable[[Context], StepResult], bool]] = [
    ("env", step_env, True),
    ("sandbox_cuda", step_sandbox_cuda, True),
    ("tests", step_tests, True),
    ("triton_files", step_triton_files, True),
    ("sweep", step_sweep, False),
    ("flash_features", step_flash_features, True),
    ("flash_bench", step_flash_bench, True),
    ("decode_bench", step_decode_bench, True),
    ("model_features", step_model_features, True),
    ("fp8_bench", step_fp8_bench, True),
    ("triton_exercise", step_triton_exercise, True),
    ("triton_decode", step_triton_decode, True),
    ("triton_backward", step_triton_backward, True),
    ("ring_bench", step_ring_bench, True),
    ("peers", step_peers, True),
]


# --------------------------------------------------------------------------- driver


def _ensure_installed() -> None:
    """drill.kernels exists only once the project is installed (package-dir mapping). A bare
    device machine has not installed it: do it offline, editable, then start this script again."""
    probe = subprocess.run([sys.executable, "-c", "import drill.kernels.benchmarks.training"], cwd=ROOT,
                           capture_output=True)
    if probe.returncode == 0:
        return
    if os.environ.get("DRILL_SUITE_INSTALLED"):
        sys.exit("drill.kernels is still not importable after installing the project:\n" + probe.stderr.decode())
    wheels = sorted(str(w) for w in (ROOT / ".whl").glob("*.whl"))
    if wheels:  # what the image lacks (module docstring)
        print(f"installing {len(wheels)} carried wheels from .whl", flush=True)
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index", *wheels], check=True)
    print("installing the project (pip install --no-deps --no-build-isolation -e .)", flush=True)
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                    "--no-index", "-e", str(ROOT)], check=True)
    os.environ["DRILL_SUITE_INSTALLED"] = "1"
    os.execv(sys.executable, [sys.executable, *sys.argv])


def run(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Run every GPU test and benchmark; write $OUT/report.md")
    names = [n for n, _, _ in STEPS]
    ap.add_argument("--steps", help=f"comma-separated, in order (all: {','.join(names)})")
    ap.add_argument("--skip", default="", help="comma-separated steps to leave out")
    ap.add_argument("--quick", action="store_true", help="smaller benchmark (D=128, S=4k and 16k)")
    ap.add_argument("--table-ds", help="comma-separated head dims for flash_bench's table (default 64,128)")
    ap.add_argument("--table-seqs", help="comma-separated sequence lengths for flash_bench's table")
    ap.add_argument("--no-flex", action="store_true", help="leave FlexAttention out (its compiles are slow)")
    ap.add_argument("--test-workers", type=int, default=8)
    ap.add_argument("--tests", default="tests", help="comma-separated test paths for the tests step")
    ap.add_argument("--impls", help="comma-separated implementations for flash_bench (default: all)")
    ap.add_argument("--features", help="comma-separated tables for flash_features (bench_gqa, bench_layouts, "
                    "fp32_accuracy, bench_bwd_variants, bench_bwd_kernels, bench_gluon, bench_short, "
                    "bench_short_backward; default: all)")
    ap.add_argument("--flex-warm-timeout", type=float, default=420, help="seconds to wait for Flex compiles")
    ap.add_argument("--compile-workers", type=int, default=12, help="processes that compile kernels ahead")
    ap.add_argument("--sweep-kinds", default="fwd,bwd_kv,bwd_q", help="kernels the sweep step times")
    ap.add_argument("--peers-timeout", type=float, default=540, help="seconds the peers step may take")
    ap.add_argument("--sweep-seqs", default="16384", help="sequence lengths the sweep step times")
    args = ap.parse_args(argv)

    out = Path(os.environ.get("OUT") or "gpu-out")
    out.mkdir(parents=True, exist_ok=True)
    _ensure_installed()
    ctx = Context(out=out, args=args)
    chosen = args.steps.split(",") if args.steps else [n for n, _, on in STEPS if on]
    skip = set(filter(None, args.skip.split(",")))
    table = {n: fn for n, fn, _ in STEPS}
    if "flash_bench" in chosen and "flash_bench" not in skip and not args.no_flex:
        # FlexAttention's torch.compile takes minutes: build it in the background meanwhile
        cmd = [sys.executable, "-m", "drill.kernels.benchmarks.training", "--warm-flex"] + (["--quick"] if args.quick else [])
        ctx.background["flex_warm"] = subprocess.Popen(
            cmd, cwd=ROOT, stdout=open(out / "flex_warm.log", "w"), stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONUNBUFFERED": "1"})
    report = ["# GPU suite report", ""]
    record = {}
    for name in chosen:
        if name in skip:
            continue
        if name not in table:
            ctx.log(f"== {name}: unknown step (known: {', '.join(names)})")
            continue
        ctx.log(f"== {name}")
        t0 = time.time()
        try:
            res = table[name](ctx)
        except Exception as exc:
            tb = traceback.format_exc()
            ctx.log(tb)
            res = StepResult("fail", f"{type(exc).__name__}: {exc}"[:200], f"```\n{tb[-3000:]}\n```")
        secs = time.time() - t0
        ctx.results[name] = res
        ctx.log(f"== {name}: {res.status} in {secs:.0f}s: {res.summary}")
        report += [f"## {name} ({res.status}, {secs:.0f} s)", "", res.markdown, ""]
        record[name] = {"status": res.status, "seconds": round(secs, 1), "summary": res.summary, "data": res.data}
        # rewrite both files after every step: a run cut short still leaves what it did
        (out / "report.md").write_text("\n".join(report))
        (out / "results.json").write_text(json.dumps(record, indent=1, default=str))
    ctx.log("\n== summary")
    for name, r in record.items():
        ctx.log(f"{r['status']:>5}  {name:<14} {r['seconds']:>6.0f}s  {r['summary']}")
    return 0 if all(r["status"] != "fail" for r in record.values()) else 1


if __name__ == "__main__":
    sys.exit(run())
