"""`prb build` and `prb demo`."""

from __future__ import annotations

import shlex
import time
from pathlib import Path

import typer

from pipeline.cli.common import DATA, app, console, errors, fail, guarded
from pipeline.cli.tables import print_funnel


def run_build(config, overrides: dict, *args, **kwargs) -> dict:
    """The build, printing where the records went when nothing was released."""
    from pipeline.config import load_config
    from pipeline.errors import NothingReleased
    from pipeline.release.manifest import read_funnel
    from pipeline.run.command import run_build as run

    try:
        return run(config, overrides, errors, *args, **kwargs)
    except NothingReleased:
        run_dir = load_config(str(config) if config else None, **overrides).run_dir
        print_funnel(read_funnel(run_dir) or [])  # where the records went, then the line
        raise


def print_summary(result: dict, resume: str) -> None:
    """The funnel, calls and release of a finished build; exit 7 (after printing them) when
    the endpoint's failures cost more pairs than were released."""
    from pipeline.errors import MostlyFailed, is_transient
    from pipeline.release.manifest import read_funnel

    funnel = read_funnel(result["run_dir"]) or []
    print_funnel(funnel)
    calls = sum(u["calls"] for u in result["usage"].values())
    hits = sum(u["cache_hits"] for u in result["usage"].values())
    console.print(f"model calls: {calls} sent, {hits} from cache")
    console.print(f"release: {result['release_dir']}")
    lost = {}  # records the endpoint cost: failures a resume asks again, and refusals
    for row in funnel:
        for reason, n in row.get("reasons", {}).items():
            if is_transient(reason) or reason.endswith("_bad_request"):
                lost[reason] = lost.get(reason, 0) + n
    released = funnel[-1]["count"] if funnel else 0
    if sum(lost.values()) > released:
        why = ", ".join(f"{k} {v}" for k, v in sorted(lost.items(), key=lambda kv: -kv[1]))
        refused = any(k.endswith("_bad_request") for k in lost)
        then = (
            "the endpoint refused requests (HTTP 400: a context window smaller than the "
            "prompts, or a model it does not serve): fix the endpoint or model.context_window "
            "and build a new run"
            if refused
            else f"fix the endpoint, then {resume} to ask again for them"
        )
        raise MostlyFailed(
            f"{sum(lost.values())} records were lost to endpoint errors ({why}) and only "
            f"{released} pairs released: {then}"
        )


@app.command()
@guarded
def build(
    config: Path = typer.Option(DATA / "configs" / "default.yaml", help="Run config (YAML)."),
    run_id: str = typer.Option(None, help="Run id; reusing one resumes that run."),
    base_url: str = typer.Option(None, help="OpenAI-compatible endpoint, e.g. http://host/v1."),
    debug: bool = typer.Option(False, help="Sequential calls (concurrency 1), verbose logs."),
    mode: str = typer.Option("online", help="online, or batch (OpenAI Batch API, cheaper)."),
    runner: str = typer.Option("default", help="default, or dask (shards on a Dask cluster)."),
    address: str = typer.Option(None, help="Dask scheduler address (default: a LocalCluster)."),
    shards: int = typer.Option(
        8, min=1, max=1024, help="Shards per model stage with --runner dask."
    ),
    force_new_run: bool = typer.Option(
        False, help="Move an existing run dir aside to <run>.old-N and start it afresh."
    ),
    accept_weak_judge: bool = typer.Option(
        False, help="Build on when the judge fails qualification; the release says so."
    ),
):
    """Run every stage of the pipeline for one run id (resuming it if it exists).

    Exit codes: 2 bad input or changed settings (see --force-new-run), 3 run dir locked by
    another run, 4 the endpoint refused the run (bad key, unknown model), 5 no pair released,
    6 disk full, 7 most calls failed, 9 the judge failed qualification (see
    --accept-weak-judge), 130 interrupted, 143 terminated."""
    if mode not in ("online", "batch") or runner not in ("default", "dask"):
        raise fail(
            f"unknown --mode {mode!r} or --runner {runner!r}: use online|batch, default|dask", 2
        )
    if mode == "batch" and runner == "dask":
        raise fail("--mode batch and --runner dask do not combine: pick one", 2)
    overrides = {"run_id": run_id, "model__base_url": base_url}
    if accept_weak_judge:
        overrides["qualification__accept_weak_judge"] = True
    if debug:
        overrides["model__concurrency"] = 1
        import logging

        logging.basicConfig(level=logging.DEBUG)
    # the command that resumes: every option that chose what and where to build, given again
    again = [("--config", config), ("--base-url", base_url)]
    again += [("--mode", mode if mode != "online" else None), ("--runner", runner)]
    again += [("--address", address), ("--shards", shards if runner == "dask" else None)]
    words = ["prb", "build"] + [
        w for flag, v in again if v is not None and v != "default" for w in (flag, str(v))
    ]
    resume = f"rerun `{shlex.join(words)} --run-id {{run_id}}`"
    result = run_build(config, overrides, mode, runner, address, shards, force_new_run, resume)
    print_summary(result, resume.replace("{run_id}", Path(result["run_dir"]).name))


# the demo starts its own model server (the simulator, the local model): `prb build` alone would
# find none, so an interrupted demo is resumed by running it again
AGAIN = "rerun the same `prb demo`"


@app.command()
@guarded
def demo(
    config: Path = typer.Option(
        None, help="Default: configs/demo.yaml (configs/local.yaml with --local)."
    ),
    run_id: str = typer.Option(None),
    local: bool = typer.Option(
        False, help="On a real local model (`make demo-local`), not the simulator."
    ),
    local_model: str = typer.Option(
        None, help="With --local: qwen2.5-1.5b (default: the config's model.local) or smollm2-135m."
    ),
    recipe: str = typer.Option(
        None,
        help="Build the bundled LaMP-QA-format users "
        "(personas/lamp-qa) with this recipe: published or prb "
        "(configs/demo-lamp-<recipe>.yaml).",
    ),
    accept_weak_judge: bool = typer.Option(
        False, help="Build on when the judge fails qualification; the release says so."
    ),
):
    """Build a small benchmark offline: against the bundled simulator, or a real local model.
    A judge that fails qualification stops the build with exit code 9 (a 135M local model can)
    unless --accept-weak-judge."""
    from pipeline.config import recipes

    started = time.monotonic()
    weak = {"qualification__accept_weak_judge": True} if accept_weak_judge else {}
    if recipe is not None:
        if recipe not in recipes():
            raise fail(f"unknown --recipe {recipe!r}: use one of {', '.join(recipes())}", 2)
        if config is not None or local:
            raise fail(
                "--recipe picks the demo's config and runs on the simulator: drop --config/--local",
                2,
            )
        config = DATA / "configs" / f"demo-lamp-{recipe}.yaml"
    if local_model is not None and not local:
        raise fail("--local-model names the model of --local: add --local", 2)
    from pipeline.config import load_config
    from pipeline.run.rundir import RunLock

    config = config or DATA / "configs" / ("local.yaml" if local else "demo.yaml")
    given = {"run_id": run_id, **weak} | ({"model__local": local_model} if local else {})
    # a bad config, and a demo of this run id already building, say so before a server starts
    cfg = load_config(str(config), **given)
    RunLock(cfg.run_dir).check()
    if local:
        from pipeline.llm import local as served

        m, slots = cfg.model, cfg.model.local_slots or served.SLOTS
        threads = {"threads": m.local_threads, "batch_threads": m.local_batch_threads}
        with served.running(m.local, slots=slots, **threads) as (url, alias, digest):
            console.print(f"local model {alias} on {url} (sha256 {digest}; {slots} slot(s))")
            result = run_build(
                config, given | served.overrides(url, alias, digest, slots), resume=AGAIN
            )
    else:
        from pipeline.run.rundir import FingerprintError
        from pipeline.sim.server import running

        overrides = dict(given)
        with running() as base_url:  # the simulator prints its address itself
            overrides["model__base_url"] = base_url
            try:
                result = run_build(config, overrides, resume=AGAIN)
            except FingerprintError:  # a demo from an older prb: keep it aside, build anew
                console.print(
                    "the demo run was made by another version of prb or config: "
                    "moving it aside and building the demo again"
                )
                result = run_build(config, overrides, force_new_run=True, resume=AGAIN)
    try:
        print_summary(result, "rerun the same `prb demo`")
    finally:
        console.print(f"took {time.monotonic() - started:.1f}s")
