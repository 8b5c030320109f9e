"""Tables and lines the commands print: the funnel, leaderboards, correlations, warnings."""

from __future__ import annotations

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from pipeline.cli.common import console, errors
from pipeline.text import terminal


def print_funnel(rows: list[dict]) -> None:
    table = Table(title="funnel")
    table.add_column("stage")
    table.add_column("count", justify="right")
    table.add_column("why records were lost (or rewritten)")
    for row in rows:
        lost = ", ".join(f"{k} {v}" for k, v in row.get("reasons", {}).items())
        if row.get("changed"):
            changed = ", ".join(f"{k} {v}" for k, v in row["changed"].items())
            lost = f"{lost}, {changed}" if lost else changed
        table.add_row(row["stage"], str(row["count"]), lost)
    console.print(table)


def warn_release(warnings: list[str]) -> None:
    """What the release itself is missing (duplicates, empty or identical answers)."""
    for w in warnings:
        errors.print(
            f"[yellow]warning:[/yellow] {escape(terminal(w))}", highlight=False, soft_wrap=True
        )


def print_correlation(downstream: str, c: dict) -> None:
    show = lambda x: "n/a" if x != x else f"{x:.3f}"  # noqa: E731  (NaN: nothing to rank by)
    console.print(
        f"accuracy vs {downstream} over {c['models']} models: Spearman {show(c['spearman'])}, "
        f"Kendall {show(c['kendall'])}, NDCG {show(c['ndcg'])}",
        soft_wrap=True,
    )


HEADERS = {
    "longer_preferred": "longer",
    "chosen_as_a": "as A",
    "chosen_as_b": "as B",
    "needs_user": "user adds",
    "contexts_cut": "cut",
    "cut_tokens_mean": "tok/cut",
    "answers_cut": "answers cut",
    "tie_rule": "ties",
}


def print_frame(df, title: str) -> None:
    """A leaderboard frame as a table; per-category columns by their initials (A&E, ...)."""
    table = Table(title=title)
    cols = [c for c in df.columns if c != "context"]  # the model name ends in its context
    # nothing cut: the truncation columns say nothing here (the CSV and Markdown keep them)
    cols = [
        c
        for c in cols
        if c not in ("contexts_cut", "cut_tokens_mean", "answers_cut", "unparsed")
        or not (df[c].fillna(0) == 0).all()
    ]
    # one protocol: the title names it and its tie rule (the CSV and Markdown keep the columns)
    cols = [c for c in cols if c not in ("protocol", "tie_rule") or df[c].nunique() > 1]
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
        return terminal(v)

    for row in df[cols].itertuples(index=False):
        table.add_row(*(cell(v) for v in row))
    (console if console.is_terminal else Console(width=160)).print(table)


def coverage_table(cov, tax, shown) -> Table:
    """`prb personas stats`: personas per category × preference dimension (levels covered)."""
    table = Table(title="persona coverage: personas holding a preference (levels covered/levels)")
    table.add_column("dimension")
    for c in cov.categories:
        table.add_column(shown(c), justify="right")
    for d in tax.dimensions:
        cells = []
        for c in cov.categories:
            n, held = cov.cells[c, d], len(cov.levels.get((c, d), ()))
            text = f"{n} ({held}/{len(tax.levels[d])})"
            cells.append(text if n else f"[red]{text}[/red]")
        table.add_row(shown(d), *cells)
    table.add_section()
    table.add_row("personas", *(str(cov.personas[c]) for c in cov.categories))
    table.add_row("questions", *(str(cov.questions[c]) for c in cov.categories))
    table.add_row("asked by 2+ personas", *(str(cov.shared[c]) for c in cov.categories))
    return table
