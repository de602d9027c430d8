"""Run a ring-attention submission on W gloo ranks and record what every rank did.

usage: python _ring_harness.py WORK_DIR

A script, not a pytest module. The trusted grader copies it, sandbox.py, usertrace.py and
the user's file into a scratch folder and starts it there inside the sandbox (drill.grader.sandbox),
so it and every rank are untrusted: nothing they write decides a value's verdict. The
grader gives each rank its own folder WORK_DIR/ranks/W<w>_r<r>/ holding a copy of the
user's file and that rank's shards only (inputs.npz), and reads each rank's (o, lse) back
from there (out_<case>_o.npy, out_<case>_lse.npy) to compare with its own reference.

This launcher imports torch once, then for every world size in WORK_DIR/plan.json forks W
ranks. Each rank
  * loads its own shards, joins a gloo group on 127.0.0.1,
  * shuts down its connections to the c10d store (used only to connect the group), then
    shuts itself in further: no new socket of any kind (a seccomp filter: the gloo mesh is
    already connected), nowhere to keep data but its own resident memory (a second filter:
    no new process, memfd, System V segment or socketpair, no madvise page-out; a file size
    limit), and a Landlock layer of its own: read only its own folder, write only the result
    files the grader made there, open no new TCP connection (ABI 4+), no signals to other
    processes (ABI 6+); so it can neither read another rank's shards nor write another
    rank's results, and it reaches the other ranks only through the gloo group,
  * wraps the torch.distributed functions so every collective and every send/recv is
    written down (advice for honest users: a rank can undo this, so it may fail a check
    but never passes one), imports the user's file, and
  * calls the function the plan names (ring_attention unless told) on its shards of every
    case, with the explicit process group a case asks for, saving its outputs in its folder.
Ranks report over a pipe, one JSON object per line. This process kills ranks that stop
making progress (a deadlock) and writes WORK_DIR/summary.json with every rank's events, and
each rank's peak resident memory over its whole life, kept by the kernel (wait4, when the rank
is reaped); each rank reports its peak before it imports the user's file (its first "measure"
event, written before any user code ran).
They die with this process (PR_SET_PDEATHSIG); the grader ends the whole tree at the end.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import resource
import select
import signal
import socket
import sys
import time
from pathlib import Path

import numpy as np
import sandbox  # the copy beside this script
import seccomp  # the copy beside this script
import torch
import torch.distributed as dist
import torch.distributed.distributed_c10d as c10d
from usertrace import user_line  # the copy beside this script

COLLECTIVES = (
    "all_gather", "all_gather_into_tensor", "all_gather_object", "all_gather_coalesced", "_all_gather_base",
    "all_reduce", "all_reduce_coalesced", "reduce", "broadcast", "broadcast_object_list", "all_to_all",
    "all_to_all_single", "reduce_scatter", "reduce_scatter_tensor", "_reduce_scatter_base", "gather",
    "gather_object", "scatter", "scatter_object_list",
)
BLOCKING_P2P = ("send", "recv", "send_object_list", "recv_object_list")
ASYNC_P2P = ("isend", "irecv")
INIT_LIMIT_S = 30.0  # to import the user's file and join the group
_NET_TCP = 1 | 2  # LANDLOCK_ACCESS_NET_BIND_TCP | CONNECT_TCP


class _InitAtImport(Exception):
    """The user's file tried to set up a process group while being imported."""
GRACE_S = 2.0  # how long the other ranks get once one rank has failed


# --------------------------------------------------------------------------- in a rank


class Rank:
    def __init__(self, rank: int, world: int, wfd: int):
        self.rank, self.world, self.wfd = rank, world, wfd
        self.case = None  # the case being run; None while the harness itself communicates
        self.depth = 0  # > 0 inside a recorded call: calls it makes itself are not recorded
        self._barrier = dist.barrier  # taken before the user's file could replace it

    def emit(self, **event) -> None:
        data = (json.dumps(event, default=str) + "\n").encode()
        while data:
            data = data[os.write(self.wfd, data):]

    def wrap_distributed(self) -> None:
        """Replace the torch.distributed functions by recording wrappers, in both namespaces."""
        for name in COLLECTIVES + BLOCKING_P2P + ASYNC_P2P + ("batch_isend_irecv",):
            fn = getattr(c10d, name, None)
            if fn is None:
                continue
            wrapper = self._wrapper(name, fn)
            setattr(c10d, name, wrapper)  # batch_isend_irecv and P2POp compare against these
            if getattr(dist, name, None) is fn:
                setattr(dist, name, wrapper)

    def _wrapper(self, name, fn):
        rank = self

        def wrapper(*args, **kwargs):
            if rank.depth or rank.case is None:
                return fn(*args, **kwargs)
            event = {"op": name, "case": rank.case}
            if name == "batch_isend_irecv":
                ops = args[0] if args else kwargs.get("p2p_op_list", [])
                event["ops"] = [[getattr(getattr(p, "op", None), "__name__", "?"), getattr(p, "peer", None)]
                                for p in (ops if isinstance(ops, (list, tuple)) else [])]
            elif name in BLOCKING_P2P + ASYNC_P2P:
                event["peer"] = _peer(name, args, kwargs)
            blocking = name in BLOCKING_P2P
            rank.emit(phase="enter" if blocking else "call", **event)
            rank.depth += 1
            try:
                return fn(*args, **kwargs)
            finally:
                rank.depth -= 1
                if blocking:
                    rank.emit(phase="exit", **event)

        wrapper.__name__ = name
        wrapper.__qualname__ = name
        wrapper.__doc__ = fn.__doc__
        wrapper.__wrapped__ = fn
        return wrapper

    def barrier(self) -> None:
        """The harness's own barrier (not recorded): keeps the cases apart."""
        self._barrier()


def _peer(name, args, kwargs):
    """The rank a send/recv names (dst or src, positional or keyword)."""
    keys = ("dst", "group_dst") if "send" in name else ("src", "group_src")
    for key in keys:
        if kwargs.get(key) is not None:
            return kwargs[key]
    if len(args) > 1 and isinstance(args[1], int):
        return args[1]
    return None


def _describe(exc: BaseException, user_file: str) -> dict:
    text = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else ""
    return {"type": type(exc).__name__, "message": text, "line": user_line(exc, user_file)}


def _as_array(x):
    if not isinstance(x, torch.Tensor):
        return None
    return x.detach().to("cpu", torch.float64).numpy()


def rank_main(rank: int, world: int, listener: socket.socket, folder: str, plan: dict, wfd: int) -> None:
    user_name, cases = plan["user_file"], plan["cases"]
    function = plan.get("function", "ring_attention")
    in_names = plan.get("inputs", ["q", "k", "v"])
    out_names = plan.get("outputs", ["o", "lse"])
    r = Rank(rank, world, wfd)
    r.emit(event="start")
    _die_with_parent()
    _return_freed_memory()
    torch.set_num_threads(1)
    cases = [c for c in cases if world in c.get("worlds", [world])]
    with np.load(os.path.join(folder, "inputs.npz"), allow_pickle=False) as data:
        inputs = {k: data[k] for k in data.files}  # this rank's shards only
    try:
        # Every connection is made now: the rank opens no new one once it is shut in.
        os.environ["TORCH_GLOO_LAZY_INIT"] = "0"
        import datetime

        timeout = datetime.timedelta(seconds=120)
        port = listener.getsockname()[1]
        # Rank 0 serves the store on the launcher's socket, bound since before the fork: a port
        # picked free and bound later can be taken meanwhile by a busy machine's other programs.
        store = dist.TCPStore("127.0.0.1", port, world, is_master=rank == 0, timeout=timeout,
                              master_listen_fd=listener.fileno() if rank == 0 else None, wait_for_workers=False)
        if rank != 0:
            listener.close()
        dist.init_process_group("gloo", store=store, rank=rank, world_size=world, timeout=timeout)
    except BaseException as exc:  # noqa: BLE001
        r.emit(event="init_error", **_describe(exc, ""))
        return
    # Explicit groups are made now, by every rank and in the same order, while the store still works.
    groups = {}
    for case in cases:
        spec = case.get("group")
        spec = None if spec is None else [g for g in spec if g < world]  # the members this world has
        case["group"] = spec  # a group of fewer than two ranks: the case is not run in this world
        if spec is not None and len(spec) > 1 and tuple(spec) not in groups:
            groups[tuple(spec)] = dist.new_group(ranks=list(spec))
    # Over gloo: every rank is done with the store (init, new_group) before any rank cuts it.
    dist.barrier()
    _cut_store(port)
    _shut_in(folder, int(plan.get("file_limit", {}).get(str(world), 1 << 20)))
    r.wrap_distributed()
    r.emit(event="measure", peak=_peak(resource.getrusage(resource.RUSAGE_SELF)))  # the first such event: no user code has run yet
    user_file = os.path.join(folder, user_name)

    def refuse(*args, **kwargs):
        raise _InitAtImport()

    import importlib.util

    saved = dist.init_process_group
    dist.init_process_group = c10d.init_process_group = refuse
    try:
        spec = importlib.util.spec_from_file_location("submission", user_file)
        module = importlib.util.module_from_spec(spec)
        sys.modules["submission"] = module
        spec.loader.exec_module(module)
        fn = getattr(module, function)
    except _InitAtImport:
        r.emit(event="load_error", type="RuntimeError", line=None,
               message=f"your file sets up a process group when it is imported; {function} must use the caller's")
        return
    except BaseException as exc:  # noqa: BLE001 - reported, never raised
        r.emit(event="load_error", **_describe(exc, user_file))
        return
    finally:
        dist.init_process_group = c10d.init_process_group = saved
    r.emit(event="ready")

    for case in cases:
        name = case["name"]
        spec = case.get("group")
        if spec is not None and (rank not in spec or len(spec) < 2):
            r.barrier()  # outside the group: this rank takes no part in the case
            r.emit(event="case_done", case=name, outside=True)
            continue
        group = None if spec is None else groups[tuple(spec)]
        # The loaded arrays themselves, and a digest instead of a copy: the harness holds nothing
        # beyond the shards, so a rank's peak is the shards and what the user's code keeps.
        shards = [torch.from_numpy(inputs.pop(f"{name}_{t}")) for t in in_names]
        before = [_digest(x) for x in shards]
        r.barrier()
        r.case = name
        counter, work = _flop_counter(), _WorkOutsideMatmuls()
        try:
            with counter, work:
                out = fn(*shards, group=group, causal=bool(case["causal"]))
        except BaseException as exc:  # noqa: BLE001 - the rank stops here; the launcher sees why
            r.case = None
            r.emit(event="case_error", case=name, **_describe(exc, user_file))
            return
        r.case = None
        changed = [t for t, x, digest in zip(in_names, shards, before) if _digest(x) != digest]
        result = {"event": "case_done", "case": name, "changed": changed, "returned": type(out).__name__,
                  "flops": counter.get_total_flops() + work.hidden_flops if hasattr(counter, "get_total_flops") else None,
                  "largest_pointwise": work.largest_pointwise, "pointwise_total": work.pointwise_total,
                  "converted": work.converted}
        if isinstance(out, (tuple, list)) and len(out) == len(out_names):
            result["types"] = [type(x).__name__ for x in out]
            result["shapes"] = [list(x.shape) if hasattr(x, "shape") else None for x in out]
            for key, x in zip(out_names, out):
                array = _as_array(x)
                if array is not None:
                    np.save(os.path.join(folder, f"out_{name}_{key}.npy"), array, allow_pickle=False)
        r.emit(**result)
    r.barrier()  # every receive of every rank has completed: safe to leave
    r.emit(event="finished")


def _digest(x: torch.Tensor) -> tuple:
    """Shape, dtype and a hash of the bytes: enough to tell whether the call changed a tensor."""
    array = x.detach().contiguous().numpy()
    return tuple(array.shape), str(array.dtype), hashlib.blake2b(memoryview(array).cast("B")).hexdigest()


def _cut_store(port: int) -> None:
    """The c10d store (rank 0 serves it, every rank holds a connection to it) is needed only to
    connect the group: shut its connections down, so no rank can pass data around the ring
    through it. gloo's own connections to the other ranks stay."""
    for name in os.listdir("/proc/self/fd"):
        try:
            s = socket.socket(fileno=os.dup(int(name)))
        except (OSError, ValueError):
            continue  # not a socket
        try:
            if s.family not in (socket.AF_INET, socket.AF_INET6):
                continue
            ends = []
            for where in (s.getsockname, s.getpeername):
                try:
                    ends.append(where()[1])
                except OSError:
                    pass
            if port in ends:
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
        finally:
            s.close()  # the duplicate only


def _shut_in(folder: str, file_limit: int) -> None:
    """This rank's own layers: no new socket and nowhere to keep data but its own memory (seccomp,
    a file size limit), and with Landlock: read its folder, write only its result files, no new
    TCP connection, no signals out."""
    if seccomp.available():
        seccomp.deny_new_sockets()
        seccomp.deny_hidden_memory()
    resource.setrlimit(resource.RLIMIT_FSIZE, (file_limit, file_limit))
    if sandbox.landlock_abi() < 1:
        return  # the grader reports "sandbox: partial"
    work = Path(folder).parent.parent  # the launcher's folder: other ranks' shards and results
    policy = sandbox.Policy(Path(folder), [work])
    devices = [d for d in ("/dev/null", "/dev/zero", "/dev/urandom", "/dev/random") if os.path.exists(d)]
    read, listed = policy.paths()
    results = sorted(str(p) for p in Path(folder).glob("out_*.npy"))
    sandbox._apply_landlock((read + [policy.scratch.as_posix()], results, devices, listed), net=_NET_TCP)


class _WorkOutsideMatmuls:
    """Work torch's FLOP counter cannot see, recorded during the call: the largest output of any
    pointwise torch operation (a broadcast product q[:, None] * k[None] is a matmul done by hand,
    n·n·d elements), the total of the floating-point elements every pointwise operation output (a
    matmul done by hand in smaller pieces, a column of d or a query row at a time, still outputs
    n·n·d products in all), and how many tensor elements were handed out to NumPy, Python lists or
    Python scalars (work done there is invisible to torch). Advice like the rest of the record: code
    that reaches torch's C methods directly, or pops the dispatch mode, can hide from it."""

    def __init__(self):
        from torch.utils._python_dispatch import TorchDispatchMode

        record = self

        class Pointwise(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                out = func(*args, **(kwargs or {}))
                record.hidden_flops += _uncounted_matmul_flops(func, args)
                if torch.Tag.pointwise in func.tags:
                    for t in out if isinstance(out, (tuple, list)) else (out,):
                        if isinstance(t, torch.Tensor):
                            record.largest_pointwise = max(record.largest_pointwise, t.numel())
                            if t.is_floating_point():
                                record.pointwise_total += t.numel()
                return out

        self.largest_pointwise, self.pointwise_total, self.converted, self.hidden_flops = 0, 0, 0, 0
        self._mode, self._saved = Pointwise(), {}

    def _counting(self, original):
        def convert(tensor, *args, **kwargs):
            self.converted += tensor.numel()
            return original(tensor, *args, **kwargs)

        return convert

    def __enter__(self):
        for name in ("numpy", "__array__", "tolist", "item", "__float__", "__int__"):
            self._saved[name] = torch.Tensor.__dict__.get(name)  # None: inherited from torch's C base
            setattr(torch.Tensor, name, self._counting(getattr(torch.Tensor, name)))
        self._mode.__enter__()
        return self

    def __exit__(self, *exc):
        self._mode.__exit__(*exc)
        for name, original in self._saved.items():
            if original is None:
                delattr(torch.Tensor, name)
            else:
                setattr(torch.Tensor, name, original)
        return False


def _uncounted_matmul_flops(func, args) -> int:
    """The FLOPs of a product torch's FLOP counter leaves out (it counts mm, addmm, bmm and baddbmm,
    not their in-place forms, matrix-vector or vector products, sparse products, weighted
    embedding-bag sums, cdist, bilinear forms or CPU attention): 2 per multiply-add, as the counter does, so the same block maths counts the same
    however it is written. 0 for any other operation."""
    name = func.overloadpacket.__name__
    shapes = [tuple(a.shape) for a in args if isinstance(a, torch.Tensor)]
    try:
        if name in ("addmm_", "_addmm_activation", "_sparse_addmm", "sspaddmm"):
            (a, b), c = shapes[1], shapes[2][1]
            return 2 * a * b * c
        if name in ("baddbmm_", "addbmm", "addbmm_"):
            (batch, a, b), c = shapes[1], shapes[2][2]
            return 2 * batch * a * b * c
        if name in ("mv", "addmv", "addmv_"):
            a, b = shapes[0] if name == "mv" else shapes[1]
            return 2 * a * b
        if name in ("dot", "vdot"):
            return 2 * shapes[0][0]
        if name in ("addr", "addr_"):
            return 2 * shapes[1][0] * shapes[2][0]
        if name in ("_sparse_mm", "hspmm"):
            (a, b), c = shapes[0], shapes[1][1]
            return 2 * a * b * c
        if name.startswith("_embedding_bag") and len(shapes) >= 4:  # a weighted sum of rows: p @ v by lookup
            return 2 * shapes[1][0] * shapes[0][-1]
        if name == "_cdist_forward":
            *batch, a, d = shapes[0]
            return 2 * math.prod(batch) * a * shapes[1][-2] * d
        if name == "_trilinear":  # bilinear: every input broadcast to one shape, all of it multiplied
            ranks = len(shapes[0]) + len(args[3])
            full = [1] * ranks
            for shape, expand in zip(shapes[:3], args[3:6]):
                dims = iter(shape)
                for i in range(ranks):
                    full[i] = max(full[i], 1 if i in expand else next(dims))
            return 2 * math.prod(full)
        if name.startswith("_scaled_dot_product") and len(shapes) >= 3:  # S = q kᵀ and p v (and backward)
            *batch, sq, d = shapes[0]
            sk, dv = shapes[1][-2], shapes[2][-1]
            twice = 2 if "backward" in name else 1
            return twice * 2 * math.prod(batch) * sq * sk * (d + dv)
    except (IndexError, ValueError, TypeError, StopIteration):
        return 0
    return 0


def _flop_counter():
    """Counts the matmul FLOPs torch runs during the call (a do-nothing context if unavailable)."""
    try:
        from torch.utils.flop_counter import FlopCounterMode

        return FlopCounterMode(display=False)
    except Exception:  # an older torch
        import contextlib

        return contextlib.nullcontext()


def _return_freed_memory() -> None:
    """Large blocks straight from mmap and back on free (glibc would otherwise raise its threshold
    after the first free and keep later blocks in its heap): a rank's resident peak is then what
    its code held at once, the same from run to run."""
    try:
        import ctypes

        ctypes.CDLL(None).mallopt(-3, 1 << 16)  # M_MMAP_THRESHOLD: 64 KiB, fixed
    except (OSError, AttributeError):  # not glibc: the peak is only less tight
        pass


def _die_with_parent() -> None:
    """Linux: SIGKILL this rank if the launcher dies, so no rank outlives a killed check."""
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except Exception:  # not Linux: the grader's process-group kill still applies
        pass


# --------------------------------------------------------------------------- the launcher


def _listener() -> socket.socket:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(64)
    return s


def run_world(world: int, work: str, plan: dict) -> dict:
    listener = _listener()
    ranks = []
    for rank in range(world):
        rfd, wfd = os.pipe()
        pid = os.fork()
        if pid == 0:  # the rank
            code = 0
            try:
                os.close(rfd)
                for other in ranks:
                    os.close(other["fd"])
                folder = os.path.join(work, "ranks", f"W{world}_r{rank}")
                rank_main(rank, world, listener, folder, plan, wfd)
            except BaseException:  # noqa: BLE001
                code = 1
            finally:
                try:
                    sys.stdout.flush()
                    sys.stderr.flush()
                finally:
                    os._exit(code)
        os.close(wfd)
        ranks.append({"pid": pid, "fd": rfd, "buf": b"", "events": [], "open": True})
    listener.close()  # rank 0 holds it now
    return _watch(world, ranks, plan)


def _peak(usage) -> int:
    """ru_maxrss in bytes: the peak resident memory the kernel kept (kilobytes on Linux, bytes on macOS)."""
    return usage.ru_maxrss * (1 if sys.platform == "darwin" else 1024)


def _watch(world: int, ranks: list, plan: dict) -> dict:
    """Collect events until every rank is done; kill ranks that stop making progress."""
    started = time.monotonic()
    progress_limit = float(plan.get("progress_limit_s", 10.0))
    last_progress = started
    failed_at = None
    status = "ok"
    while any(r["open"] for r in ranks):
        now = time.monotonic()
        ready = all(any(e.get("event") == "ready" for e in r["events"]) for r in ranks)
        if failed_at is not None and now - failed_at > GRACE_S:
            status = "failed"
            break
        if failed_at is None and not ready and now - started > INIT_LIMIT_S:
            status = "init_timeout"
            break
        if failed_at is None and ready and now - last_progress > progress_limit:
            status = "stuck"
            break
        fds = [r["fd"] for r in ranks if r["open"]]
        readable, _, _ = select.select(fds, [], [], 0.05)
        for r in ranks:
            if r["fd"] not in readable:
                continue
            chunk = os.read(r["fd"], 65536)
            if not chunk:
                r["open"] = False
                if not any(e.get("event") == "finished" for e in r["events"]) and failed_at is None:
                    r["events"].append({"event": "died"})
                    failed_at = time.monotonic()
                continue
            r["buf"] += chunk
            *lines, r["buf"] = r["buf"].split(b"\n")
            for line in lines:
                try:
                    event = json.loads(line)
                except ValueError:
                    continue
                r["events"].append(event)
                kind = event.get("event")
                if kind in ("case_done", "finished", "ready"):
                    last_progress = time.monotonic()
                if kind in ("load_error", "init_error", "case_error") and failed_at is None:
                    failed_at = time.monotonic()
    if failed_at is not None and status == "ok":
        status = "failed"
    for r in ranks:
        if r["open"]:
            r["events"].append({"event": "killed"})
        try:
            os.kill(r["pid"], signal.SIGKILL)
        except ProcessLookupError:
            pass
        _, _, usage = os.wait4(r["pid"], 0)
        r["peak"] = _peak(usage)  # the rank's whole life
        os.close(r["fd"])
    return {"world": world, "status": status, "seconds": round(time.monotonic() - started, 3),
            "ranks": [r["events"] for r in ranks], "peaks": [r["peak"] for r in ranks]}


def _warm_up() -> None:
    """Pay the lazy imports once here, before forking, not once per rank on a busy CPU."""
    with _flop_counter():
        torch.ones(2, 2, dtype=torch.float64) @ torch.ones(2, 2, dtype=torch.float64)
    torch.logsumexp(torch.zeros(2, 2), dim=-1)


def _hung_in_group(run: dict, plan: dict) -> bool:
    """Did the ranks hang in a case with an explicit group? Larger rings are still worth running then."""
    for case in (c for c in plan["cases"] if run["world"] in c.get("worlds", [run["world"]])):
        if not all(any(e.get("event") == "case_done" and e.get("case") == case["name"] for e in events)
                   for events in run["ranks"]):
            return case.get("group") is not None
    return False


def main(argv: list[str]) -> int:
    (work,) = argv
    _warm_up()
    with open(os.path.join(work, "plan.json"), encoding="utf-8") as f:
        plan = json.load(f)
    if sys.platform.startswith("linux") and os.path.exists("/sys/class/net/lo"):
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")  # never depend on the hostname resolving
    summary = {"worlds": []}
    stuck = None
    for world in plan["worlds"]:
        if stuck is not None:  # what hangs at W hangs at W + 1 too: do not wait for it twice
            run = {"world": world, "status": "skipped", "after": stuck, "ranks": []}
        else:
            run = run_world(world, work, plan)
            stuck = world if run["status"] in ("stuck", "init_timeout") and not _hung_in_group(run, plan) else None
        summary["worlds"].append(run)
        # rewritten after every world: a launcher cut short still leaves what it saw
        with open(os.path.join(work, "summary.json"), "w", encoding="utf-8") as f:
            json.dump(summary, f)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
