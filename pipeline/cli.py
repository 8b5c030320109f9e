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
    from pipeline.flows import build

    _exit_on_sigterm()
    path = str(config) if config else None
    if runner == "dask":
        from pipeline.shards import run_on_dask

        return run_on_dask(build, path, overrides, address=address, shards=shards)
    return asyncio.run(build(path, overrides, mode=mode, force_new_run=force_new_run))


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
    mode: str = typer.Option("online", help="online, or batch (OpenAI Batch API, cheaper)."),
    runner: str = typer.Option("default", help="default, or dask (shards on a Dask cluster)."),
    address: str = typer.Option(None, help="Dask scheduler address (default: a LocalCluster)."),
    shards: int = typer.Option(8, help="Shards per model stage with --runner dask."),
    force_new_run: bool = typer.Option(
        False, help="Move an existing run dir aside to <run>.old-N and start it afresh."
    ),
):
    """Run every stage of the pipeline for one run id (resuming it if it exists).

    Exit codes: 2 bad input or changed settings (see --force-new-run), 3 run dir locked by
    another run, 4 the endpoint refused the run (bad key, unknown model)."""
    if mode not in ("online", "batch") or runner not in ("default", "dask"):
        console.print(f"[red]unknown --mode {mode!r} or --runner {runner!r}[/red]")
        raise typer.Exit(2)
    overrides = {"run_id": run_id, "model__base_url": base_url}
    if debug:
        overrides["model__concurrency"] = 1
        import logging

        logging.basicConfig(level=logging.DEBUG)
    try:
        print_summary(run_build(config, overrides, mode, runner, address, shards, force_new_run))
    except ConfigError as e:
        from rich.markup import escape

        console.print(f"[red]config error:[/red] {escape(str(e))}", soft_wrap=True)
        raise typer.Exit(2) from None
    except Exception as e:
        from rich.markup import escape

        from pipeline.preflight import stop_message

        stop = stop_message(e)
        if stop is None:
            raise
        console.print(f"[red]build stopped:[/red] {escape(stop[0])}", soft_wrap=True)
        raise typer.Exit(stop[1]) from None


@app.command()
def demo(
    config: Path = typer.Option(REPO_ROOT / "configs" / "demo.yaml"),
    run_id: str = typer.Option(None),
):
    """Build a small benchmark offline against the bundled simulator."""
    from pipeline.sim.server import running

    started = time.monotonic()
    with running() as base_url:  # the simulator prints its address itself
        result = run_build(config, {"run_id": run_id, "model__base_url": base_url})
    print_summary(result)
    console.print(f"took {time.monotonic() - started:.1f}s")


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


def _annotation_run(run: str, outputs: Path | None):
    """(run dir, run id, annotation config) for RUN: a run folder or a run id under outputs/.
    The annotation settings come from the run's release manifest when there is one."""
    import json

    from pipeline.config import AnnotationConfig, resolve_path

    run_dir = Path(run) if Path(run).is_dir() else resolve_path(outputs or "outputs") / run
    if not run_dir.is_dir():
        console.print(f"[red]no run folder[/red] {run_dir}")
        raise typer.Exit(2)
    manifest = run_dir / "release" / "manifest.json"
    settings = {}
    if manifest.exists():
        settings = json.loads(manifest.read_text()).get("config", {}).get("annotation", {})
    return run_dir, run_dir.name, AnnotationConfig.model_validate(settings)


@annotate_app.command("export")
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
    from pipeline.annotation.layout import AnnotationError

    run_dir, run_id, cfg = _annotation_run(run, outputs)
    changes = {"batch_size": batch_size, "gold_per_batch": gold, "repeats_per_batch": repeats}
    changes |= {"seed": seed}
    cfg = cfg.model_copy(update={k: v for k, v in changes.items() if v is not None})
    ids = [p.strip() for p in pool.split(",") if p.strip()] if pool else None
    try:
        s = export(run_dir, run_id, cfg, annotators or cfg.annotators, ids, force=force)
    except AnnotationError as e:
        console.print(f"[red]export failed:[/red] {e}")
        raise typer.Exit(1) from None
    console.print(
        f"{s.batches} batch(es), {s.items} items: {s.pairs} pairs, {s.gold} gold, "
        f"{s.repeats} repeats; annotators: {', '.join(s.annotators)}"
    )
    console.print(f"give annotators: {s.batches_dir}")
    console.print(f"keep private:    {s.key_path}")


@annotate_app.command("import")
def annotate_import(
    run: str = typer.Argument(..., help="Run id (under --outputs) or run folder."),
    files: list[Path] = typer.Argument(..., help="Label Studio JSON, Argilla JSON or CSV files."),
    outputs: Path = typer.Option(None, help="Outputs folder (default: outputs/)."),
):
    """Check every labelled file, then un-blind and add the labels (all or nothing)."""
    from pipeline.annotation.importer import import_labels
    from pipeline.annotation.layout import AnnotationError

    run_dir, _, _ = _annotation_run(run, outputs)
    try:
        s = import_labels(run_dir, files)
    except AnnotationError as e:
        console.print(f"[red]import failed:[/red] {e}", highlight=False)
        raise typer.Exit(1) from None
    for name, (fmt, n) in s.by_file.items():
        console.print(f"{name}: {fmt}, {n} label(s)")
    console.print(f"imported {s.labels} label(s); rebuild the run to apply the verdicts")


@annotate_app.command("status")
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
        console.print(f"{run_dir}: not exported yet (prb annotate export)")
        raise typer.Exit(1)
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
def release_verify(release: Path = typer.Argument(..., help="A release folder.")):
    """Recompute checksums, check schema, card, duplicates and chosen ≠ rejected."""
    from pipeline.publish import verify

    problems = verify(release)
    if problems:
        console.print(f"[red]{release}: {len(problems)} problem(s)[/red]")
        for p in problems:
            console.print(f"  - {p}", markup=False, highlight=False, soft_wrap=True)
        raise typer.Exit(1)
    console.print(f"{release}: OK")


@release_app.command("diff")
def release_diff(
    old: Path = typer.Argument(..., help="The earlier release folder."),
    new: Path = typer.Argument(..., help="The later release folder."),
    as_json: bool = typer.Option(False, "--json", help="Print the diff as JSON."),
):
    """Pairs added, removed and changed between two releases (matched by pair id)."""
    import json

    from pipeline.publish import diff

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
def release_push(
    release: Path = typer.Argument(..., help="A release folder."),
    repo: str = typer.Option(..., help="Hub dataset repo, e.g. user/name."),
    private: bool = typer.Option(False, help="Create the repo as private."),
    allow_simulated: bool = typer.Option(False, help="Publish a simulator build anyway."),
):
    """Upload a verified release to the Hugging Face Hub (needs HF_TOKEN or `hf auth login`)."""
    from pipeline.publish import PushRefused, push

    try:
        url = push(release, repo, private=private, allow_simulated=allow_simulated)
    except PushRefused as e:
        console.print(f"[red]push refused:[/red] {e}", highlight=False, soft_wrap=True)
        raise typer.Exit(2) from None
    console.print(f"pushed: {url}")


@app.command()
def audit(
    run: str = typer.Argument(..., help="A run id under outputs/, or a run directory."),
    worst: int = typer.Option(10, help="How many worst pairs to list."),
):
    """Report on a run: funnel, score distributions, length ratios, persona-blind accuracy."""
    from pipeline.audit import AuditError, write_report

    try:
        out = write_report(run, worst_n=worst)
    except AuditError as e:
        console.print(f"[red]audit:[/red] {e}", highlight=False)
        raise typer.Exit(2) from None
    import json

    console.print((out / "summary.md").read_text(), markup=False, highlight=False)
    if json.loads((out / "audit.json").read_text())["warnings"]:
        console.print("[yellow]the audit has warnings: see the top of the report[/yellow]")
    console.print(f"report: {out / 'report.html'}")


@app.command()
def show(
    pair_id: str = typer.Argument(..., help="A pair id, e.g. prb-0123abcd…"),
    run: str = typer.Option(None, help="Run id or dir (default: the newest run holding it)."),
    as_json: bool = typer.Option(False, "--json", help="Print everything as JSON."),
):
    """Everything about one pair: persona, profile, aspects, answers, every judge call."""
    import json

    from pipeline.audit import AuditError
    from pipeline.show import collect, render

    try:
        info = collect(pair_id, run)
    except AuditError as e:
        console.print(f"[red]show:[/red] {e}", highlight=False)
        raise typer.Exit(2) from None
    if as_json:
        print(json.dumps(info, indent=2, ensure_ascii=False))
    else:
        render(info, console)


@app.command("eval")
def eval_command(
    args: list[str] = typer.Argument(
        ..., metavar="[bon] RELEASE", help="A release folder; `bon RELEASE` adds Best-of-N."
    ),
    rm: list[str] = typer.Option(
        None,
        "--rm",
        help="Reward model, repeatable: random, length, overlap, judge, judge-pair, hf:PATH; "
        "options after ':' as key=value, e.g. judge:context=none or judge-pair:model=NAME. "
        "Default: the three baselines.",
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
    bootstrap: int = typer.Option(1000, help="Bootstrap resamples for the 95% CIs."),
    seed: int = typer.Option(0, help="Seed for bootstrap and BoN ties (random: random:seed=N)."),
    n: int = typer.Option(4, help="Best-of-N: candidates per prompt."),
    candidates: Path = typer.Option(None, help="Best-of-N: JSONL of {id, candidates} to use."),
    generator: str = typer.Option(None, help="Best-of-N: generator model (default: config's)."),
    oracle: str = typer.Option(None, help="Best-of-N: oracle judge model (default: config's)."),
):
    """Score reward models on a release: accuracy with 95% CIs, leaderboard, plot, per-pair JSON."""
    import contextlib

    from pipeline.bon import CandidatesError
    from pipeline.config import load_config
    from pipeline.evaluate import ReleaseError, run
    from pipeline.llm import PermanentLLMError
    from pipeline.rewards import SpecError

    do_bon = len(args) == 2 and args[0] == "bon"
    if len(args) != 1 + do_bon:
        console.print("[red]usage:[/red] prb eval [bon] RELEASE [options]")
        raise typer.Exit(2)
    release = Path(args[-1])
    config = config or REPO_ROOT / "configs" / ("demo.yaml" if sim else "default.yaml")
    bon = {"n": n, "candidates": candidates, "generator": generator, "oracle": oracle}
    try:
        with contextlib.ExitStack() as stack:
            if sim:
                from pipeline.sim.server import running

                base_url = stack.enter_context(running())
            cfg = load_config(config, model__base_url=base_url)
            summary = asyncio.run(
                run(
                    release,
                    rm or ["random", "length", "overlap"],
                    cfg,
                    context=context,
                    out=out or release.resolve().parent / "eval",
                    n_resamples=bootstrap,
                    seed=seed,
                    bon=bon if do_bon else None,
                )
            )
    except (ConfigError, ReleaseError, SpecError, CandidatesError, PermanentLLMError) as e:
        console.print(f"[red]eval error:[/red] {e}", highlight=False)
        raise typer.Exit(2) from None
    _print_frame(summary["leaderboard"], "reward-model leaderboard (pairwise accuracy)")
    for name, path in summary["paths"].items():
        console.print(f"{name}: {path}", highlight=False)
    if do_bon:
        b = summary["bon"]
        _print_frame(b["leaderboard"], f"Best-of-{n} (oracle: {b['info']['oracle']})")
        c = b["correlation"]["win_rate"]
        console.print(
            f"accuracy vs BoN win rate over {c['models']} models: Spearman {c['spearman']:.3f}, "
            f"Kendall {c['kendall']:.3f}, NDCG {c['ndcg']:.3f}",
            soft_wrap=True,
        )
        for name, path in b["paths"].items():
            console.print(f"bon {name}: {path}", highlight=False)


def _print_frame(df, title: str) -> None:
    """A leaderboard frame as a table; per-category columns by their initials (A&E, ...)."""
    table = Table(title=title)
    cols = [c for c in df.columns if c != "context"]  # the model name ends in its context
    for col in cols:
        short = "&".join(w[0] for w in col[4:].split("_and_")) if col.startswith("acc_") else col
        table.add_column(short.replace("_", " "), justify="left" if col == "model" else "right")
    for row in df[cols].itertuples(index=False):
        table.add_row(*(f"{v:.3f}" if isinstance(v, float) else str(v) for v in row))
    (console if console.is_terminal else Console(width=160)).print(table)


from pipeline.personas.cli import app as personas_app  # noqa: E402  (light: typer + rich only)

app.add_typer(personas_app, name="personas")


if __name__ == "__main__":
    app()
