"""Running prb's HTTP servers (the simulator, the reward server): the port is taken before
anything claims to listen, and SIGTERM/SIGINT stop the server within `GRACE_S` seconds even with
requests in flight (uvicorn cancels what is still running then; those clients get an error).
"""

from __future__ import annotations

import errno
import ipaddress
import logging
import socket
from collections.abc import Callable

from pipeline.errors import PortInUse, PrbError

GRACE_S = 2  # seconds in-flight requests get to finish after SIGTERM/SIGINT
_warned: set[str] = set()  # hosts beyond loopback already warned about


class BadHost(PrbError):
    """A --host that is not an address this machine can listen on (a usage error)."""


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on host:port; PortInUse naming it, or BadHost for a bad address. An
    address beyond loopback is warned about once: anyone who can reach it can use the server."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except (socket.gaierror, UnicodeError, ValueError) as e:
        raise BadHost(f"--host {host!r} is not an address to listen on ({e})") from None
    address = infos[0][4][0]
    if not ipaddress.ip_address(address.split("%")[0]).is_loopback and host not in _warned:
        _warned.add(host)
        logging.getLogger("prb").warning(
            f"listening on {host} ({address}), beyond loopback: anyone who can reach this "
            "machine can call the server; use --host 127.0.0.1 unless that is what you want"
        )
    family = infos[0][0]
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
        sock.listen(2048)
    except OSError as e:
        sock.close()
        if e.errno in (errno.EADDRINUSE, errno.EACCES):
            raise PortInUse(
                f"{host}:{port} is {'in use' if e.errno == errno.EADDRINUSE else 'not allowed'}"
                ": stop what listens there or pick another --port"
            ) from None
        raise PortInUse(f"cannot listen on {host}:{port}: {e.strerror}") from None
    sock.set_inheritable(True)
    return sock


def port_free(host: str, port: int) -> None:
    """PortInUse unless host:port can be bound now (for a server another process will bind)."""
    bind(host, port).close()


def serve(app, host: str, port: int, announce: Callable[[], None] | None = None) -> None:
    """Serve `app` until SIGTERM/SIGINT; `announce` runs once the port is ours."""
    import uvicorn

    sock = bind(host, port)
    if announce is not None:
        announce()
    config = uvicorn.Config(
        app, log_level="warning", access_log=False, timeout_graceful_shutdown=GRACE_S
    )
    uvicorn.Server(config).run(sockets=[sock])
