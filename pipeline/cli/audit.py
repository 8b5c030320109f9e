"""`prb audit`, `prb compare`, `prb show`."""

from __future__ import annotations

import re
from pathlib import Path

import typer
from rich.table import Table

from pipeline.cli.common import app, console, errors, guarded, judge_config
from pipeline.cli.tables import warn_release


@app.command()
@guarded
def audit(
    target: str = typer.Argument(
        ...,
        metavar="RUN|RELEASE",
        help="A run id under outputs/ or a run directory; or any release in the public schema: "
        "a release folder (hub layout or prb's), a JSONL/JSON/Parquet file, or hf:NAME.",
    ),
    worst: int = typer.Option(10, min=0, max=100_000, help="How many worst pairs to list (runs)."),
    out: Path = typer.Option(
        None, help="Report folder for a release (default: outputs/audit/<release name>)."
    ),
    judge: bool = typer.Option(
        False,
        "--judge",
        help="Also the judge probes (persona-aware, "
        "persona-blind, counterfactual, the 2x2 swap: a pairwise judge in both orders): needs "
        "an endpoint, or --sim.",
    ),
    config: Path = typer.Option(
        None,
        help="Run config for the judge's endpoint, model and "
        "cache (default: default.yaml; demo.yaml with --sim).",
    ),
    base_url: str = typer.Option(None, help="OpenAI-compatible endpoint for the judge."),
    model: str = typer.Option(None, help="Judge model (default: the config's judge)."),
    sim: bool = typer.Option(False, help="Judge with the bundled simulator (implies --judge)."),
    position_free: bool = typer.Option(
        False,
        "--position-free",
        help="The judge probes by a "
        "position-free judge: each answer alone, P(yes) from "
        "logprobs (implies --judge; the endpoint must give "
        "logprobs).",
    ),
    null: int = typer.Option(
        0,
        "--null",
        min=0,
        max=1000,
        help="Also the null test: the answer-only "
        "probes on N copies relabelled by a fair coin per pair (each "
        "should read 0.5), with a permutation p-value per probe; ~N times "
        "the probes' time (20 is a good N; at most 1000).",
    ),
):
    """Report on a run (funnel, each check's figures, the probes) or on any release (the
    probes, in three families: leakage without the user, shallow user-aware floors, and with
    --judge the judge probes)."""
    import contextlib
    import json

    from pipeline import progress

    with contextlib.ExitStack() as stack:
        if null:  # the null test takes N times the probes' time: progress and an ETA
            stack.enter_context(progress.showing(errors))
        judged = None
        if judge or sim or position_free:
            cfg = judge_config(stack, config, sim, base_url)
            if base_url and not sim:
                check_served(cfg, model or cfg.model.judge, base_url)
            judged = (cfg, model, "position-free" if position_free else "pairwise")
        out = audit_target(target, worst, out, judged, null)
    console.print((out / "summary.md").read_text(), markup=False, highlight=False)
    if json.loads((out / "audit.json").read_text())["warnings"]:
        console.print("[yellow]the audit has warnings: see the top of the report[/yellow]")
    console.print(f"report: {out / 'report.html'}")


def check_served(cfg, judge: str, base_url: str) -> None:
    """The judge's answers are cached under its model name, and a server that ignores the
    name (llama.cpp's) answers any: a judge the endpoint does not list would cache another
    model's verdicts under it (stop 56: the config's "prb-sim-1" for the 1.5B's)."""
    from pipeline.errors import PrbError
    from pipeline.llm.backends.openai import served_models

    served = served_models(cfg.model)
    if served and judge not in served:
        shown = ", ".join(served[:5]) + (f" and {len(served) - 5} more" if len(served) > 5 else "")
        raise PrbError(
            f"--base-url {base_url} serves {shown}, not the judge {judge!r}: give --model "
            f"with the served name (the judge's answers are cached under it)"
        )


def audit_target(target: str, worst: int, out: Path | None, judged, null: int = 0) -> Path:
    from pipeline.audit.report import is_run, write_release_report, write_report
    from pipeline.errors import safe_name
    from pipeline.paths import resolve_path

    if is_run(target):
        return write_report(target, worst_n=worst, judge=judged, null=null)
    parts = [p for p in Path(target.removeprefix("hf:")).parts if p not in ("/", ".", "..")]
    parts = [*parts[-2:-1], *(Path(p).stem for p in parts[-1:])]  # demo/release -> demo-release
    name = re.sub(r"[^A-Za-z0-9._-]+", "-", "-".join(parts)).strip(".-_") or "release"
    out = out or resolve_path("outputs") / "audit" / safe_name(name, "report name")
    return write_release_report(target, out, judged, null)


@app.command()
@guarded
def compare(
    release_a: str = typer.Argument(
        ..., metavar="RELEASE_A", help="A release (folder, JSONL/JSON/Parquet file, or hf:NAME)."
    ),
    release_b: str = typer.Argument(..., metavar="RELEASE_B", help="Another release."),
    out: Path = typer.Option(None, help="Report folder (default: outputs/compare/<A>-vs-<B>)."),
):
    """Two releases side by side, on the pairs they share (same user and question) and whole:
    lengths, the probes (leakage, floors), each check's figures, keep rates."""
    from pipeline.audit.compare import compare as run_compare
    from pipeline.audit.compare import release_name
    from pipeline.errors import safe_name
    from pipeline.paths import resolve_path

    if out is None:
        pair = f"{release_name(release_a)}-vs-{release_name(release_b)}"
        name = re.sub(r"[^A-Za-z0-9._-]+", "-", pair)
        out = (
            resolve_path("outputs")
            / "compare"
            / safe_name(name.strip(".-_") or "compare", "report name")
        )
    report = run_compare(release_a, release_b, out)
    for side in ("a", "b"):
        warn_release([f"{side.upper()}: {w}" for w in report[side]["warnings"]])
    t = Table(
        title=f"A {report['a']['name']} vs B {report['b']['name']}: "
        f"{report['shared']} shared pairs (same {report['matched_on']})"
    )
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

    from pipeline.audit.show import collect, render

    info = collect(pair_id, run)
    if as_json:
        print(json.dumps(info, indent=2, ensure_ascii=False))
    else:
        render(info, console)
