"""Candidates chosen for fit (issue 46 item 4), tried on the local 1.5B.

    .venv/bin/python bench/candidates.py RUN_DIR [--tasks 12] [--samples 3] \
        [--temperature 0.8] [--out FILE] [--model qwen2.5-1.5b]
    .venv/bin/python bench/candidates.py --recorded real-fit ...

RUN_DIR is a rewrite-design build (its config beside its outputs folder, as `record.py NAME
--refresh --keep DIR` leaves it); `--recorded NAME` rebuilds recording NAME offline first.
Its couples and dimensions are taken as the build made them (`swap_partners`,
`persona_rewrite.contrasted`); a seeded sample of its tasks with a contrast is written again
here, in-process (llama-cpp-python: llama.cpp's server returns no logprobs of a given text):
one base answer, then per side the greedy rewrite and `--samples` rewrites at
`--temperature`. Each candidate is scored two ways:

- contrastive likelihood: its mean token log-probability under its own user's rewrite prompt
  minus under the other user's (prompt evaluation only, no generation);
- checklist: per dimension of the pair, P(yes) that it does its own user's instruction (with
  what that user said) minus P(yes) that it does the other's (prompts/fit_check.yaml),
  averaged.

Each selector (greedy, first sample, contrastive, checklist) picks one candidate per side; the
pair it makes is read model-free as the pipeline reads it (pipeline/realised.py: does the
intended difference show? does either side echo its instructions?) and by word-sequence
similarity. An oracle row says how often any pick of candidates realises one. `--out` keeps
every candidate, its scores and each selector's pair (JSONL), for reading.
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import json
import math
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from statistics import fmean

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from _prefect import isolate, prefect_server  # noqa: E402  (bench/ is on sys.path)
from generic_aspects import replayed  # noqa: E402

from pipeline.config import load_config  # noqa: E402
from pipeline.llm import local  # noqa: E402
from pipeline.llm.prompts import load_prompt  # noqa: E402
from pipeline.realised import echoed, realised, unasked  # noqa: E402
from pipeline.records import RubricRecord, Task  # noqa: E402
from pipeline.stages.pairs import budget_tokens, swap_partners  # noqa: E402
from pipeline.stats import wilson  # noqa: E402
from pipeline.store import Records, StageFile  # noqa: E402
from pipeline.strategies import persona_rewrite  # noqa: E402
from pipeline.text import unwrap  # noqa: E402

SELECTORS = ("greedy", "sample", "contrastive", "checklist")


def chatml(messages: list[dict]) -> str:
    """Qwen2.5's chat template (ChatML), ending where the assistant's answer starts."""
    turns = "".join(f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in messages)
    return turns + "<|im_start|>assistant\n"


class Model:
    """One llama.cpp model in-process: generation, a text's log-probability under a prompt,
    and P(yes) of a yes/no question."""

    def __init__(self, name: str | None, threads: int = 1):
        from llama_cpp import Llama  # the local extra

        path, _, _ = local.weights(name)
        self.llm = Llama(
            str(path), n_ctx=2048, n_threads=threads, logits_all=True, verbose=False, seed=0
        )
        self.calls = {"generate": 0, "score": 0, "check": 0}
        self.seconds = dict.fromkeys(self.calls, 0.0)

    def _timed(self, kind: str, fn):
        t = time.perf_counter()
        out = fn()
        self.calls[kind] += 1
        self.seconds[kind] += time.perf_counter() - t
        return out

    def generate(self, messages, max_tokens: int, temperature: float, seed: int) -> str:
        out = self._timed(
            "generate",
            lambda: self.llm.create_completion(
                chatml(messages),
                max_tokens=max_tokens,
                temperature=temperature,
                top_p=0.95 if temperature else 1.0,
                seed=seed,
                stop=["<|im_end|>"],
            ),
        )
        return out["choices"][0]["text"].strip()

    def _eval(self, tokens: list[int]) -> None:
        """Evaluate `tokens`, reusing the longest prefix already in the KV cache."""
        llm = self.llm
        k = min(llm.longest_token_prefix(llm._input_ids.tolist(), tokens), len(tokens) - 1)
        llm.n_tokens = k  # eval() drops the KV cache past it
        llm.eval(tokens[k:])

    def _tokens(self, text: str) -> list[int]:
        return self.llm.tokenize(text.encode(), add_bos=False, special=True)

    @staticmethod
    def _log_softmax(logits):
        import numpy as np

        shifted = logits - logits.max(axis=-1, keepdims=True)
        return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))

    def logprob(self, messages, text: str) -> float:
        """Mean log-probability per token of `text` as the answer to `messages` (llama.cpp's
        own echo sorts the vocabulary in Python for every token: minutes per call)."""
        import numpy as np

        def score() -> float:
            prompt = chatml(messages)
            start, full = len(self._tokens(prompt)), self._tokens(prompt + text)
            if len(full) <= start:
                return -math.inf
            self._eval(full)
            rows = self._log_softmax(self.llm.scores[start - 1 : len(full) - 1])
            return float(rows[np.arange(len(full) - start), full[start:]].mean())

        return self._timed("score", score)

    def p_yes(self, messages) -> float:
        """P(yes) / (P(yes) + P(no)) among the ten likeliest first tokens."""
        import numpy as np

        def check() -> float:
            tokens = self._tokens(chatml(messages))
            self._eval(tokens)
            row = self._log_softmax(self.llm.scores[len(tokens) - 1])
            p = {"yes": 0.0, "no": 0.0}
            for i in np.argpartition(row, -10)[-10:]:
                word = self.llm.detokenize([int(i)]).decode(errors="ignore").strip().lower()
                if word in p:
                    p[word] += math.exp(row[i])
            return p["yes"] / (p["yes"] + p["no"]) if p["yes"] + p["no"] else 0.5

        return self._timed("check", check)


def tasks_with_contrast(run_dir: Path, cfg, directions: dict):
    """(task, partner id, dims, mine, theirs) for each task of the build that has a contrast."""
    rubrics = Records(StageFile(run_dir, "rubrics", RubricRecord), lambda r: r.task.task_id)
    questions = Records(StageFile(run_dir, "questions", Task), lambda t: t.task_id)
    couples = persona_rewrite.STRATEGY.couples(cfg.generation)
    partners = swap_partners(rubrics, couples, questions)
    for rec in rubrics:
        task = rec.task
        if task.task_id not in partners:
            continue
        other, _, _, prefs_b = partners[task.task_id]
        mine = {p.dimension: (p.level, p.statement) for p in task.persona.preferences}
        theirs = {p["dimension"]: (p["level"], p["statement"]) for p in prefs_b}
        dims = persona_rewrite.contrasted(cfg.generation, directions, mine, theirs)
        if dims:
            yield task, other, dims, mine, theirs


def similarity(a: str, b: str) -> float:
    return difflib.SequenceMatcher(None, a.split(), b.split(), autojunk=False).ratio()


class Trial:
    """One task written and read: the prompts, levels and signs of its couple."""

    def __init__(self, prompts: dict, cfg, task, dims: list[str], mine: dict, theirs: dict):
        self.p, self.task, self.dims = prompts, task, dims
        self.own = {"chosen": mine, "rejected": theirs}
        self.directions = prompts["rewrite"].extra["directions"]
        signs = prompts["rewrite"].extra.get("signs", {})
        self.signs = {d: unasked(s, task.question) for d, s in signs.items()}
        self.budget = cfg.generation.word_budget
        self.tokens = budget_tokens(self.budget)

    def told(self, who: dict) -> dict:
        return {
            "statements": [who[d][1] for d in self.dims],
            "instructions": [self.directions[d][who[d][0]] for d in self.dims],
        }

    def candidates(self, model: Model, samples: int, temperature: float, seed: int) -> dict:
        """role -> [{text, contrastive, checklist}], greedy first."""
        side = {"question": self.task.question, "word_budget": self.budget}
        self.base = model.generate(self.p["base_answer"].render(**side), self.tokens, 0.0, 0)
        side["base"] = self.base
        asked = {r: self.p["rewrite"].render(**side, **self.told(w)) for r, w in self.own.items()}
        pair = (("chosen", "rejected"), ("rejected", "chosen"))
        texts = {
            role: [model.generate(asked[role], self.tokens, 0.0, 0)]
            + [
                model.generate(asked[role], self.tokens, temperature, seed + k + 1)
                for k in range(samples)
            ]
            for role, _ in pair
        }
        texts = {role: [unwrap(t, "answer") for t in ts] for role, ts in texts.items()}
        # every candidate under one prompt, then under the other: the prompt's prefix is
        # evaluated once per prompt, not once per candidate
        lp = {
            (role, under): [model.logprob(asked[under], t) for t in texts[role]]
            for under, _ in pair
            for role, _ in pair
        }
        cands: dict[str, list[dict]] = {}
        for role, other in pair:
            cands[role] = []
            for k, answer in enumerate(texts[role]):
                checks = [
                    model.p_yes(self.check(answer, d, self.own[role]))
                    - model.p_yes(self.check(answer, d, self.own[other]))
                    for d in self.dims
                ]
                cands[role].append(
                    {
                        "text": answer,
                        "contrastive": lp[role, role][k] - lp[role, other][k],
                        "checklist": fmean(checks),
                    }
                )
        return cands

    def check(self, answer: str, d: str, who: dict) -> list[dict]:
        level, statement = who[d]
        return self.p["fit_check"].render(
            answer=answer, requirement=self.directions[d][level], statement=statement
        )

    def pair(self, chosen: dict, rejected: dict) -> dict:
        """The pair two candidates make, read as the pipeline reads it."""
        mine, theirs = self.own["chosen"], self.own["rejected"]
        texts = (chosen["text"], rejected["text"])
        real = [
            realised(d, (mine[d][0], theirs[d][0]), texts, self.signs.get(d)) for d in self.dims
        ]
        echo = echoed(texts[0], self.told(mine)["instructions"]) or echoed(
            texts[1], self.told(theirs)["instructions"]
        )
        return {
            "realised": any(real) and not echo,
            "echoed": bool(echo),
            "similarity": round(similarity(*texts), 3),
            "chosen": texts[0],
            "rejected": texts[1],
        }


def made(folder: Path, task, pairs: dict) -> None:
    """Each selector's pair appended to folder/SELECTOR.pairs.jsonl in a run's pairs.jsonl
    shape, so that `bench/blind_read.py items` reads it as every pair made."""
    folder.mkdir(parents=True, exist_ok=True)
    for selector, p in pairs.items():
        row = {
            "pair_id": f"{task.task_id}-{selector}",
            "task": task.model_dump(mode="json"),
            "chosen": p["chosen"],
            "rejected": p["rejected"],
        }
        with (folder / f"{selector}.pairs.jsonl").open("a", encoding="utf-8") as f:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")


def best(cands: list[dict], score: str) -> int:
    return max(range(len(cands)), key=lambda k: cands[k][score])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run_dir", type=Path, nargs="?")
    ap.add_argument("--recorded", help="a recording to rebuild offline and write again")
    ap.add_argument("--tasks", type=int, default=12)
    ap.add_argument("--samples", type=int, default=3)
    ap.add_argument("--temperature", type=float, default=0.8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--model", default=None)
    # llama.cpp's threads spin: two on 2 cores with another process on one ran the smoke
    # run past 10 minutes (bench/README.md "local_threads.py": one thread survives it)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", type=Path)
    ap.add_argument(
        "--pairs", type=Path, help="write DIR/SELECTOR.pairs.jsonl, for bench/blind_read.py items"
    )
    args = ap.parse_args()
    if not args.run_dir and not args.recorded:
        ap.error("give a run folder or --recorded NAME")
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        if args.recorded:
            isolate(Path(tmp))
            stack.enter_context(prefect_server())
            args.run_dir = replayed(args.recorded, Path(tmp))
            stack.close()
        return trial_all(args)


def trial_all(args) -> int:
    cfg = load_config(args.run_dir.parent.parent / "config.yaml")
    prompts = {t: load_prompt(t) for t in ("rewrite", "base_answer", "fit_check")}
    found = list(tasks_with_contrast(args.run_dir, cfg, prompts["rewrite"].extra["directions"]))
    random.Random(args.seed).shuffle(found)
    picked = found[: args.tasks]
    print(f"{len(found)} tasks with a contrast; writing {len(picked)}", file=sys.stderr)

    model = Model(args.model, args.threads)
    tally = {s: [0, 0, []] for s in (*SELECTORS, "oracle")}  # realised, echoed, similarities
    out = args.out.open("w") if args.out else None
    started = time.perf_counter()
    for i, (task, other, dims, mine, theirs) in enumerate(picked):
        trial = Trial(prompts, cfg, task, dims, mine, theirs)
        cands = trial.candidates(model, args.samples, args.temperature, 1000 * i)
        picks = {
            "greedy": (0, 0),
            "sample": (1, 1) if args.samples else (0, 0),
            "contrastive": (
                best(cands["chosen"], "contrastive"),
                best(cands["rejected"], "contrastive"),
            ),
            "checklist": (best(cands["chosen"], "checklist"), best(cands["rejected"], "checklist")),
        }
        pairs = {
            s: trial.pair(cands["chosen"][a], cands["rejected"][b]) for s, (a, b) in picks.items()
        }
        every = [trial.pair(c, r) for c in cands["chosen"] for r in cands["rejected"]]
        pairs["oracle"] = next((p for p in every if p["realised"]), every[0])
        for s, p in pairs.items():
            tally[s][0] += p["realised"]
            tally[s][1] += p["echoed"]
            tally[s][2].append(p["similarity"])
        if args.pairs:
            made(args.pairs, task, pairs)
        if out:
            row = {
                "task_id": task.task_id,
                "user": task.persona.persona_id,
                "partner": other,
                "question": task.question,
                "dims": {d: [mine[d][0], theirs[d][0]] for d in dims},
                "stated": {d: mine[d][1] for d in dims},
                "base": trial.base,
                "candidates": cands,
                "picks": picks,
                "pairs": pairs,
            }
            out.write(json.dumps(row, ensure_ascii=False) + "\n")
            out.flush()
        done = " ".join(f"{s}={int(p['realised'])}" for s, p in pairs.items())
        print(
            f"[{i + 1}/{len(picked)}] {time.perf_counter() - started:.0f}s {done}", file=sys.stderr
        )
    n = len(picked)
    print(f"\n{n} tasks; per side the greedy rewrite and {args.samples} at T={args.temperature}")
    print("| selector | realised | 95% interval | echoed | median similarity |")
    print("|---|---|---|---|---|")
    for s, (real, echo, sims) in tally.items():
        lo, hi = wilson(real, n)
        med = statistics.median(sims) if sims else math.nan
        print(
            f"| {s} | {real}/{n} = {real / max(n, 1):.2f} | [{lo:.2f}, {hi:.2f}] | {echo} "
            f"| {med:.3f} |"
        )
    spent = ", ".join(f"{k} {model.calls[k]} ({model.seconds[k]:.0f} s)" for k in model.calls)
    print(f"calls: {spent}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
