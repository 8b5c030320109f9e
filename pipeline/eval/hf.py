"""Hugging Face sequence-classification reward models (`pip install .[hf]`).

Loads a local folder or a hub id with `transformers` (the hub only when the environment allows
network access; prb never downloads anything on its own), scores in batches on CPU or GPU. The
user context and question go in as the prompt; with a chat template they become the system and
user turns and the answer the assistant turn, as reward models trained on chats expect.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from pipeline.eval.rewards import Query, RewardModel, SpecError

try:
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer
except ImportError as e:  # pragma: no cover - depends on the install
    raise ImportError(
        "the hf reward model needs the optional extra: pip install '.[hf]' "
        f"(torch and transformers): {e}"
    ) from e


@dataclass
class HFRewardModel(RewardModel):
    batched = True
    path: str = ""
    device: str = "auto"
    batch_size: int = 8
    max_length: int = 1024

    @classmethod
    def from_spec(cls, kind, options, positional, env):
        path = options.get("path") or (positional[0] if positional else "")
        if not path:
            raise SpecError(f"--rm {kind}: give the model as hf:PATH_OR_ID")
        options = {**options, "path": path}
        return cls(kind, options.get("context", env.context), options, path=path,
                   device=options.get("device", "auto"),
                   batch_size=int(options.get("batch_size", 8)))  # fmt: skip

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

    def _encode(self, batch: list[Query]):
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
            return self.tokenizer(
                texts,
                padding=True,
                truncation=True,
                max_length=self.max_length,
                return_tensors="pt",
            )
        prompts = [f"{q.context}\n\n{q.question}".strip() for q in batch]
        return self.tokenizer(
            prompts,
            [q.response for q in batch],
            padding=True,
            truncation=True,
            max_length=self.max_length,
            return_tensors="pt",
        )

    def score_batch(self, queries: list[Query]) -> list[float]:
        out: list[float] = []
        for start in range(0, len(queries), self.batch_size):
            enc = self._encode(queries[start : start + self.batch_size]).to(self.device)
            with torch.inference_mode():
                logits = self.net(**enc).logits.float()
            # one label: the reward itself; several: log-odds of the last ("good") label
            reward = logits[:, 0] if logits.shape[1] == 1 else logits.log_softmax(-1)[:, -1]
            out.extend(reward.cpu().tolist())
        return out

    async def score_many(self, queries):
        return await asyncio.to_thread(self.score_batch, list(queries))
