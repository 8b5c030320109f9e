"""`prb personas …`: validate, add, stats and expand the persona library.

Heavy imports (rapidfuzz, openai) happen inside the commands so `prb --help` stays fast.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import typer
from rich.console import Console
from rich.markup import escape

from pipeline.cli.common import fail, guarded
from pipeline.cli.tables import coverage_table
from pipeline.config import ConfigError, PersonaConfig
from pipeline.paths import DATA
from pipeline.text import terminal

app = typer.Typer(help="Validate, extend and summarise the persona library.", no_args_is_help=True)
console = Console()
DEFAULTS = PersonaConfig()
# defaults are absolute (repository); paths typed by the user are relative to the cwd
LIBRARY = DATA / DEFAULTS.library[0]
QUESTIONS = DATA / DEFAULTS.questions[0]
TAXONOMY = DATA / "personas" / "taxonomy.yaml"


def shown(text: object) -> str:
    """Foreign text (an id, a category, a field) as rich markup shows it: never markup, never
    a terminal escape."""
    return escape(terminal(text))


def _print_issues(report) -> None:
    for issue in report.issues:
        colour = "red" if issue.severity == "error" else "yellow"
        console.print(f"[{colour}]{shown(issue)}[/{colour}]", highlight=False, soft_wrap=True)


@app.command()
@guarded
def validate(
    paths: list[Path] = typer.Argument(
        None, help="Files or folders (default: library + questions)."
    ),
    taxonomy: Path = typer.Option(TAXONOMY, help="Preference taxonomy (YAML)."),
):
    """Check persona and question files (schema and content); exit 1 on any error.

    Every problem is listed with file:line, record id and field. Nothing is changed.
    """
    from pipeline.personas import checks as persona_checks
    from pipeline.personas.files import PersonaFileError, load_taxonomy

    try:
        targets = [p.resolve() for p in paths or [LIBRARY, QUESTIONS]]
        report = persona_checks.validate(targets, load_taxonomy(taxonomy.resolve()))
    except PersonaFileError as e:
        raise fail(str(e), 2) from None
    _print_issues(report)
    summary = (
        f"{len(report.personas)} personas, {len(report.questions)} questions: "
        f"{len(report.errors)} errors, {len(report.warnings)} warnings"
    )
    if report.errors:
        console.print(f"[red]invalid[/red] — {summary}")
        raise typer.Exit(1)
    console.print(f"[green]valid[/green] — {summary}")


@app.command()
@guarded
def add(
    file: Path = typer.Argument(..., help="JSONL/YAML file of new personas (and questions)."),
    library: Path = typer.Option(LIBRARY, help="Persona library folder."),
    questions: Path = typer.Option(QUESTIONS, help="Question pool folder."),
    taxonomy: Path = typer.Option(TAXONOMY),
):
    """Validate FILE against the library, then append it to the library.

    Records go to the library file of their category. Any error refuses the whole file.
    """
    from pipeline.personas.files import PersonaFileError, load_taxonomy
    from pipeline.personas.library import add_file

    try:
        result = add_file(
            file.resolve(),
            library.resolve(),
            questions.resolve(),
            load_taxonomy(taxonomy.resolve()),
        )
    except PersonaFileError as e:
        raise fail(str(e), 2) from None
    _print_issues(result.report)
    if not result.written:
        console.print(f"[red]refused[/red] — {len(result.report.errors)} errors; nothing added")
        raise typer.Exit(1)
    for path, n in result.written.items():
        console.print(f"added {n} record(s) to {shown(path)}")


@app.command()
@guarded
def stats(
    library: Path = typer.Option(LIBRARY, help="Persona library folder or file."),
    questions: Path = typer.Option(QUESTIONS, help="Question pool folder or file."),
    taxonomy: Path = typer.Option(TAXONOMY),
    strict: bool = typer.Option(False, help="Exit 1 if any category × dimension cell is empty."),
):
    """Coverage table: personas per category × preference dimension (levels covered/levels)."""
    from pipeline.personas.files import (
        PersonaFileError,
        load_personas,
        load_questions,
        load_taxonomy,
    )
    from pipeline.personas.library import coverage

    try:
        tax = load_taxonomy(taxonomy.resolve())
        cov = coverage(load_personas([library.resolve()]), load_questions([questions.resolve()]))
    except PersonaFileError as e:
        raise fail(str(e), 2) from None
    console.print(coverage_table(cov, tax, shown))
    gaps = cov.gaps(tax)
    cells = len(cov.categories) * len(tax.dimensions)
    if gaps:
        console.print(
            f"[red]{len(gaps)} of {cells} cells uncovered:[/red] "
            + ", ".join(f"{shown(c)}×{shown(d)}" for c, d in gaps)
        )
        if strict:
            raise typer.Exit(1)
    else:
        console.print(f"all {cells} category × dimension cells covered")


@app.command()
@guarded
def expand(
    n: int = typer.Option(
        ..., "--n", min=1, max=100_000, help="How many candidate personas to write."
    ),
    config: Path = typer.Option(DATA / "configs" / "default.yaml", help="Run config."),
    base_url: str = typer.Option(None, help="OpenAI-compatible endpoint, e.g. http://host/v1."),
    category: list[str] = typer.Option(None, help="Only these categories (repeatable)."),
    seed: int = typer.Option(
        0, min=0, max=2**32 - 1, help="Seed for targets, seed personas and model calls."
    ),
    name: str = typer.Option(None, help="Candidates file name (default: a timestamp)."),
    out: Path = typer.Option(None, help="Exact output file (default under outputs/)."),
):
    """Ask the model for new personas aimed at under-covered preferences.

    Candidates are validated and deduplicated, then written to a review file under
    outputs/persona_candidates/, never into the library.
    """
    from pipeline.config import load_config
    from pipeline.personas.expand import expand as run_expand
    from pipeline.personas.files import PersonaFileError

    try:
        cfg = load_config(config, model__base_url=base_url)
        result = asyncio.run(
            run_expand(
                cfg,
                n,
                categories=category or None,
                seed=seed,
                name=name,
                out=out.resolve() if out else None,
            )
        )
    except (ConfigError, PersonaFileError) as e:
        raise fail(str(e), 2) from None
    for r in result.rejected:
        console.print(
            f"[yellow]rejected candidate {r['index']} ({r['category']}):[/yellow] "
            + "; ".join(r["reasons"]),
            highlight=False,
            soft_wrap=True,
        )
    calls = sum(u["calls"] for u in result.usage.values())
    hits = sum(u["cache_hits"] for u in result.usage.values())
    console.print(
        f"{len(result.accepted)} of {n} candidates written to {result.path} "
        f"({len(result.rejected)} rejected; {calls} model calls, {hits} from cache)"
    )
    console.print(f"review them, then: prb personas add {shown(result.path)}")
    if not result.accepted:
        raise typer.Exit(1)
