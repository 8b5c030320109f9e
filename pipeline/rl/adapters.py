"""Clients of `prb reward-server` for RL engines: a TRL reward function and a verl custom
reward function. Each sends the policy's responses with the user's question and profile and
gets the reward model's scores back; an item the server could not score gets `default` (and a
warning), so one failed judge call never stops a long run.

TRL (GRPOTrainer, RLOOTrainer): the dataset has `prompt`, `question` and `profile` columns;

    from pipeline.rl.adapters import trl_reward
    trainer = GRPOTrainer(model=..., reward_funcs=[trl_reward("http://127.0.0.1:8100")], ...)

verl: `custom_reward_function.path=<prb>/pipeline/rl/adapters.py`,
`custom_reward_function.name=compute_score`, `PRB_REWARD_URL=http://host:8100` in the workers'
environment, and each row's `extra_info` holding `question` and `profile`.
"""

from __future__ import annotations

import logging
import os

import httpx

log = logging.getLogger(__name__)


class RewardServerError(RuntimeError):
    pass


def score(
    url: str,
    items: list[dict],
    *,
    timeout: float = 120.0,
    default: float = 0.0,
    client: httpx.Client | None = None,
) -> list[float]:
    """POST items to a reward server's /score; a 4xx/5xx answer raises with the server's words."""
    send = client.post if client else httpx.post
    r = send(f"{url.rstrip('/')}/score", json={"items": items}, timeout=timeout)
    if r.status_code != 200:
        try:
            body = r.json()
            why = body.get("error") or body.get("detail") or r.text
        except ValueError:
            why = r.text
        raise RewardServerError(f"reward server {url}: HTTP {r.status_code}: {why}")
    body = r.json()
    for k, why in body.get("errors", {}).items():
        log.warning("reward server %s: item %s not scored (%s): reward %s", url, k, why, default)
    return [default if s is None else float(s) for s in body["scores"]]


def _text(completion) -> str:
    """A TRL completion: plain text, or a conversation whose last message is the answer."""
    if isinstance(completion, str):
        return completion
    return completion[-1]["content"] if completion else ""


def trl_reward(url: str, *, timeout: float = 120.0, default: float = 0.0):
    """A TRL reward function (`reward_funcs=[...]`) scoring through the server at `url`."""
    client = httpx.Client()

    def prb_reward(prompts, completions, question, profile, **kwargs) -> list[float]:
        items = [
            {"question": q, "profile": p, "response": _text(c)}
            for q, p, c in zip(question, profile, completions, strict=True)
        ]
        return score(url, items, timeout=timeout, default=default, client=client)

    prb_reward.__name__ = "prb_reward"  # TRL logs rewards by the function's name
    return prb_reward


def compute_score(data_source, solution_str, ground_truth=None, extra_info=None, **kwargs):
    """verl's custom reward function: one response; the server's URL from PRB_REWARD_URL."""
    url = os.environ.get("PRB_REWARD_URL")
    if not url:
        raise RewardServerError(
            "set PRB_REWARD_URL to the prb reward server, e.g. http://127.0.0.1:8100"
        )
    info = extra_info or {}
    item = {
        "question": info.get("question", ""),
        "profile": info.get("profile", ""),
        "response": solution_str,
    }
    return score(url, [item])[0]
