"""drill bench: time the reference Triton kernel (and yours) against PyTorch SDPA on a GPU.

Your kernel (--kernel FILE) is never imported here: like `drill check`, it runs only in the
grader's sandboxed subject process and is timed from outside (drill/grader/bench_user.py).
"""

from __future__ import annotations

import json
from pathlib import Path

import click

from drill import exitcodes
from drill.console import console
from drill.errors import cannot
from drill.install_hint import missing_package_advice
from drill.options import json_option


JSON_SCHEMA = 1


def error_document(reason: str, given: dict) -> dict:
    """--json when nothing was measured."""
    return {"schema": JSON_SCHEMA, "status": "error", "reason": reason, "rows": []}


def _gpu_or_reason() -> str:
    """'' when a CUDA GPU and Triton are usable, else why not (no NVIDIA driver: decided before importing torch)."""
    from importlib.util import find_spec

    from drill.grader.runner import nvidia_driver_present

    if not nvidia_driver_present():
        return "bench needs a CUDA GPU and none is visible here (no nvidia-smi); try it on a machine with one"
    try:
        import torch
    except ImportError:
        return f"bench needs PyTorch and a CUDA GPU; {missing_package_advice('torch')}"
    if not torch.cuda.is_available():
        return "bench needs a CUDA GPU and none is visible here; try it on a machine with one"
    if find_spec("triton") is None:
        return f"bench needs Triton; {missing_package_advice('triton')}"
    return ""


def _render(rows: list[dict], title: str) -> None:
    from rich.table import Table

    from drill.grader.bench_user import METHOD
    from drill.kernels.benchmarks.training import LABELS, table_columns, user_in_noise

    present, ratio_keys = table_columns(rows)
    table = Table(title=title, caption="TFLOP/s (forward 4·B·H·S²·D, half if causal; backward 2.5×); "
                                       "ratios are ours (Triton or, on Hopper, Gluon) or yours over the SDPA backend")
    for col in ["D", "S", "B×H", "mask", "pass"]:
        table.add_column(col, justify="right" if col in ("D", "S") else "left")
    for n in present:
        table.add_column(LABELS[n], justify="right", style="accent" if n in ("ours", "user") else None)
    for k in ratio_keys:
        table.add_column(k.replace("user", "yours"), justify="right")
    for r in rows:
        cells = [str(r["d"]), str(r["s"]), f"{r['b']}×{r['h']}", "causal" if r["causal"] else "none", r["pass"]]
        cells += [f"{r['tflops'][n]:.0f}" if n in r["tflops"] else
                  "[muted]in noise[/muted]" if n == "user" and user_in_noise(r) else "[muted]n/a[/muted]"
                  for n in present]
        cells += [f"{r[k]:.2f}" if k in r else "—" for k in ratio_keys]
        table.add_row(*cells)
    # Piped output has no width of its own (rich assumes 80): keep every column readable.
    width = console.width
    if not console.is_terminal:
        console.width = 160
    console.print(table)
    console.width = width
    _render_light(rows, present)
    errs = {(n, e) for r in rows for n, e in r["errors"].items()}
    for n, e in sorted(errs):
        console.print(f"[muted]{LABELS[n]} could not run some cases: {e}[/muted]", soft_wrap=True)
    if "user" in present:
        console.print(f"[muted]yours: {METHOD}. in noise: the transfer is over half the round trip, so your "
                      "kernel's time is within the transfer's noise and not shown (the round trips are in the "
                      "lines above and in --json).[/muted]", soft_wrap=True)


def _render_light(rows: list[dict], present: list[str]) -> None:
    """The forward rows against this GPU's ceilings (kernels/benchmarks/speed_of_light.py): each
    floor in ms, the ceiling that binds, and each kernel's share of that speed of light."""
    from rich.table import Table

    from drill.kernels.benchmarks.training import LABELS

    light_rows = [r for r in rows if "light" in r]
    if not light_rows:
        return
    names = [n for n in present if any(n in r["light"]["share"] for r in light_rows)]
    table = Table(title="Speed of light (forward): the least time each ceiling allows, measured on this GPU",
                  caption="matmul: bf16 torch.mm rate; exp: one exp2 per score at the measured rate; HBM: q, k, "
                          "v read and o written once at the copy bandwidth. Shares are of the binding floor.")
    for col in ["D", "S", "mask", "matmul ms", "exp ms", "HBM ms", "binds"]:
        table.add_column(col, justify="left" if col in ("mask", "binds") else "right")
    for n in names:
        table.add_column(LABELS[n], justify="right", style="accent" if n in ("ours", "user") else None)
    for r in light_rows:
        f, share = r["light"]["floors_ms"], r["light"]["share"]
        table.add_row(str(r["d"]), str(r["s"]), "causal" if r["causal"] else "none",
                      *(f"{f[k]:.3g}" for k in ("matmul", "exp", "HBM")), r["light"]["binding"],
                      *(f"{share[n]:.0%}" if n in share else "[muted]n/a[/muted]" for n in names))
    console.print(table)


@click.command(name="bench")
@click.option("--kernel", "kernel_file", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="A Python file defining flash_attention(q, k, v, causal, sm_scale) to time too (forward only, "
                   "in the grader's sandboxed process, never imported by drill itself).")
@json_option("Print the rows as JSON instead of a table.", error_document=error_document)
@click.option("--quick", is_flag=True, help="One shape (D=128, S=4k), no FlexAttention: under a minute.")
def command(kernel_file: Path | None, as_json: bool, quick: bool) -> None:
    """Time the reference FlashAttention kernel against PyTorch SDPA (cuDNN, FLASH, EFFICIENT)
    and FlexAttention on this GPU, forward and backward, causal and not.

    Exit code 0: the table was measured; 2: no GPU (or no PyTorch/Triton) here, or your
    file could not be loaded.
    """
    reason = _gpu_or_reason()
    if reason:
        cannot(reason)

    import torch

    from drill.grader import bench_user
    from drill.kernels.benchmarks import training as bench

    kw: dict = dict(ds=(128,), seqs=(4096,)) if quick else {}
    impls = [n for n in bench.IMPLS if not (quick and n == "flex")]
    log = (lambda line: None) if as_json else (lambda line: console.print(f"[muted]{line}[/muted]", soft_wrap=True))
    user = None
    if kernel_file is not None:
        try:
            user = bench_user.time_user(kernel_file, kw, log=log)
        except bench_user.CannotTime as exc:
            cannot(f"cannot time {kernel_file}: {exc}")
    rows = bench.bench_table(impls=impls, user=user, log=log, **kw)
    if as_json:
        doc = {"schema": JSON_SCHEMA, "status": "ok", "gpu": torch.cuda.get_device_name(),
               "torch": torch.__version__, "rows": rows}
        if user is not None:
            doc["user_method"] = bench_user.METHOD
        click.echo(json.dumps(doc, indent=1))
    else:
        import triton

        _render(rows, f"FlashAttention on {torch.cuda.get_device_name()} "
                      f"(torch {torch.__version__}, Triton {triton.__version__}, bf16)")
    raise SystemExit(exitcodes.OK)
