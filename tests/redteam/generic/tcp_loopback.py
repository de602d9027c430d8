# drill: flashattention/{{ID}}
# Attack: a TCP connection to a server on the machine's loopback ({{PORT}}, run by the test and
# recording every connection): the way to a local service, or to another subject.
import socket


def _reach():
    for family, address in ((socket.AF_INET, ("127.0.0.1", {{PORT}})), (socket.AF_INET6, ("::1", {{PORT}}))):
        try:
            with socket.socket(family, socket.SOCK_STREAM) as s:
                s.settimeout(2)
                s.connect(address)
                s.sendall(b"hello from the subject\n")
        except OSError:
            pass
    try:  # and a datagram, which needs no connection
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            s.sendto(b"hello", ("127.0.0.1", {{PORT}}))
    except OSError:
        pass


_reach()


def _attack(*args, **kwargs):
    _reach()
    return None


for _name in {{FUNCTIONS}}:
    globals()[_name] = _attack
