"""Cost accounting: tokens per stage and per released pair, priced with the config's table.

Tokens are read from the response cache for the calls the run used (so a resumed or repeated
run reports what an uninterrupted one would). Answers that came from a Batch API job carry
`"batch": true` in their cached usage and are priced at `(1 - batch_discount)`. Prompt tokens
the provider served from its prompt cache (`usage.prompt_tokens_details.cached_tokens`) are
counted apart and priced at the model's `cached_input_per_1m`. A model with no
entry in `cost.prices` is reported with `cost: null` rather than guessed.

`summary(...)` builds the manifest's `cost` block; `report(manifest, prices=None)` re-prices a
finished release (e.g. for `prb audit`, or to compare providers) from that block alone.
"""

from __future__ import annotations

from pipeline.config import CostConfig, RunConfig
from pipeline.llm.cache import ResponseCache


def stage_tokens(cache: ResponseCache, keys_by_stage: dict[str, list[str]]) -> dict[str, dict]:
    out = {}
    for stage, keys in keys_by_stage.items():
        t = dict.fromkeys(("prompt", "completion", "batch_prompt", "batch_completion"), 0)
        cached = 0
        for key in keys:
            entry = cache.get(key)
            if entry is None:
                continue
            usage = entry[1]
            prefix = "batch_" if usage.get("batch") else ""
            t[prefix + "prompt"] += usage.get("prompt_tokens", 0) or 0
            t[prefix + "completion"] += usage.get("completion_tokens", 0) or 0
            if not prefix:  # the provider's prompt cache: part of the prompt tokens above
                cached += (usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0
        out[stage] = {
            "calls": len(keys),
            **{f"{k}_tokens": v for k, v in t.items()},
            "cached_prompt_tokens": cached,
        }
    return out


def _price(stage: dict, model: str, cfg: CostConfig) -> float | None:
    p = cfg.prices.get(model)
    if p is None:
        return None
    cached = stage.get("cached_prompt_tokens", 0)  # a subset of prompt_tokens
    cached_price = p.input_per_1m if p.cached_input_per_1m is None else p.cached_input_per_1m
    online = (
        (stage["prompt_tokens"] - cached) * p.input_per_1m
        + cached * cached_price
        + stage["completion_tokens"] * p.output_per_1m
    )
    batch = (
        stage["batch_prompt_tokens"] * p.input_per_1m
        + stage["batch_completion_tokens"] * p.output_per_1m
    ) * (1 - cfg.batch_discount)
    return round((online + batch) / 1e6, 6)


def _block(stages: dict[str, dict], cfg: CostConfig, released: int) -> dict:
    out_stages = {}
    for name, s in stages.items():
        out_stages[name] = {**s, "cost": _price(s, s["model"], cfg)}
    tokens = sum(
        v
        for s in out_stages.values()
        for k, v in s.items()
        if k.endswith("_tokens") and k != "cached_prompt_tokens"
    )
    cached = sum(s.get("cached_prompt_tokens", 0) for s in out_stages.values())
    costs = [s["cost"] for s in out_stages.values()]
    total = None if any(c is None for c in costs) else round(sum(costs), 6)
    return {
        "currency": cfg.currency,
        "batch_discount": cfg.batch_discount,
        "stages": out_stages,
        "total_tokens": tokens,
        "cached_prompt_tokens": cached,
        "total_cost": total,
        "released_pairs": released,
        "tokens_per_released_pair": round(tokens / released, 1) if released else None,
        "cost_per_released_pair": (
            round(total / released, 6) if released and total is not None else None
        ),
    }


def pricer(cfg: RunConfig, roles: dict[str, str]):
    """(stage, live usage counters) -> money so far, for the progress display; None unpriced.
    `roles`: stage -> the model role it is billed to (the model stages' `role`)."""

    def price(stage: str, usage: dict) -> float | None:
        model = getattr(cfg.model, roles.get(stage, "generator"), None)
        counts = {
            "prompt_tokens": usage.get("prompt_tokens", 0),
            "completion_tokens": usage.get("completion_tokens", 0),
            "batch_prompt_tokens": 0,
            "batch_completion_tokens": 0,
        }
        return _price(counts, model, cfg.cost)

    return price


def summary(
    cfg: RunConfig,
    cache: ResponseCache,
    keys_by_stage: dict[str, list[str]],
    released: int,
    roles: dict[str, str],
) -> dict:
    """The manifest's `cost` block; `roles`: stage -> the model role it is billed to."""
    stages = stage_tokens(cache, keys_by_stage)
    for name, s in stages.items():
        s["model"] = getattr(cfg.model, roles.get(name, "generator"))
    return _block(stages, cfg.cost, released)


def report(manifest: dict, prices: CostConfig | None = None) -> dict:
    """The cost block of a release, re-priced with `prices` (default: the run's own table)."""
    block = manifest["cost"]
    cfg = prices or CostConfig.model_validate(manifest["config"].get("cost", {}))
    stages = {n: {k: v for k, v in s.items() if k != "cost"} for n, s in block["stages"].items()}
    return _block(stages, cfg, block["released_pairs"])
