"""`prb eval rl`: does a reward model's accuracy on the benchmark predict how much RL against it
helps the users it was built for?

For each reward model: a copy of the policy is fine-tuned with TRL's GRPO (TRL 1.16 ships no
PPO trainer) on the questions of the training users, its reward that model's score of each
sampled answer for the user's profile and question, asked through `prb reward-server` over
HTTP with the TRL adapter (the path an RL engine takes). Then the trained policy answers the
held-out users' questions (greedy) and the Best-of-N oracle grades each answer on that user's
rubric aspects (0/1/2 each, scaled to 0-1). A model's RL gain is the trained policy's mean
grade minus the untrained one's. Spearman, Kendall and NDCG between benchmark accuracy and RL
gain come from the same code as Best-of-N (`pipeline/eval/bon.py:correlation`), computed on
the trained policies' grades (ordered exactly as the gains; NDCG needs non-negative gains).

The policy prompt is Best-of-N's (`prompts/bon_candidate.yaml`), so both downstream checks ask
the policy the same thing.
"""

from __future__ import annotations

import asyncio
import json
import math
import random
import shutil
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from pipeline.errors import PrbError
from pipeline.llm.prompts import load_prompt
from pipeline.release.load import load_rows, user_key


class RLError(PrbError, ValueError):
    """An RL evaluation that cannot run as asked; the message says why."""


def split_users(rows: list[dict], held_out: float, seed: int) -> tuple[list[dict], list[dict]]:
    """(train, held-out) rows; a user's questions are all on one side."""
    users = sorted({user_key(r) for r in rows})
    if len(users) < 2:
        raise RLError(
            f"{len(users)} user in the release: RL needs users to train on and others to grade on"
        )
    random.Random(f"rl:{seed}").shuffle(users)
    k = min(len(users) - 1, max(1, round(len(users) * held_out)))
    held = set(users[:k])
    return [r for r in rows if user_key(r) not in held], [r for r in rows if user_key(r) in held]


def policy_prompt(row: dict, tokenizer, word_budget: int = 100):
    """The policy's input: conversational if its tokenizer has a chat template, else text."""
    messages = load_prompt("bon_candidate").render(
        profile=row["profile"], question=row["question"], word_budget=word_budget
    )
    if getattr(tokenizer, "chat_template", None):
        return messages
    return "\n\n".join(m["content"] for m in messages) + "\n\nAnswer:"


def generate(model_dir: Path, rows: list[dict], max_new_tokens: int, device: str) -> dict:
    """Greedy answers of a policy to each row's question: {id: text}."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir).to(device).eval()
    out = {}
    for row in rows:
        prompt = policy_prompt(row, tokenizer)
        if isinstance(prompt, list):  # transformers 5 returns a BatchEncoding here
            encoded = tokenizer.apply_chat_template(
                prompt, add_generation_prompt=True, return_tensors="pt", return_dict=True
            )
            ids = encoded["input_ids"]
        else:
            ids = tokenizer(prompt, return_tensors="pt").input_ids
        ids = ids.to(device)
        with torch.no_grad():
            new = model.generate(
                ids,
                max_new_tokens=max_new_tokens,
                do_sample=False,
                pad_token_id=tokenizer.pad_token_id,
            )[0, ids.shape[1] :]
        out[row["id"]] = tokenizer.decode(new, skip_special_tokens=True).strip() or "(empty)"
    return out


def train(policy: Path, url: str, rows: list[dict], settings, work: Path) -> tuple[Path, dict]:
    """GRPO on a copy of `policy` against the reward server at `url`: (trained dir, stats)."""
    from datasets import Dataset
    from transformers import AutoTokenizer, PrinterCallback, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from pipeline.rl.adapters import trl_reward

    tokenizer = AutoTokenizer.from_pretrained(policy)
    data = Dataset.from_list(
        [
            {
                "prompt": policy_prompt(r, tokenizer),
                "question": r["question"],
                "profile": "\n".join(p["text"] for p in r["profile"])
                if isinstance(r["profile"], list)
                else str(r["profile"]),
            }
            for r in rows
        ]
    )

    class Clock(TrainerCallback):
        def __init__(self):
            self.ends: list[float] = []

        def on_step_end(self, args, state, control, **kwargs):
            self.ends.append(time.perf_counter())

    clock = Clock()
    args = GRPOConfig(
        output_dir=str(work / "trainer"),
        max_steps=settings.steps,
        per_device_train_batch_size=settings.batch_size,
        num_generations=settings.num_generations,
        max_completion_length=settings.max_new_tokens,
        learning_rate=settings.learning_rate,
        beta=settings.kl,
        temperature=settings.temperature,
        seed=settings.seed,
        use_cpu=settings.device == "cpu",
        logging_steps=1,
        save_strategy="no",
        report_to=[],
        disable_tqdm=True,
        log_level="error",
    )
    trainer = GRPOTrainer(
        model=str(policy),
        reward_funcs=[trl_reward(url)],
        args=args,
        train_dataset=data,
        processing_class=tokenizer,
        callbacks=[clock],
    )
    trainer.remove_callback(PrinterCallback)  # it prints every step's log dict to stdout
    started = time.perf_counter()
    trainer.train()
    out = work / "policy"
    trainer.save_model(str(out))
    tokenizer.save_pretrained(out)
    steps = np.diff([started, *clock.ends])
    rewards = [h["reward"] for h in trainer.state.log_history if "reward" in h]
    return out, {
        "steps": len(clock.ends),
        "seconds_per_step": float(np.mean(steps[1:] if len(steps) > 1 else steps)),
        "first_step_seconds": float(steps[0]) if len(steps) else math.nan,
        "reward_first": float(rewards[0]) if rewards else math.nan,
        "reward_last": float(rewards[-1]) if rewards else math.nan,
    }


async def _grade(cfg, oracle: str, rows: list[dict], answers: dict) -> dict[str, float]:
    from pipeline.eval.bon import oracle_grades
    from pipeline.llm.client import session

    async with session(cfg) as llm:
        grades, failed = await oracle_grades(
            llm, oracle, rows, {k: [v] for k, v in answers.items()}
        )
    if failed:
        first = next(iter(failed.items()))
        raise RLError(
            f"the oracle could not grade {len(failed)} answers (e.g. {first[0]}: {first[1]})"
        )
    return {k: v[0] for k, v in grades.items()}


async def _accuracy(cfg, spec: str, rows: list[dict], context: str) -> tuple[str, float]:
    from pipeline.eval.evaluate import metrics, score_pairs
    from pipeline.eval.models import parse_spec
    from pipeline.llm.client import session

    async with session(cfg) as llm:
        rm = parse_spec(spec, llm=llm, judge_model=cfg.model.judge, context=context)
        scores = await score_pairs(rm, rows)
        rm.close()
        return rm.name, metrics(scores)["accuracy"]


@dataclass
class Trial:
    """What every reward model's run shares: the release split by user, the policy, the oracle,
    and the untrained policy's answers and grades on the held-out users."""

    cfg: Any
    policy: Path
    oracle: str
    context: str
    rows: list[dict]
    train_rows: list[dict]
    held: list[dict]
    before: dict  # the untrained policy's answers to the held-out prompts
    base: dict  # and their oracle grades

    def against(self, spec: str, work: Path) -> dict:
        """One reward model: its accuracy on the release, and the policy trained against it,
        graded on the held-out users beside the untrained policy's grades."""
        from pipeline.rl.server import Background

        cfg, s, held = self.cfg, self.cfg.rl, self.held
        name, acc = asyncio.run(_accuracy(cfg, spec, self.rows, self.context))
        with Background(spec, cfg, self.context) as url:
            trained, stats = train(self.policy, url, self.train_rows, s, work)
        after = generate(trained, held, s.max_new_tokens, s.device)
        graded = asyncio.run(_grade(cfg, self.oracle, held, after))
        shutil.rmtree(work, ignore_errors=True)
        found = {
            "model": name,
            "accuracy": acc,
            "oracle_before": float(np.mean(list(self.base.values()))),
            "oracle_after": float(np.mean(list(graded.values()))),
            **stats,
            "answers": {
                i: {
                    "before": self.before[i],
                    "after": after[i],
                    "grade_before": self.base[i],
                    "grade_after": graded[i],
                }
                for i in graded
            },
        }
        return found | {"rl_gain": found["oracle_after"] - found["oracle_before"]}


COLUMNS = [
    "model",
    "accuracy",
    "rl_gain",
    "oracle_before",
    "oracle_after",
    "reward_first",
    "reward_last",
    "steps",
    "seconds_per_step",
]


def _write(
    out: Path, df: pd.DataFrame, corr: dict, settings: dict, results: list[dict], notes: list[str]
) -> dict[str, Path]:
    """rl.md, rl.csv, rl.png and rl.json (with every answer and grade)."""
    from pipeline.eval.bon import scatter_plot
    from pipeline.eval.report import write_table

    paths = {
        "markdown": out / "rl.md",
        "csv": out / "rl.csv",
        "plot": out / "rl.png",
        "json": out / "rl.json",
    }
    write_table(df, "RL against each reward model", notes, paths)
    scatter_plot(
        df,
        paths["plot"],
        corr,
        y="rl_gain",
        baseline=0.0,
        ylabel="RL gain: oracle grade after - before (held-out users)",
    )
    paths["json"].write_text(
        json.dumps(
            {"settings": settings, "correlation": corr, "models": results},
            indent=2,
            sort_keys=True,
            default=float,
        )
        + "\n",
        "utf-8",
    )
    return paths


def run(
    release: str,
    specs: list[str],
    cfg,
    policy: Path,
    out: Path,
    *,
    oracle: str | None = None,
    context: str = "profile",
) -> dict:
    """Everything `prb eval rl` does; writes out/rl.{md,csv,json,png}."""
    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401
        import trl
    except ImportError as e:  # one line with the install, as the hf reward model says it
        raise RLError(
            f"prb eval rl needs the optional extras: pip install '.[hf,rl]' (torch, "
            f"transformers, TRL): {e}"
        ) from None

    from pipeline.eval.bon import correlation

    s = cfg.rl
    if not (Path(policy) / "config.json").is_file():
        raise RLError(f"--policy {policy}: not a Hugging Face model folder (no config.json)")
    rows, _ = load_rows(release)
    train_rows, held = split_users(rows, s.held_out, s.seed)
    oracle = oracle or cfg.model.judge
    out.mkdir(parents=True, exist_ok=True)
    before = generate(policy, held, s.max_new_tokens, s.device)
    base = asyncio.run(_grade(cfg, oracle, held, before))
    trial = Trial(cfg, Path(policy), oracle, context, rows, train_rows, held, before, base)
    with tempfile.TemporaryDirectory(prefix="prb-rl-") as tmp:
        results = [trial.against(spec, Path(tmp) / str(k)) for k, spec in enumerate(specs)]
    df = pd.DataFrame([{k: v for k, v in r.items() if k != "answers"} for r in results])
    df = df[COLUMNS]
    # against the trained policies' grades: the same order as the gains (the untrained grade is
    # one number for all), and non-negative, as NDCG's gains must be
    corr = correlation(df["accuracy"].tolist(), df["oracle_after"].tolist())
    settings = {
        "algorithm": "GRPO",
        "trl": trl.__version__,
        "policy": str(policy),
        "oracle": oracle,
        "context": context,
        "train_prompts": len(train_rows),
        "held_out_prompts": len(held),
        **s.model_dump(),
    }
    fmt = lambda x: "n/a" if x != x else f"{x:.3f}"  # noqa: E731  (NaN: constant input)
    notes = [
        f"GRPO (TRL {trl.__version__}) for {s.steps} steps per reward model, batch {s.batch_size}"
        f" ({s.num_generations} completions per prompt), lr {s.learning_rate}, KL {s.kl}, "
        f"{s.max_new_tokens} new tokens, device {s.device}; {len(train_rows)} training "
        f"prompts, {len(held)} held-out prompts graded by the oracle `{oracle}`.",
        "`rl_gain`: the trained policy's mean oracle grade (0-1) on held-out questions minus "
        "the untrained policy's.",
        f"Accuracy vs RL gain over {corr['models']} models: Spearman {fmt(corr['spearman'])}, "
        f"Kendall {fmt(corr['kendall'])}, NDCG {fmt(corr['ndcg'])}.",
    ]
    paths = _write(out, df, corr, settings, results, notes)
    return {"table": df, "correlation": corr, "settings": settings, "paths": paths}
