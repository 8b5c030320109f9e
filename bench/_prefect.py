"""What every benchmark that runs `prb build` needs: an isolated Prefect state and one running
Prefect server that the builds (and their subprocesses) share, so no build pays for starting
its own temporary server (DESIGN.md: "Prefect, measured here")."""

from __future__ import annotations

import os
from contextlib import contextmanager
from pathlib import Path


def isolate(tmp: Path) -> None:
    """Prefect state under `tmp`, nothing sent off the machine; set before importing prefect."""
    (tmp / "prefect").mkdir(parents=True, exist_ok=True)
    os.environ.update(
        PREFECT_HOME=str(tmp / "prefect"),
        PREFECT_SERVER_ANALYTICS_ENABLED="false",
        DO_NOT_TRACK="1",
        PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS="180",
    )


@contextmanager
def prefect_server():
    """A Prefect server for the benchmark's lifetime; PREFECT_API_URL points children at it."""
    from prefect.server.api.server import SubprocessASGIServer

    server = SubprocessASGIServer()
    server.start()
    os.environ["PREFECT_API_URL"] = server.api_url
    try:
        yield server.api_url
    finally:
        server.stop()
