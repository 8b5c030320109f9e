"""Running the build flow for a command: prb's own Prefect server, the progress display on
`display`, SIGTERM turned into an exception every `finally` sees (run/stopping.py).
Interrupted (Ctrl-C, SIGTERM), it raises Stopped, saying how to resume (exit 130 or 143)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from rich.console import Console

from pipeline.errors import PrbError
from pipeline.run import stopping


class Stopped(PrbError):
    def __init__(self, message: str, exit_code: int):
        super().__init__(message)
        self.exit_code = exit_code


def run_build(
    config: Path | None,
    overrides: dict,
    display: Console,
    mode: str = "online",
    runner: str = "default",
    address: str | None = None,
    shards: int = 8,
    force_new_run: bool = False,
    resume: str | None = None,
) -> dict:
    """The build flow with prb's own Prefect server, console and progress display. Interrupted
    (Ctrl-C, SIGTERM), it says how to resume (`resume`, else the `prb build` that does) and
    exits 130 or 143 (no traceback)."""
    from pipeline import cost, progress
    from pipeline.config import load_config
    from pipeline.run import prefect_env

    path = str(config) if config else None
    cfg = load_config(path, **overrides)  # a bad config fails here, before Prefect starts
    from pipeline.run.rundir import RunLock

    RunLock(cfg.run_dir).check()  # and a run already building, in a blink
    progress.interval_from_env()  # and a bad PRB_PROGRESS_SECONDS
    if mode == "batch":
        from pipeline.llm.backends import BACKENDS

        if not BACKENDS.get(cfg.model.provider).batch:
            raise PrbError(
                f"--mode batch: model.provider {cfg.model.provider} has no batch "
                "mode in prb; use --mode online"
            )
    resume = (
        resume or f"rerun `prb build{f' --config {config}' if config else ''} --run-id {{run_id}}`"
    )
    resume = resume.replace("{run_id}", cfg.run_id)
    stopping.exit_on_sigterm()
    from prefect.exceptions import TerminationSignal

    from pipeline.errors import Terminated
    from pipeline.run.flow import build
    from pipeline.stages import STAGES
    from pipeline.stages.base import roles

    try:
        price = cost.pricer(cfg, roles(STAGES))
        with prefect_env.api_server(), progress.showing(display, price=price):
            prefect_env.quiet_console()
            if runner == "dask":
                from pipeline.run.shards import run_on_dask

                return run_on_dask(build, path, overrides, address=address, shards=shards)
            return asyncio.run(build(path, overrides, mode=mode, force_new_run=force_new_run))
    except KeyboardInterrupt:
        raise Stopped(f"interrupted; nothing finished is lost: {resume} to resume", 130) from None
    except (Terminated, TerminationSignal):
        raise Stopped(f"terminated; nothing finished is lost: {resume} to resume", 143) from None
