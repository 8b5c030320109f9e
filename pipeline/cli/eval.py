"""`prb eval`, `prb eval bon`, `prb eval rl`."""

from __future__ import annotations

import asyncio
from pathlib import Path

import typer
from typer.core import TyperGroup

from pipeline.cli.common import console, errors, guarded, judge_config
from pipeline.cli.eval_options import (
    BOOTSTRAP,
    ORACLE,
    SEED,
    KindsInHelp,
    Target,
    default_eval_dir,
    shared,
)
from pipeline.cli.tables import print_correlation, print_frame, warn_release


class _ScoreByDefault(TyperGroup):
    """`prb eval RELEASE …` is `prb eval score RELEASE …`: a first word that names no
    subcommand (nor asks for help) is the release of the default one."""

    default = "score"

    def parse_args(self, ctx, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and args[0] not in ("--help", "-h"):
            args = [self.default, *args]
        return super().parse_args(ctx, args)


app = typer.Typer(
    cls=_ScoreByDefault,
    no_args_is_help=True,
    help="Score reward models on a release (`prb eval RELEASE`: `score` is the default), "
    "with Best-of-N (`prb eval bon RELEASE`) or by fine-tuning a policy against each "
    "(`prb eval rl RELEASE --policy PATH`). Each subcommand's --help lists its options and "
    "the reward-model kinds.",
)


@app.command("score", cls=KindsInHelp)
@guarded
@shared
def score_command(
    target: Target,
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
    run_eval(target, bootstrap, seed, protocol=protocol, public_prompts=public_prompts, blind=blind)


@app.command("bon", cls=KindsInHelp)
@guarded
@shared
def bon_command(
    target: Target,
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
    run_eval(
        target, bootstrap, seed, blind=False, bon=bon
    )  # BoN: only the models asked for, no blind variants


@app.command("rl", cls=KindsInHelp)
@guarded
@shared
def rl_command(
    target: Target,
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
    eval_rl(target, policy, steps, device, oracle)


def run_eval(
    target: Target,
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
        cfg = judge_config(stack, target.config, target.sim, target.base_url)
        stack.enter_context(progress.showing(errors))
        summary = asyncio.run(
            run(
                target.release,
                target.rm or ["random", "length", "overlap"],
                cfg,
                context=target.context,
                out=target.out or default_eval_dir(target.release),
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


def eval_rl(target: Target, policy: Path, steps: int | None, device: str | None, oracle) -> None:
    import contextlib

    from pipeline.rl.train import run

    t = target
    with contextlib.ExitStack() as stack:
        cfg = judge_config(stack, t.config, t.sim, t.base_url, rl__steps=steps, rl__device=device)
        where = (t.out or default_eval_dir(t.release)) / "rl"
        specs = t.rm or ["length", "overlap"]
        context = t.context or "profile"
        result = run(t.release, specs, cfg, policy, where, oracle=oracle, context=context)
    print_frame(
        result["table"],
        f"RL ({result['settings']['algorithm']}, "
        f"{result['settings']['steps']} steps) against each reward model",
    )
    print_correlation("RL gain", result["correlation"])
    for name, path in result["paths"].items():
        console.print(f"rl {name}: {path}", highlight=False)
