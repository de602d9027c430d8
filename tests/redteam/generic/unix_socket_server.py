# drill: flashattention/{{ID}}
# Attack: Landlock does not mediate connect() on a pathname unix socket, so a subject could ask
# any local server (a terminal multiplexer, a container daemon, D-Bus) to act for it outside
# the sandbox. {{SOCKET}} is such a server, run by the test: it records every connection.
import socket


def _reach():
    try:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect("{{SOCKET}}")
        s.sendall(b"run: touch /tmp/escaped\n")
        s.close()
    except OSError:
        pass


_reach()


def _attack(*args, **kwargs):
    _reach()
    return None


for _name in {{FUNCTIONS}}:
    globals()[_name] = _attack
