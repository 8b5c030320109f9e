"""`prb release verify|diff|push`."""

from __future__ import annotations

from pathlib import Path

import typer

from pipeline.cli.common import app, console, guarded
from pipeline.text import terminal

release_app = typer.Typer(help="Check, compare and publish release folders.")
app.add_typer(release_app, name="release")


@release_app.command("verify")
@guarded
def release_verify(release: Path = typer.Argument(..., help="A release folder.")):
    """Recompute checksums, check schema, card, duplicates and chosen ≠ rejected."""
    from pipeline.release.publish import verify

    problems = verify(release)
    if problems:
        console.print(f"{terminal(release)}: {len(problems)} problem(s)", style="red")
        for p in problems:
            console.print(f"  - {terminal(p)}", markup=False, highlight=False, soft_wrap=True)
        raise typer.Exit(1)
    console.print(f"{terminal(release)}: OK", markup=False, highlight=False)


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
            console.print(terminal(line), markup=False, highlight=False, soft_wrap=True)


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
