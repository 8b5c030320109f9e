"""The `prb` command line."""

from __future__ import annotations

import asyncio
import signal
import time
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from pipeline.config import REPO_ROOT, ConfigError

app = typer.Typer(help="Build Personalized RewardBench-style benchmarks.", no_args_is_help=True)
console = Console()


def _exit_on_sigterm() -> None:
    # SystemExit unwinds normally, so Prefect shuts down its temporary server with us
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(SystemExit(143)))


def run_build(config: Path | None, overrides: dict) -> dict:
    from pipeline.flows import build

    _exit_on_sigterm()
    return asyncio.run(build(str(config) if config else None, overrides))


def print_summary(result: dict) -> None:
    table = Table(title="funnel")
    table.add_column("stage")
    table.add_column("count", justify="right")
    for stage, n in result["funnel"].items():
        table.add_row(stage, str(n))
    console.print(table)
    calls = sum(u["calls"] for u in result["usage"].values())
    hits = sum(u["cache_hits"] for u in result["usage"].values())
    console.print(f"model calls: {calls} sent, {hits} from cache")
    console.print(f"release: {result['release_dir']}")


@app.command()
def build(
    config: Path = typer.Option(REPO_ROOT / "configs" / "default.yaml", help="Run config (YAML)."),
    run_id: str = typer.Option(None, help="Run id; reusing one resumes that run."),
    base_url: str = typer.Option(None, help="OpenAI-compatible endpoint, e.g. http://host/v1."),
    debug: bool = typer.Option(False, help="Sequential calls (concurrency 1), verbose logs."),
):
    """Run every stage of the pipeline for one run id (resuming it if it exists)."""
    overrides = {"run_id": run_id, "model__base_url": base_url}
    if debug:
        overrides["model__concurrency"] = 1
        import logging

        logging.basicConfig(level=logging.DEBUG)
    try:
        print_summary(run_build(config, overrides))
    except ConfigError as e:
        console.print(f"[red]config error:[/red] {e}")
        raise typer.Exit(2) from None


@app.command()
def demo(
    config: Path = typer.Option(REPO_ROOT / "configs" / "demo.yaml"),
    run_id: str = typer.Option(None),
):
    """Build a small benchmark offline against the bundled simulator."""
    from pipeline.sim.server import running

    started = time.monotonic()
    with running() as base_url:
        console.print(f"simulator on {base_url}")
        result = run_build(config, {"run_id": run_id, "model__base_url": base_url})
    print_summary(result)
    console.print(f"took {time.monotonic() - started:.1f}s")


@app.command("sim-server")
def sim_server(
    port: int = typer.Option(8000),
    latency_ms: float = typer.Option(0.0, help="Added latency per request."),
    rate_429: float = typer.Option(0.0, help="Fraction of requests answered 429."),
    rate_500: float = typer.Option(0.0, help="Fraction answered 500."),
    rate_malformed: float = typer.Option(0.0, help="Fraction answered with garbled content."),
    rate_slow: float = typer.Option(0.0, help="Fraction that hang for --slow-s seconds."),
    slow_s: float = typer.Option(30.0),
    degrade_rate: float = typer.Option(0.0, help="Fraction of rejected answers made unhelpful."),
    seed: int = typer.Option(0),
):
    """Serve the OpenAI-compatible simulator on 127.0.0.1."""
    from pipeline.sim.server import SimOptions, serve

    console.print(f"prb simulator on http://127.0.0.1:{port}/v1")
    serve(
        port,
        SimOptions(
            latency_ms, rate_429, rate_500, rate_malformed, rate_slow, slow_s, degrade_rate, seed
        ),
    )


if __name__ == "__main__":
    app()
