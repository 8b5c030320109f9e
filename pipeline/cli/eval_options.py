"""The options every `prb eval` subcommand shares, declared once (`shared`), and their
defaults: score, bon and rl each take a `Target` and add only their own."""

from __future__ import annotations

import functools
import inspect
import re
from dataclasses import dataclass
from pathlib import Path

import typer
from typer.core import TyperCommand

from pipeline.eval.models import help_text


def default_eval_dir(release: str) -> Path:
    """Next to a local release folder or file; under outputs/eval/ for hf:NAME."""
    from pipeline.paths import resolve_path

    if release.startswith("hf:"):
        name = re.sub(r"[^A-Za-z0-9._-]+", "-", release[3:]).strip(".-_") or "release"
        return resolve_path("outputs") / "eval" / name
    path = Path(release).resolve()
    return path.parent / ("eval" if path.is_dir() else f"eval-{path.stem}")


class KindsInHelp(TyperCommand):
    """Lists the reward-model kinds (plugins' included) in `--rm`'s help when the help is
    shown: a plugin loads on first use, never when prb starts."""

    def format_help(self, ctx, formatter) -> None:
        for param in self.params:
            if param.name == "rm" and param.help and KINDS in param.help:
                param.help = param.help.replace(KINDS, help_text())
        super().format_help(ctx, formatter)


KINDS = "{kinds}"


@dataclass
class Target:
    """What every `prb eval` subcommand is told: the release, the reward models, the user
    context they see, where to write and which endpoint to ask (declared once, below)."""

    release: str
    rm: list[str] | None
    context: str | None
    out: Path | None
    config: Path | None
    base_url: str | None
    sim: bool


def _option(name: str, annotation, default) -> inspect.Parameter:
    return inspect.Parameter(
        name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=annotation
    )


SHARED = [
    _option(
        "release",
        str,
        typer.Argument(
            ...,
            metavar="RELEASE",
            help="A release: a folder (hub layout or prb's), a JSONL/JSON/Parquet file, or "
            "hf:NAME.",
        ),
    ),
    _option(
        "rm",
        list[str],
        typer.Option(
            None,
            "--rm",
            help="Reward model, repeatable, as KIND[:ARG][,key=value...], e.g. "
            f"judge:context=none. Kinds: {KINDS}. Default: the baselines.",
        ),
    ),
    _option(
        "context",
        str,
        typer.Option(
            None,
            help="User context the models see: profile (the default), aspects, narrative or "
            "none. The published protocol: none.",
        ),
    ),
    _option("out", Path, typer.Option(None, help="Output folder (default: RELEASE/../eval).")),
    _option(
        "config",
        Path,
        typer.Option(
            None,
            help="Run config for endpoint, models and cache (default: default.yaml; demo.yaml "
            "with --sim).",
        ),
    ),
    _option("base_url", str, typer.Option(None, help="OpenAI-compatible endpoint for the judges.")),
    _option(
        "sim", bool, typer.Option(False, help="Start the bundled simulator and judge with it.")
    ),
]


def shared(fn):
    """The subcommand takes a `Target` first; its options are SHARED's, then its own."""
    own = [
        p.replace(kind=inspect.Parameter.KEYWORD_ONLY)
        for p in inspect.signature(fn).parameters.values()
        if p.name != "target"
    ]
    names = [p.name for p in SHARED]

    @functools.wraps(fn)
    def command(**kwargs):
        return fn(Target(**{n: kwargs.pop(n) for n in names}), **kwargs)

    command.__signature__ = inspect.Signature([*SHARED, *own])
    return command


BOOTSTRAP = typer.Option(1000, min=10, max=1_000_000, help="Bootstrap resamples for the 95% CIs.")
SEED = typer.Option(
    0, min=0, max=2**32 - 1, help="Seed for bootstrap and BoN ties (random: random:seed=N)."
)
ORACLE = typer.Option(None, help="The oracle judge model (default: the config's judge).")
