"""`prb eval`, `prb eval bon`, `prb eval rl`."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import typer
from typer.core import TyperCommand

from pipeline.cli.common import app, console, errors, fail, guarded, judge_config
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


KINDS = "{kinds}"


@app.command("eval", cls=_KindsInHelp)
@guarded
def eval_command(
    args: list[str] = typer.Argument(
        ...,
        metavar="[bon|rl] RELEASE",
        help="A release folder; `bon RELEASE` adds Best-of-N; "
        "`rl RELEASE --policy PATH` fine-tunes the policy against each reward model (GRPO).",
    ),
    rm: list[str] = typer.Option(
        None,
        "--rm",
        help="Reward model, repeatable, as KIND[:ARG][,key=value...], e.g. judge:context=none. "
        f"Kinds: {KINDS}. Default: the three baselines.",
    ),
    context: str = typer.Option(
        None,
        help="User context the models see: profile (the default), aspects, narrative or "
        "none. The published protocol: none.",
    ),
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
    out: Path = typer.Option(None, help="Output folder (default: RELEASE/../eval)."),
    config: Path = typer.Option(
        None,
        help="Run config for endpoint, models and cache (default: default.yaml; demo.yaml "
        "with --sim).",
    ),
    base_url: str = typer.Option(None, help="OpenAI-compatible endpoint for the judges."),
    sim: bool = typer.Option(False, help="Start the bundled simulator and judge with it."),
    bootstrap: int = typer.Option(
        1000, min=10, max=1_000_000, help="Bootstrap resamples for the 95% CIs."
    ),
    seed: int = typer.Option(
        0, min=0, max=2**32 - 1, help="Seed for bootstrap and BoN ties (random: random:seed=N)."
    ),
    n: int = typer.Option(4, min=2, max=64, help="Best-of-N: candidates per prompt."),
    candidates: Path = typer.Option(None, help="Best-of-N: JSONL of {id, candidates} to use."),
    generator: str = typer.Option(None, help="Best-of-N: generator model (default: config's)."),
    oracle: str = typer.Option(None, help="Best-of-N: oracle judge model (default: config's)."),
    blind: bool = typer.Option(
        True,
        help="After each LLM judge, the same judge without the "
        "user (context none): how much of its score needs the user.",
    ),
    policy: Path = typer.Option(
        None, help="RL: the policy to fine-tune (a Hugging Face model folder)."
    ),
    steps: int = typer.Option(
        None,
        min=1,
        max=1_000_000,
        help="RL: GRPO steps per reward model (default: the config's rl.steps).",
    ),
    device: str = typer.Option(None, help="RL: cpu or cuda (default: the config's rl.device)."),
):
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
        if protocol != "prb":
            raise fail("prb eval rl runs under prb's protocol: drop --protocol", 2)
        where = (args[1], rm, config, base_url, sim, context or "profile", out)
        eval_rl(*where, policy, steps, device, oracle)
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
    if do_bon:
        b = summary["bon"]
        print_frame(b["leaderboard"], f"Best-of-{n} (oracle: {b['info']['oracle']})")
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
