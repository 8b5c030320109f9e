"""Hugging Face reward models (`pip install .[hf]`).

Loads a local folder or a hub id with `transformers` (the hub only when the environment allows
network access; prb never downloads anything on its own), scores in batches on CPU or GPU. The
user context and question go in as the prompt; with a chat template they become the system and
user turns and the answer the assistant turn, as reward models trained on chats expect.

Options: `dtype` (auto: the model's own; bf16, fp16, fp32), `device_map` (transformers'
placement over several GPUs, e.g. auto; needs accelerate), `batch_size`, `max_batch_tokens`
(batches cut by padded tokens, longest first), `max_length`, `arch`. Models that are not plain
sequence classifiers are built by the table `BUILDERS` (in the manner of RewardBench's model
registry): `value-head`, a base transformer with a linear head on the last token's hidden state
(`value_head.safetensors` beside it; chosen by itself when that file is there). A pairwise
ranker, which reads the question and both answers at once, is the kind `hf-pair`.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, replace
from pathlib import Path
from types import SimpleNamespace

from pipeline.eval.protocol import PUBLIC_MAX_LENGTH
from pipeline.eval.rewards import Query, RewardModel, SpecError
from pipeline.llm.window import fit_context, truncation_counts

try:
    import torch
    from transformers import AutoModel, AutoModelForSequenceClassification, AutoTokenizer
except ImportError as e:  # pragma: no cover - depends on the install
    raise ImportError(
        "the hf reward model needs the optional extra: pip install '.[hf]' "
        f"(torch and transformers): {e}"
    ) from e


WINDOW = 1024  # a model whose config names no context window
VALUE_HEAD = "value_head.safetensors"  # {"weight": [1, hidden], "bias": [1]}
DTYPES = {"auto": "auto", "bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


class ValueHeadModel(torch.nn.Module):
    """A base transformer and a linear value head: the reward is the head applied to the hidden
    state of the last real token (Starling-RM's and TRL's value-head reward models)."""

    def __init__(self, path: str, **load):
        super().__init__()
        from safetensors.torch import load_file

        self.base = AutoModel.from_pretrained(path, **load)
        head = load_file(str(Path(path) / VALUE_HEAD))
        self.head = torch.nn.Linear(head["weight"].shape[1], 1)
        self.head.load_state_dict(head)
        self.head.to(self.base.dtype).to(self.base.device)
        self.config = self.base.config

    def forward(self, input_ids, attention_mask, **_):
        hidden = self.base(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        last = attention_mask.cumsum(1).argmax(1)  # the last real token, left or right padding
        rows = torch.arange(hidden.shape[0], device=hidden.device)
        return SimpleNamespace(logits=self.head(hidden[rows, last]))


BUILDERS = {
    "sequence-classifier": AutoModelForSequenceClassification.from_pretrained,
    "value-head": ValueHeadModel,
}


def architecture(path: str, arch: str | None) -> str:
    if arch is None:
        return "value-head" if (Path(path) / VALUE_HEAD).exists() else "sequence-classifier"
    if arch not in BUILDERS:
        raise SpecError(f"unknown arch={arch}: use one of {', '.join(BUILDERS)}")
    return arch


@dataclass
class HFRewardModel(RewardModel):
    batched = True
    path: str = ""
    device: str = "auto"
    batch_size: int = 8
    max_length: int | None = None  # None: the model's context window
    dtype: str = "auto"
    device_map: str | None = None
    max_batch_tokens: int | None = None
    arch: str | None = None  # a BUILDERS name; None: found from the folder

    @classmethod
    def from_spec(cls, kind, options, positional, env):
        path = options.get("path") or (positional[0] if positional else "")
        if not path:
            raise SpecError(f"--rm {kind}: give the model as {kind}:PATH_OR_ID")
        options = {**options, "path": path}
        limit, budget = options.get("max_length"), options.get("max_batch_tokens")
        if options.get("dtype", "auto") not in DTYPES:
            raise SpecError(
                f"--rm {kind}: dtype={options['dtype']}: use one of {', '.join(DTYPES)}"
            )
        dtype = options.get("dtype", "auto")
        if env.protocol == "published":
            if cls.pairwise:
                raise SpecError(
                    f"--rm {kind}: the published protocol has no pairwise ranker; "
                    "use hf:PATH or judge-pair, or --protocol prb"
                )
            fixed = [k for k in ("max_length", "max_batch_tokens") if k in options]
            if fixed:
                raise SpecError(
                    f"--rm {kind}: {', '.join(fixed)} is fixed by the published "
                    "protocol (8,192 tokens; batches of batch_size answers in release "
                    "order); drop it or use "
                    "--protocol prb"
                )
            dtype = options.get("dtype", "bf16")  # its scorer loads bf16
        return cls(
            kind,
            options.get("context", env.context),
            options,
            env.protocol,
            path=path,
            device=options.get("device", "auto"),
            batch_size=int(options.get("batch_size", 8)),
            max_length=int(limit) if limit else None,
            dtype=dtype,
            device_map=options.get("device_map"),
            max_batch_tokens=int(budget) if budget else None,
            arch=options.get("arch"),
        )

    def __post_init__(self):
        if self.device == "auto":
            self.device = "cuda" if torch.cuda.is_available() else "cpu"
        self.arch = architecture(self.path, self.arch)
        load = {"dtype": DTYPES[self.dtype]}
        if self.device_map:
            load["device_map"] = self.device_map  # transformers places it (accelerate)
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(self.path)
            self.net = BUILDERS[self.arch](self.path, **load)
        except (OSError, FileNotFoundError) as e:
            raise ValueError(f"cannot load a {self.arch} model from {self.path}: {e}") from None
        if self.device_map:
            self.device = str(next(self.net.parameters()).device)  # where inputs go
        else:
            self.net.to(self.device)
        self.net.eval()
        if self.tokenizer.pad_token is None:  # GPT-style tokenizers ship without one
            self.tokenizer.pad_token = self.tokenizer.eos_token
            self.net.config.pad_token_id = self.tokenizer.pad_token_id
        window = getattr(self.net.config, "max_position_embeddings", None) or WINDOW
        # BERT-like models keep position ids for padding/special offsets: stay 2 short of it
        self.max_length = min(self.max_length or window, window) - (2 if window < 4096 else 0)
        self.truncation = truncation_counts()
        if self.protocol == "published":
            if not self.tokenizer.chat_template:
                raise ValueError(
                    f"{self.path}: the tokenizer has no chat template, which the "
                    "published protocol applies; use --protocol prb"
                )
            self.max_length = PUBLIC_MAX_LENGTH  # its scorer's, whatever the model's window
            self.truncation["answers_cut"] = 0

    def _length(self, q: Query) -> int:
        return int(self._encode([q], truncate=False)["input_ids"].shape[1])

    def fit(self, q: Query) -> Query | None:
        """`q` with its context cut (whole lines from the end) until question, answer and
        context fit `max_length`; None if the question and the answer alone do not fit."""
        context = fit_context(
            q.context,
            lambda c: self._length(replace(q, context=c)),
            self.max_length,
            self.truncation,
        )
        return None if context is None else replace(q, context=context)

    def _encode(self, batch: list[Query], truncate: bool = True):
        """Token ids of (context + question, answer); `truncate` only as a guard: `fit` has
        already made every query fit, so nothing is cut here (the published protocol excepted:
        its scorer cuts from the right)."""
        cut = {"truncation": True, "max_length": self.max_length} if truncate else {}
        if self.protocol == "published":  # the public scorer's input, exactly
            texts = [
                self.tokenizer.apply_chat_template(
                    [
                        {"role": "user", "content": q.question},
                        {"role": "assistant", "content": q.response},
                    ],
                    tokenize=False,
                )
                for q in batch
            ]
            return self.tokenizer(texts, padding=True, return_tensors="pt", **cut)
        if self.tokenizer.chat_template:
            texts = [
                self.tokenizer.apply_chat_template(
                    ([{"role": "system", "content": q.context}] if q.context else [])
                    + [
                        {"role": "user", "content": q.question},
                        {"role": "assistant", "content": q.response},
                    ],
                    tokenize=False,
                )
                for q in batch
            ]
            return self.tokenizer(texts, padding=True, return_tensors="pt", **cut)
        prompts = [f"{q.context}\n\n{q.question}".strip() for q in batch]
        return self.tokenizer(
            prompts, [q.response for q in batch], padding=True, return_tensors="pt", **cut
        )

    def batches(self, queries: list[Query]) -> list[list[int]]:
        """Indices of `queries` in batches: `batch_size` each, or with `max_batch_tokens`,
        longest first and as many as fit the budget once padded to the longest."""
        if not self.max_batch_tokens:
            idx = list(range(len(queries)))
            return [idx[i : i + self.batch_size] for i in range(0, len(idx), self.batch_size)]
        lengths = {i: self._length(q) for i, q in enumerate(queries)}
        out: list[list[int]] = []
        for i in sorted(lengths, key=lambda i: -lengths[i]):
            if out and lengths[out[-1][0]] * (len(out[-1]) + 1) <= self.max_batch_tokens:
                out[-1].append(i)
            else:
                out.append([i])
        return out

    def logits(self, batch: list[Query]):
        """The model's logits, in its own dtype."""
        enc = self._encode(batch).to(self.device)
        with torch.inference_mode():
            return self.net(**enc).logits

    def score_batch(self, queries: list[Query]) -> list[float | None]:
        """One score per query; None for an answer that does not fit the model at all."""
        if self.protocol == "published":
            return self._public_scores(queries)
        fitted = [self.fit(q) for q in queries]
        scorable = [q for q in fitted if q is not None]
        scores: dict[int, float] = {}
        for batch in self.batches(scorable):
            logits = self.logits([scorable[i] for i in batch]).float()
            # one label: the reward itself; several: log-odds of the last ("good") label
            reward = logits[:, 0] if logits.shape[1] == 1 else logits.log_softmax(-1)[:, -1]
            scores.update(zip(batch, reward.cpu().tolist(), strict=True))
        it = iter(scores[i] for i in range(len(scorable)))
        return [None if q is None else next(it) for q in fitted]

    def _public_scores(self, queries: list[Query]) -> list[float]:
        """The public scorer's: batches of `batch_size` in order, one logit as it is or the
        softmax probability of the last label, in the model's dtype. What it cut from the right
        (the answer's end) is counted, not hidden."""
        scores: list[float] = []
        for i in range(0, len(queries), self.batch_size):
            batch = queries[i : i + self.batch_size]
            for q in batch:
                self.truncation["contexts"] += 1
                over = self._length(q) - self.max_length
                if over > 0:
                    self.truncation["answers_cut"] += 1
                    self.truncation["tokens_cut"] += over
            logits = self.logits(batch)
            reward = logits[:, 0] if logits.shape[1] == 1 else torch.softmax(logits, -1)[:, -1]
            scores += reward.float().cpu().tolist()
        return scores

    async def score_many(self, queries):
        return await asyncio.to_thread(self.score_batch, list(queries))


@dataclass
class HFPairRanker(HFRewardModel):
    """A pairwise ranker (PairRM-like): a sequence classifier that reads the user context and
    question, then both answers, and gives the log-odds that answer A is the better one (one
    label), or the two labels (A better, B better). `rank` asks both A/B orders."""

    pairwise = True
    batched = False

    def verdict(self, context: str, question: str, a: str, b: str) -> str:
        q = self.fit(Query(context, question, f"Answer A: {a}\n\nAnswer B: {b}"))
        if q is None:  # the two answers do not fit with the question: no verdict
            return "tie"
        logits = self.logits([q])[0].float()
        margin = float(logits[0]) if logits.shape[0] == 1 else float(logits[0] - logits[1])
        return "A" if margin > 0 else "B" if margin < 0 else "tie"

    async def prefer(self, context: str, question: str, a: str, b: str) -> str:
        return await asyncio.to_thread(self.verdict, context, question, a, b)
