"""`prb eval`, `prb eval bon`, `prb eval rl`."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import typer
from typer.core import TyperCommand, TyperGroup

from pipeline.cli.common import console, errors, guarded, judge_config
from pipeline.cli.tables import print_correlation, print_frame, warn_release
from pipeline.eval.models import help_text


def default_eval_dir(release: str) -> Path:
    """Next to a local release folder or file; under outputs/eval/ for hf:NAME."""
    from pipeline.paths import resolve_path

    if release.startswith("hf:"):
        name = re.sub(r"[^A-Za-z0-9._-]+", "-", release[3:]).strip(".-_") or "release"
        return resolve_path("outputs") / "eval" / name
    path = Path(release).resolve()
    return path.parent / ("eval" if path.is_dir() else f"eval-{path.stem}")


class _KindsInHelp(TyperCommand):
    """Lists the reward-model kinds (plugins' included) in `--rm`'s help when the help is
    shown: a plugin loads on first use, never when prb starts."""

    def format_help(self, ctx, formatter) -> None:
        for param in self.params:
            if param.name == "rm" and param.help and KINDS in param.help:
                param.help = param.help.replace(KINDS, help_text())
        super().format_help(ctx, formatter)


class _ScoreByDefault(TyperGroup):
    """`prb eval RELEASE …` is `prb eval score RELEASE …`: a first word that names no
    subcommand (nor asks for help) is the release of the default one."""

    default = "score"

    def parse_args(self, ctx, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and args[0] not in ("--help", "-h"):
            args = [self.default, *args]
        return super().parse_args(ctx, args)


KINDS = "{kinds}"
app = typer.Typer(
    cls=_ScoreByDefault,
    no_args_is_help=True,
    help="Score reward models on a release (`prb eval RELEASE`: `score` is the default), "
    "with Best-of-N (`prb eval bon RELEASE`) or by fine-tuning a policy against each "
    "(`prb eval rl RELEASE --policy PATH`). Each subcommand's --help lists its options and "
    "the reward-model kinds.",
)
RELEASE = typer.Argument(
    ...,
    metavar="RELEASE",
    help="A release: a folder (hub layout or prb's), a JSONL/JSON/Parquet file, or hf:NAME.",
)
RM = typer.Option(
    None,
    "--rm",
    help="Reward model, repeatable, as KIND[:ARG][,key=value...], e.g. judge:context=none. "
    f"Kinds: {KINDS}. Default: the three baselines.",
)
CONTEXT = typer.Option(
    None,
    help="User context the models see: profile (the default), aspects, narrative or "
    "none. The published protocol: none.",
)
OUT = typer.Option(None, help="Output folder (default: RELEASE/../eval).")
CONFIG = typer.Option(
    None,
    help="Run config for endpoint, models and cache (default: default.yaml; demo.yaml with --sim).",
)
BASE_URL = typer.Option(None, help="OpenAI-compatible endpoint for the judges.")
SIM = typer.Option(False, help="Start the bundled simulator and judge with it.")
BOOTSTRAP = typer.Option(1000, min=10, max=1_000_000, help="Bootstrap resamples for the 95% CIs.")
SEED = typer.Option(
    0, min=0, max=2**32 - 1, help="Seed for bootstrap and BoN ties (random: random:seed=N)."
)
ORACLE = typer.Option(None, help="The oracle judge model (default: the config's judge).")


@app.command("score", cls=_KindsInHelp)
@guarded
def score_command(
    release: str = RELEASE,
    rm: list[str] = RM,
    context: str = CONTEXT,
    protocol: str = typer.Option(
        "prb",
        help="Scoring rules: prb (personalized: the user context, cut to fit, never the "
        "answer; judges see both A/B orders) or published (the public scorer's: the question "
        "only, one seeded A/B order, 8,192-token inputs; see pipeline/eval/protocol.py).",
    ),
    public_prompts: Path = typer.Option(
        None,
        help="--protocol published with judge-pair: your clone of the public Personalized "
        "RewardBench repository, whose prompts/pairwise_*.txt the judge is given.",
    ),
    out: Path = OUT,
    config: Path = CONFIG,
    base_url: str = BASE_URL,
    sim: bool = SIM,
    bootstrap: int = BOOTSTRAP,
    seed: int = SEED,
    blind: bool = typer.Option(
        True,
        help="After each LLM judge, the same judge without the "
        "user (context none): how much of its score needs the user.",
    ),
):
    """Score reward models on a release (the default: `prb eval RELEASE`).

    Accuracy with 95% CIs, the leaderboard, a plot and per-pair JSON."""
    where = (release, rm, context, out, config, base_url, sim, bootstrap, seed)
    run_eval(*where, protocol=protocol, public_prompts=public_prompts, blind=blind)


@app.command("bon", cls=_KindsInHelp)
@guarded
def bon_command(
    release: str = RELEASE,
    rm: list[str] = RM,
    context: str = CONTEXT,
    out: Path = OUT,
    config: Path = CONFIG,
    base_url: str = BASE_URL,
    sim: bool = SIM,
    bootstrap: int = BOOTSTRAP,
    seed: int = SEED,
    n: int = typer.Option(4, min=2, max=64, help="Candidates per prompt."),
    candidates: Path = typer.Option(None, help="JSONL of {id, candidates} to use."),
    generator: str = typer.Option(None, help="Generator model (default: the config's)."),
    oracle: str = ORACLE,
):
    """Score reward models, then Best-of-N with each.

    Each model picks one of N candidates per prompt, an oracle judge scores the picks, and
    the win rates are set beside the accuracies."""
    bon = {"n": n, "candidates": candidates, "generator": generator, "oracle": oracle}
    where = (release, rm, context, out, config, base_url, sim, bootstrap, seed)
    run_eval(*where, blind=False, bon=bon)  # BoN: only the models asked for, no blind variants


@app.command("rl", cls=_KindsInHelp)
@guarded
def rl_command(
    release: str = RELEASE,
    rm: list[str] = RM,
    context: str = CONTEXT,
    out: Path = OUT,
    config: Path = CONFIG,
    base_url: str = BASE_URL,
    sim: bool = SIM,
    policy: Path = typer.Option(
        ..., help="The policy to fine-tune (a Hugging Face causal LM folder)."
    ),
    steps: int = typer.Option(
        None, min=1, max=1_000_000, help="GRPO steps per reward model (default: rl.steps)."
    ),
    device: str = typer.Option(None, help="cpu or cuda (default: the config's rl.device)."),
    oracle: str = ORACLE,
):
    """Fine-tune a policy against each reward model (GRPO).

    On the release's training users; an oracle judge scores it on the held-out ones."""
    where = (release, rm, config, base_url, sim, context or "profile", out)
    eval_rl(*where, policy, steps, device, oracle)


def run_eval(
    release: str,
    rm: list[str],
    context: str | None,
    out: Path | None,
    config: Path | None,
    base_url: str | None,
    sim: bool,
    bootstrap: int,
    seed: int,
    *,
    blind: bool,
    protocol: str = "prb",
    public_prompts: Path | None = None,
    bon: dict | None = None,
) -> None:
    """`prb eval` and `prb eval bon`: score, print the leaderboards, exit 7 if most failed."""
    import contextlib

    from pipeline import progress
    from pipeline.eval.evaluate import run

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
                bon=bon,
                blind_variants=blind,
                protocol=protocol,
                public_prompts=public_prompts,
            )
        )
    warn_release(summary["warnings"])
    from pipeline.eval.protocol import PROTOCOLS

    rules = PROTOCOLS[protocol]
    print_frame(
        summary["leaderboard"],
        f"reward-model leaderboard (pairwise accuracy; protocol "
        f"{rules.name}, ties {rules.tie_rule})",
    )
    for name, path in summary["paths"].items():
        console.print(f"{name}: {path}", highlight=False)
    if bon:
        b = summary["bon"]
        print_frame(b["leaderboard"], f"Best-of-{bon['n']} (oracle: {b['info']['oracle']})")
        print_correlation("BoN win rate", b["correlation"]["win_rate"])
        for name, path in b["paths"].items():
            console.print(f"bon {name}: {path}", highlight=False)
    if summary["failed"]:
        from pipeline.errors import MostlyFailed

        said = "; ".join(f"{m}: {what}" for m, what in summary["failed"].items())
        raise MostlyFailed(
            f"most pairs failed for {said}: their accuracy says nothing; fix the "
            "endpoint and rerun the same command (answers given already come "
            "from the cache)"
        )


def eval_rl(release, rm, config, base_url, sim, context, out, policy, steps, device, oracle):
    import contextlib

    from pipeline.rl.train import run

    with contextlib.ExitStack() as stack:
        cfg = judge_config(stack, config, sim, base_url, rl__steps=steps, rl__device=device)
        where = (out or default_eval_dir(release)) / "rl"
        specs = rm or ["length", "overlap"]
        result = run(release, specs, cfg, policy, where, oracle=oracle, context=context)
    print_frame(
        result["table"],
        f"RL ({result['settings']['algorithm']}, "
        f"{result['settings']['steps']} steps) against each reward model",
    )
    print_correlation("RL gain", result["correlation"])
    for name, path in result["paths"].items():
        console.print(f"rl {name}: {path}", highlight=False)
