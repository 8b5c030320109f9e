"""Hugging Face sequence-classification reward models (`pip install .[hf]`).

Loads a local folder or a hub id with `transformers` (the hub only when the environment allows
network access; prb never downloads anything on its own), scores in batches on CPU or GPU. The
user context and question go in as the prompt; with a chat template they become the system and
user turns and the answer the assistant turn, as reward models trained on chats expect.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, replace

from pipeline.eval.rewards import Query, RewardModel, SpecError

try:
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer
except ImportError as e:  # pragma: no cover - depends on the install
    raise ImportError(
        "the hf reward model needs the optional extra: pip install '.[hf]' "
        f"(torch and transformers): {e}"
    ) from e


WINDOW = 1024  # a model whose config names no context window


@dataclass
class HFRewardModel(RewardModel):
    batched = True
    path: str = ""
    device: str = "auto"
    batch_size: int = 8
    max_length: int | None = None  # None: the model's context window

    @classmethod
    def from_spec(cls, kind, options, positional, env):
        path = options.get("path") or (positional[0] if positional else "")
        if not path:
            raise SpecError(f"--rm {kind}: give the model as hf:PATH_OR_ID")
        options = {**options, "path": path}
        limit = options.get("max_length")
        return cls(kind, options.get("context", env.context), options, path=path,
                   device=options.get("device", "auto"),
                   batch_size=int(options.get("batch_size", 8)),
                   max_length=int(limit) if limit else None)  # fmt: skip

    def __post_init__(self):
        if self.device == "auto":
            self.device = "cuda" if torch.cuda.is_available() else "cpu"
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(self.path)
            self.net = AutoModelForSequenceClassification.from_pretrained(self.path)
        except OSError as e:
            raise ValueError(
                f"cannot load a sequence-classification model from {self.path}: {e}"
            ) from None
        self.net.to(self.device).eval()
        if self.tokenizer.pad_token is None:  # GPT-style tokenizers ship without one
            self.tokenizer.pad_token = self.tokenizer.eos_token
            self.net.config.pad_token_id = self.tokenizer.pad_token_id
        window = getattr(self.net.config, "max_position_embeddings", None) or WINDOW
        # BERT-like models keep position ids for padding/special offsets: stay 2 short of it
        self.max_length = min(self.max_length or window, window) - (2 if window < 4096 else 0)
        self.truncation = {"contexts": 0, "cut": 0, "tokens_cut": 0, "too_long": 0}

    def _length(self, q: Query) -> int:
        return int(self._encode([q], truncate=False)["input_ids"].shape[1])

    def fit(self, q: Query) -> Query | None:
        """`q` with its context cut (whole lines from the end) until question, answer and
        context fit `max_length`; None if the question and the answer alone do not fit."""
        self.truncation["contexts"] += 1
        full = self._length(q)
        if full <= self.max_length:
            return q
        fitted = replace(q, context="")
        kept = self._length(fitted)
        if kept > self.max_length:
            self.truncation["too_long"] += 1
            return None
        lines = q.context.split("\n")
        lo, hi = 0, len(lines)  # the most lines that fit: binary search on the prefix
        while lo < hi:
            mid = (lo + hi + 1) // 2
            trial = replace(q, context="\n".join(lines[:mid]))
            if (n := self._length(trial)) <= self.max_length:
                lo, fitted, kept = mid, trial, n
            else:
                hi = mid - 1
        self.truncation["cut"] += 1
        self.truncation["tokens_cut"] += full - kept
        return fitted

    def _encode(self, batch: list[Query], truncate: bool = True):
        """Token ids of (context + question, answer); `truncate` only as a guard: `fit` has
        already made every query fit, so nothing is cut here."""
        cut = {"truncation": True, "max_length": self.max_length} if truncate else {}
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
        return self.tokenizer(prompts, [q.response for q in batch], padding=True,
                              return_tensors="pt", **cut)  # fmt: skip

    def score_batch(self, queries: list[Query]) -> list[float | None]:
        """One score per query; None for an answer that does not fit the model at all."""
        fitted = [self.fit(q) for q in queries]
        scorable = [q for q in fitted if q is not None]
        scores: list[float] = []
        for start in range(0, len(scorable), self.batch_size):
            enc = self._encode(scorable[start : start + self.batch_size]).to(self.device)
            with torch.inference_mode():
                logits = self.net(**enc).logits.float()
            # one label: the reward itself; several: log-odds of the last ("good") label
            reward = logits[:, 0] if logits.shape[1] == 1 else logits.log_softmax(-1)[:, -1]
            scores.extend(reward.cpu().tolist())
        it = iter(scores)
        return [None if q is None else next(it) for q in fitted]

    async def score_many(self, queries):
        return await asyncio.to_thread(self.score_batch, list(queries))
