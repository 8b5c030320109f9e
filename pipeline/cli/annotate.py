"""`prb annotate export|import|status`."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.table import Table

from pipeline.cli.common import app, console, fail, finite, guarded

annotate_app = typer.Typer(help="Human annotation: export batches, import labels, status.")
app.add_typer(annotate_app, name="annotate")


def annotation_run(run: str, outputs: Path | None, **changes):
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
    elif "/" in run or "\\" in run:  # a path, not a run id: say it is not there
        raise PrbError(f"{run}: no such run folder; give a run id under outputs/ or a folder")
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
    batch_size: int = typer.Option(
        None, min=1, max=100_000, help="Pairs per batch (default: the run's config)."
    ),
    annotators: int = typer.Option(
        None, min=1, max=1000, help="Annotators per batch (default: the config)."
    ),
    pool: str = typer.Option(None, help="Comma-separated annotator ids to assign round-robin."),
    gold: int = typer.Option(None, min=0, max=100_000, help="Gold items per batch."),
    repeats: int = typer.Option(
        None, min=0, max=100_000, help="Repeated (A/B-swapped) items per batch."
    ),
    seed: int = typer.Option(
        None, min=0, max=2**32 - 1, help="Shuffle seed (default: annotation.seed)."
    ),
    outputs: Path = typer.Option(None, help="Outputs folder (default: outputs/)."),
    force: bool = typer.Option(False, help="Replace an earlier export with no labels yet."),
):
    """Write blinded batches (Label Studio, Argilla, CSV) and the private key."""
    from pipeline.annotation.export import export
    from pipeline.records import FilterRecord
    from pipeline.stages import written

    run_dir, run_id, cfg = annotation_run(
        run,
        outputs,
        batch_size=batch_size,
        gold_per_batch=gold,
        repeats_per_batch=repeats,
        seed=seed,
        annotators=annotators,
    )
    ids = [p.strip() for p in pool.split(",") if p.strip()] if pool else None
    s = export(written(FilterRecord, run_dir), run_id, cfg, cfg.annotators, ids, force=force)
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

    run_dir, _, _ = annotation_run(run, outputs)
    s = import_labels(run_dir, files)
    for name, (fmt, n) in s.by_file.items():
        console.print(f"{name}: {fmt}, {n} label(s)")
    console.print(f"imported {s.labels} label(s); rebuild the run to apply the verdicts")


@annotate_app.command("status")
@guarded
def annotate_status(
    run: str = typer.Argument(..., help="Run id (under --outputs) or run folder."),
    exclude_below: float = typer.Option(
        None,
        min=0.0,
        max=1.0,
        callback=finite,
        help="Leave out annotators whose gold accuracy is below this (0-1).",
    ),
    outputs: Path = typer.Option(None, help="Outputs folder (default: outputs/)."),
    as_json: bool = typer.Option(False, "--json", help="Print the figures as JSON."),
):
    """Progress per batch, agreement, gold accuracy and self-consistency per annotator."""
    from pipeline.annotation.layout import load_key, load_labels
    from pipeline.annotation.stats import summary

    run_dir, _, cfg = annotation_run(run, outputs)
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
