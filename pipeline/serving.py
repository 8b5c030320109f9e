"""Running prb's HTTP servers (the simulator, the reward server, the local model), owned by
none of them: a free port, a server in a subprocess until its health answers
(`subprocess_server`, stopped with its block), the port taken before anything claims to listen,
and SIGTERM/SIGINT stop the server within `GRACE_S` seconds even with requests in flight: what
is still running near the end of the grace is answered 503 with Retry-After (the client's retry
policy knows what to do with that), and one line says so.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import ipaddress
import json
import logging
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable

import httpx

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


class Drain:
    """ASGI middleware: once `stop` is set, every request still running that has not begun
    its answer is cancelled and answered 503 with Retry-After, so no client sees a 500 and
    uvicorn has nothing left to cancel (which it would do with a traceback per request)."""

    BODY = json.dumps({"error": {"message": "the server is shutting down: retry later"}})

    def __init__(self, app) -> None:
        self.app, self.stop, self.answered = app, asyncio.Event(), 0

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        started = closed = False

        async def tracked(message) -> None:
            nonlocal started
            if closed:  # answered 503 already: what the app says later goes nowhere
                return
            started = started or message["type"] == "http.response.start"
            await send(message)

        inner = asyncio.ensure_future(self.app(scope, receive, tracked))
        stop = asyncio.ensure_future(self.stop.wait())
        try:
            await asyncio.wait({inner, stop}, return_when=asyncio.FIRST_COMPLETED)
        except BaseException:
            inner.cancel()
            raise
        finally:
            stop.cancel()
        if inner.done():
            return inner.result()  # the app's answer, or its exception, as without us
        inner.cancel()
        if not started:
            # answer first: work in a thread (llama.cpp's generation) ends only when it ends
            closed = True
            self.answered += 1
            headers = [(b"content-type", b"application/json"), (b"retry-after", b"5")]
            await send({"type": "http.response.start", "status": 503, "headers": headers})
            await send({"type": "http.response.body", "body": self.BODY.encode()})
        with contextlib.suppress(BaseException):  # its own end is no one's business
            await inner


def serve(
    app,
    host: str,
    port: int,
    announce: Callable[[], None] | None = None,
    name: str | None = None,
) -> None:
    """Serve `app` until SIGTERM/SIGINT; `announce` runs once the port is ours. A server with a
    `name` (one a user started, not a build's child) says in one line that it stopped; any
    server says when it answered requests 503."""
    import uvicorn

    drain = Drain(app)

    class Server(uvicorn.Server):
        @contextlib.contextmanager
        def capture_signals(self):
            # uvicorn's own raises the signal again at the end of this block, still inside
            # asyncio's runner, whose SIGINT handler then cancels the app's lifespan with a
            # traceback: `serve` raises it once the loop is gone
            if threading.current_thread() is not threading.main_thread():
                yield
                return
            stops = (signal.SIGINT, signal.SIGTERM)
            previous = {sig: signal.signal(sig, self.handle_exit) for sig in stops}
            try:
                yield
            finally:
                for sig, handler in previous.items():
                    signal.signal(sig, handler)

        def handle_exit(self, sig, frame) -> None:
            # a second Ctrl-C would skip the app's shutdown and print its cancellation as a
            # traceback; the drain ends everything within GRACE_S anyway
            if not self.should_exit:
                super().handle_exit(sig, frame)

        async def shutdown(self, sockets=None) -> None:
            # answer what still runs half a second before uvicorn's grace ends
            asyncio.get_running_loop().call_later(max(0.0, GRACE_S - 0.5), drain.stop.set)
            await super().shutdown(sockets)
            line = stop_line(name, self._captured_signals, drain.answered)
            if line:
                print(line, file=sys.stderr, flush=True)

    sock = bind(host, port)
    if announce is not None:
        announce()
    config = uvicorn.Config(
        drain, log_level="warning", access_log=False, timeout_graceful_shutdown=GRACE_S
    )
    server = Server(config)
    server.run(sockets=[sock])
    for sig in reversed(server._captured_signals):  # what uvicorn would do, outside the loop
        signal.raise_signal(sig)


def stop_line(name: str | None, signals: list[int], answered: int) -> str | None:
    """What a server says as it stops: by which signal, and what it answered 503."""
    cut = f": {answered} request(s) still running were answered 503 (Retry-After)"
    if name is None:
        return f"stopped{cut}" if answered else None
    how = f" by {signal.Signals(signals[0]).name}" if signals else ""
    return f"{name} stopped{how}" + (cut if answered else ": no request was running")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def subprocess_server(
    cmd: list[str],
    health_url: str,
    name: str,
    *,
    error: type[Exception] = RuntimeError,
    startup_timeout: float = 30.0,
    quiet: bool = False,
    own_session: bool = False,
):
    """Run `cmd` for the block, from the moment `health_url` answers 200 (the simulator, the
    local model). `quiet`: its output goes to a temporary file, never a pipe nobody reads (a
    full pipe would stall the server), and an exit at startup quotes its last line.
    `own_session`: the terminal's Ctrl-C reaches only us (who stop it at the block's end), and
    it dies with us even when we are killed."""
    with contextlib.ExitStack() as stack:
        log = stack.enter_context(tempfile.TemporaryFile("w+")) if quiet else None
        proc = subprocess.Popen(
            cmd,
            stdout=log,
            stderr=log,
            start_new_session=own_session,
            preexec_fn=_die_with_parent if own_session else None,
        )
        stack.callback(_stop, proc)
        deadline = time.monotonic() + startup_timeout
        while True:
            if proc.poll() is not None:
                last = []
                if log is not None:
                    log.seek(0)
                    last = log.read().strip().splitlines()[-1:]
                raise error(
                    f"{name} exited with code {proc.returncode} at startup"
                    + (f": {last[0]}" if last else "")
                )
            try:
                if httpx.get(health_url, timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise error(f"{name} did not answer on {health_url} in {startup_timeout:g}s")
            time.sleep(0.1)
        yield proc


def _die_with_parent() -> None:
    """In the child before exec: SIGTERM when the parent dies (Linux's PR_SET_PDEATHSIG)."""
    import ctypes

    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # 1: PR_SET_PDEATHSIG


def _stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(5)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
