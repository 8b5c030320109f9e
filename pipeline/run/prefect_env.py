"""How `prb` runs Prefect: a private temporary API server and a console that prb speaks for.

With no `PREFECT_API_URL`, Prefect would start a temporary server as a child in prb's own
process group: Ctrl-C in a terminal (SIGINT to the whole group) then killed the server too, and
prb spent over a minute retrying a dead API. `api_server()` starts that server itself in a
process group of its own (a terminal's Ctrl-C reaches prb only, which then stops the server) and
asks the kernel to end it when prb dies, even by kill -9 (Linux PR_SET_PDEATHSIG), so no
server is ever orphaned.

`quiet_console()` keeps Prefect's console from printing a traceback for a run prb reports
itself: prb prints one line per failure (see pipeline/errors.py). Prefect's API log handler
still records everything.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import os
import signal
import subprocess
import sys

PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:  # runs in the child between fork and exec
    # not Linux: no prctl, and the server is stopped by prb's own exit path only
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def _server_class():
    from prefect.server.api.server import SubprocessASGIServer

    class PrivateServer(SubprocessASGIServer):
        def _run_uvicorn_command(self) -> subprocess.Popen:
            # Prefect's own command (3.9.1), started in its own process group and tied to us
            import prefect
            from prefect.settings import get_current_settings

            env = {
                **os.environ,
                "PREFECT_UI_ENABLED": "0",
                "PREFECT__SERVER_EPHEMERAL": "1",
                "PREFECT__SERVER_FINAL": "1",
                **get_current_settings().to_environment_variables(exclude_unset=True),
            }
            app = "prefect.server.api.server:create_app"
            args = [
                sys.executable,
                "-m",
                "uvicorn",
                "--app-dir",
                str(prefect.__module_path__.parent),
                "--factory",
                app,
                "--host",
                "127.0.0.1",
                "--port",
                str(self.port),
                "--log-level",
                "error",
                "--lifespan",
                "on",
            ]
            return subprocess.Popen(args, env=env, process_group=0, preexec_fn=_die_with_parent)

    return PrivateServer


@contextlib.contextmanager
def api_server():
    """The configured Prefect API, or a private temporary server for the duration."""
    from prefect.settings import PREFECT_API_URL, get_current_settings, temporary_settings

    if get_current_settings().api.url:
        yield
        return
    server = _server_class()()
    server.start()
    os.environ["PREFECT_API_URL"] = server.api_url  # Dask workers and subprocesses follow it
    try:
        with temporary_settings(updates={PREFECT_API_URL: server.api_url}):
            yield
    finally:
        os.environ.pop("PREFECT_API_URL", None)
        _drain()  # Prefect's log and event workers send what they hold while the API is up
        server.stop()


def _drain() -> None:
    """Bounded: run logs get 2 s, Prefect's own events 1 s (a stopped run may leave some; they
    only feed Prefect's UI)."""
    from prefect.events.worker import EventsWorker
    from prefect.logging.handlers import APILogWorker

    for worker, timeout in ((APILogWorker, 2.0), (EventsWorker, 1.0)):
        with contextlib.suppress(Exception):  # a stuck worker must not keep prb waiting
            worker.drain_all(timeout=timeout)


class _RunFailures(logging.Filter):
    """Drops Prefect's ERROR lines about flow and task runs (their tracebacks, "Crash
    detected!", "Finished in state Failed"): prb reports how a run ended in one line."""

    def filter(self, record: logging.LogRecord) -> bool:
        runs = record.name.startswith(("prefect.flow_runs", "prefect.task_runs"))
        return not (runs and record.levelno >= logging.ERROR)


_FILTER = _RunFailures()


def quiet_console() -> None:
    """Install the filter on Prefect's console handlers (idempotent), and keep the workers that
    ship logs and events to the API from warning that they are "still processing" at exit."""
    from prefect.logging.handlers import PrefectConsoleHandler

    for worker in ("APILogWorker", "EventsWorker"):
        logging.getLogger(worker).setLevel(logging.ERROR)

    loggers = [logging.getLogger(), *(logging.getLogger(n) for n in ("prefect", "uvicorn"))]
    for logger in loggers:
        for handler in logger.handlers:
            if isinstance(handler, PrefectConsoleHandler) and _FILTER not in handler.filters:
                handler.addFilter(_FILTER)
