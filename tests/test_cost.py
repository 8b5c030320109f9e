"""Cost accounting: tokens per stage and per released pair in the manifest, priced by the config."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import build, write_config

from pipeline import cost
from pipeline.config import CostConfig, load_config
from pipeline.llm.cache import ResponseCache
from pipeline.stages import STAGES
from pipeline.stages.base import roles

ROLES = roles(STAGES)

PRICES = {"prb-sim-1": {"input_per_1m": 2.0, "output_per_1m": 8.0}}


def test_batch_answers_are_priced_at_the_discount(tmp_path):
    cache = ResponseCache(tmp_path / "cache.sqlite")
    cache.put(
        "k1",
        task="planner",
        model="m",
        request={},
        content="x",
        usage={"prompt_tokens": 1_000_000, "completion_tokens": 500_000},
    )
    cache.put(
        "k2",
        task="judge_quality",
        model="m",
        request={},
        content="x",
        usage={"prompt_tokens": 2_000_000, "completion_tokens": 0, "batch": True},
    )
    cfg = load_config(
        None,
        model__generator="gen",
        model__judge="judge",
        cost={
            "batch_discount": 0.5,
            "prices": {
                "gen": {"input_per_1m": 1.0, "output_per_1m": 4.0},
                "judge": {"input_per_1m": 3.0, "output_per_1m": 9.0},
            },
        },
    )
    block = cost.summary(cfg, cache, {"rubrics": ["k1"], "filters": ["k2", "missing"]}, 2, ROLES)
    assert block["stages"]["rubrics"]["cost"] == pytest.approx(1.0 + 2.0)
    assert block["stages"]["filters"]["cost"] == pytest.approx(2 * 3.0 * 0.5)
    assert block["stages"]["filters"]["batch_prompt_tokens"] == 2_000_000
    assert block["stages"]["filters"]["calls"] == 2
    assert block["total_cost"] == pytest.approx(6.0)
    assert block["tokens_per_released_pair"] == 1_750_000
    assert block["cost_per_released_pair"] == pytest.approx(3.0)
    # a model without a price is reported as unpriced, never as free
    unpriced = cost.summary(load_config(None), cache, {"rubrics": ["k1"]}, 2, ROLES)
    assert unpriced["stages"]["rubrics"]["cost"] is None and unpriced["total_cost"] is None
    cache.close()


def test_manifest_carries_tokens_and_money_per_released_pair(tmp_path, sim_url):
    config = write_config(tmp_path, sim_url, personas={"per_category": 2}, cost={"prices": PRICES})
    result = build(config)
    manifest = json.loads((Path(result["release_dir"]) / "manifest.json").read_text())
    block = manifest["cost"]
    released = result["funnel"]["released"]
    assert block["released_pairs"] == released > 0
    for stage, tokens in manifest["tokens"].items():
        mine = block["stages"][stage]
        assert mine["prompt_tokens"] == tokens["prompt_tokens"] > 0
        assert mine["completion_tokens"] == tokens["completion_tokens"] > 0
        expected = (tokens["prompt_tokens"] * 2.0 + tokens["completion_tokens"] * 8.0) / 1e6
        assert mine["cost"] == pytest.approx(expected, abs=1e-6)
    total_tokens = sum(
        t["prompt_tokens"] + t["completion_tokens"] for t in manifest["tokens"].values()
    )
    assert block["total_tokens"] == total_tokens
    assert block["tokens_per_released_pair"] == pytest.approx(total_tokens / released, abs=0.1)
    assert block["cost_per_released_pair"] == pytest.approx(
        block["total_cost"] / released, abs=1e-6
    )
    # re-priced for another provider from the manifest alone, as `prb audit` can
    cheaper = cost.report(manifest, CostConfig(prices={"prb-sim-1": {"input_per_1m": 1.0}}))
    assert cheaper["total_cost"] == pytest.approx(
        sum(t["prompt_tokens"] for t in manifest["tokens"].values()) / 1e6, abs=1e-6
    )
    assert cost.report(manifest) == block
