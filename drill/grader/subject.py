"""The untrusted side of grading: import the user's file and call its functions on request.

Runs as a script from the scratch folder (copies of this file, protocol.py,
recording.py and usertrace.py sit beside the copy of the user's file), inside the sandbox drill.grader.sandbox set up.
It never imports pytest, the hidden checks or anything that decides a verdict: it only
answers calls. Whatever it says is treated as the user's own words by the trusted side.

usage: python subject.py USER_FILE FUNCTIONS REQUEST_FD RESPONSE_FD [cuda|cpu]
"""

from __future__ import annotations

import base64
import importlib.util
import os
import sys
import time
import traceback
import warnings

from usertrace import user_frames, user_line  # the copy beside this script


def main(argv: list[str]) -> None:
    user_file, functions, request_fd, response_fd = argv[:4]
    # The scratch folder is first on sys.path (the script's folder): the user's file can
    # import nothing of drill's from there, and a scratch random.py would shadow the
    # standard library for numpy, so keep it last.
    here = sys.path.pop(0)
    sys.path.append(here)
    if argv[4:] == ["cuda"]:  # after the line above: a user file named torch.py shadows nothing
        _start_cuda_then_close_sockets()

    import numpy as np

    import protocol

    requests = os.fdopen(int(request_fd), "rb", buffering=0)
    responses = os.fdopen(int(response_fd), "wb")
    protocol.send(responses, {"event": "hello"})
    header, _ = protocol.receive(requests, limit=0)
    if header.get("op") != "load":
        return

    module, problem = _load(user_file, [f for f in functions.split(",") if f])
    if problem:
        protocol.send(responses, {"event": "load_error", "message": problem})
        return
    protocol.send(responses, {"event": "loaded"})

    while True:
        try:
            header, payload = protocol.receive(requests, limit=1 << 40)
        except EOFError:
            return
        if header.get("op") != "call":
            return
        reply, value = _call(np, module, user_file, header, payload)
        protocol.send(responses, reply, value)


def _start_cuda_then_close_sockets() -> None:
    """CUDA opens sockets while it starts, so the sandbox could not refuse them before exec: start it
    here, before the user's file exists in this process, then refuse every new socket."""
    import seccomp  # the copy beside this script

    import torch

    torch.cuda.init()
    torch.ones(1, device="cuda").sum().item()  # the context and the allocator, made now
    if seccomp.available():
        seccomp.deny_new_sockets()


def _load(user_file: str, functions: list[str]):
    spec = importlib.util.spec_from_file_location("submission", user_file)
    module = importlib.util.module_from_spec(spec)
    sys.modules["submission"] = module
    try:
        spec.loader.exec_module(module)
    except BaseException as exc:  # noqa: BLE001 - whatever happens at import is reported, not raised
        return None, _load_error_message(exc, user_file)
    missing = [name for name in functions if not callable(getattr(module, name, None))]
    if missing:
        return None, (f"missing function{'s' if len(missing) > 1 else ''}: " + ", ".join(missing)
                      + " (keep the names and signatures of the stub)")
    return module, ""


def _load_error_message(exc: BaseException, user_file: str) -> str:
    if isinstance(exc, SyntaxError):
        where = f", line {exc.lineno}" if exc.lineno else ""  # a NUL byte has no line
        return f"syntax error in your file{where}: {exc.msg}"
    if isinstance(exc, ModuleNotFoundError):
        return f"module-not-found:{exc.name}"  # worded by the trusted side, which knows the install advice
    if isinstance(exc, SystemExit):
        return "your file called sys.exit() while being imported; keep top-level code to definitions"
    if isinstance(exc, OSError) and exc.errno == 27:  # EFBIG: over the output cap
        return "too-much-output"
    line = user_line(exc, user_file)
    where = f" at line {line}" if line else ""
    detail = _first_line(exc)
    return f"your file raised {type(exc).__name__}{where} while being imported" + (f": {detail}" if detail else "")


def _call(np, module, user_file: str, header: dict, payload):
    args, kwargs = payload["args"], payload["kwargs"]
    if header.get("torch"):
        args, kwargs = _to_torch(args, kwargs, header["torch"])
    log = None
    if header.get("record"):
        import recording

        args, log = recording.wrap(args, header["record"])
    fn = getattr(module, str(header.get("function")), None)
    helper = header.get("helper")
    started = time.perf_counter()
    try:
        if not callable(fn):
            raise AttributeError(f"your file has no function {header.get('function')!r}")
        probe = _helper(helper) if helper else None
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with np.errstate(divide="warn", over="warn", invalid="warn", under="ignore"):
                before = np.geterr()
                if probe is not None:
                    result = probe(fn, args, kwargs, helper.get("spec") or {}, user_file)
                else:
                    result = fn(*args, **kwargs)
                after = np.geterr()
    except BaseException as exc:  # noqa: BLE001 - SystemExit, pytest outcomes, KeyboardInterrupt: all failures
        return {"ok": False, "error": _describe(exc, user_file)}, None
    seconds = time.perf_counter() - started
    reply = {
        "ok": True,
        "seconds": seconds,
        "warnings": [[w.category.__name__, str(w.message)] for w in caught][:20],
        "geterr": None if after == before else str(after),
    }
    if log is not None:
        reply["reads"] = _packed_reads(np, log)
    value = result if probe is not None else {"result": _from_torch(result)}  # a helper returns plain values
    if header.get("return_args"):
        if log is not None:  # a recorded input's memory holds placeholders; its values are kept aside
            args = [recording.values_of(a) for a in args]
        value["args"] = [_from_torch(a) for a in args]
    return reply, value


def _helper(helper: dict):
    """A module the grader copied beside this file, which wraps the call (see SubmissionProxy.use_helper)."""
    import importlib

    name, entry = str(helper.get("module", "")), str(helper.get("entry", "call"))
    if not (name.isidentifier() and entry.isidentifier()):
        raise ImportError(f"no helper {name!r}")
    return getattr(importlib.import_module(name), entry)


def _packed_reads(np, log: list) -> dict:
    """The read log as its distinct entries and, in base64, the int32 index of each access. Built
    after the call but inside the memory the checks measure: one list per access of a long log of
    repeated uses (100k and more) would cost the user's code megabytes it never held."""
    index: dict = {}
    order = np.fromiter((index.setdefault(entry, len(index)) for entry in log), dtype=np.int32, count=len(log))
    return {"entries": [list(entry) for entry in index], "order": base64.b64encode(order.tobytes()).decode("ascii")}


def _describe(exc: BaseException, user_file: str) -> dict:
    shown = "".join(traceback.format_list(user_frames(exc, user_file))).replace(user_file, "your file")
    return {
        "type": type(exc).__name__,
        "module": type(exc).__module__,
        "message": _first_line(exc),
        "line": user_line(exc, user_file),
        "traceback": shown[-4000:],
        "exit_code": repr(exc.code) if isinstance(exc, SystemExit) else None,
        "errno": getattr(exc, "errno", None) if isinstance(exc, OSError) else None,
    }


def _first_line(exc: BaseException) -> str:
    try:
        text = str(exc).strip()
    except BaseException:  # noqa: BLE001 - a user exception whose __str__ raises
        return ""
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        return ""
    if "CompilationError" in type(exc).__name__ and len(lines) > 1:
        return _triton_compile_error(exc)
    return lines[0][:500]


def _triton_compile_error(exc: BaseException) -> str:
    """Triton's CompilationError reads "at 46:37:", the kernel's source, a caret, then the
    compiler's message. An error inside a called @triton.jit helper comes wrapped once per call
    level, each wrapper ending at the call's caret: the innermost one says where and what."""
    chain = [exc]
    while isinstance(chain[-1].__cause__, BaseException) and len(chain) < 32:
        chain.append(chain[-1].__cause__)
    inner = [e for e in chain if "CompilationError" in type(e).__name__][-1]
    lines = [line for line in str(inner).strip().splitlines() if line.strip()]
    where = lines[0].rstrip(":")
    message = lines[-1].strip()
    if message == "^":  # no message of its own: the exception under it has it
        below = chain[chain.index(inner) + 1:]
        message = next((_first_line(e) for e in below if _first_line(e)), "")
    caret = next((i for i in range(len(lines) - 1, 0, -1) if lines[i].strip() == "^"), None)
    source = lines[caret - 1].strip()[:120] if caret else ""
    return f"{message[:400]} ({where} of the @triton.jit function{': ' + source if source else ''})"


# --- torch exercises: arrays become tensors on the way in, tensors arrays on the way out ---


def _to_torch(args, kwargs, spec: dict):
    import torch

    dtype = getattr(torch, spec.get("dtype", "float32"))
    device = spec.get("device", "cpu")

    def convert(value):
        if type(value).__module__ == "numpy" and hasattr(value, "shape"):
            tensor = torch.from_numpy(value)
            # Floating arrays take the dtype asked for; integer ones (seq_lens) keep theirs.
            return tensor.to(device=device, dtype=dtype) if tensor.is_floating_point() else tensor.to(device)
        return value

    return [convert(a) for a in args], {k: convert(v) for k, v in kwargs.items()}


def _from_torch(value):
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(value, torch.Tensor):
        if type(value) is not torch.Tensor:
            return value  # a subclass: it crosses as its type name only, and fails the check
        value = value.detach()
        if value.dtype in (torch.float16, torch.bfloat16):
            value = value.float()  # exact: every half and bf16 value is a float32 value
        return value.cpu().numpy()
    if isinstance(value, tuple):
        return tuple(_from_torch(v) for v in value)
    if isinstance(value, list):
        return [_from_torch(v) for v in value]
    return value


if __name__ == "__main__":
    main(sys.argv[1:])
