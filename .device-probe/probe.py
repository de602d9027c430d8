import os, sys
sys.path.insert(0, os.getcwd())
from drill.grader import namespaces, seccomp
print("euid", os.geteuid(), "probe", repr(namespaces.probe()))
def trial(name, fn):
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        try:
            fn()
            import torch
            torch.cuda.init(); n = torch.cuda.device_count(); x = torch.ones(4, device="cuda").sum().item()
            msg = f"ok {n} {x}"
        except BaseException as e:
            msg = f"FAIL {type(e).__name__}: {str(e)[:160]}"
        os.write(w, msg.encode()); os._exit(0)
    os.close(w); out = os.read(r, 4096).decode(); os.waitpid(pid, 0); print(name, "->", out, flush=True)
trial("nothing", lambda: None)
trial("seccomp", seccomp.deny_new_sockets)
def ns_only(flags):
    def f():
        namespaces._unshare(flags)
        if flags & namespaces.CLONE_NEWNS: namespaces._private_mounts(64 << 20)
        if flags & namespaces.CLONE_NEWPID:
            c = os.fork()
            if c: os.waitpid(c, 0); os._exit(0)
    return f
for label, flags in [("net", namespaces.CLONE_NEWNET), ("mount", namespaces.CLONE_NEWNS), ("ipc", namespaces.CLONE_NEWIPC), ("pid", namespaces.CLONE_NEWPID)]:
    trial(label, ns_only(flags))
