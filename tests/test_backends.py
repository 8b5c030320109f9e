"""The backend seam (issue 27): the call path over Anthropic's Messages API, through the
official `anthropic` client against the simulator speaking that protocol (real HTTP, no
network). Same cache, retries, faults, structured output and provenance as the OpenAI path."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import build, write_config
from test_faults import QUESTIONS, ask_all, live_sim, sim  # noqa: F401  (fixtures)

from pipeline.calls import Request
from pipeline.llm import LLMError, PermanentLLMError
from pipeline.llm.backends import BACKENDS
from pipeline.llm.backends.anthropic import body, limit_headers


def test_a_json_task_goes_out_as_a_messages_body_with_its_schema():
    schema = {"type": "object", "properties": {"x": {"type": "string"}}}
    req = Request(
        "planner",
        "rubrics",
        "m",
        [{"role": "system", "content": "S"}, {"role": "user", "content": "U"}],
        0,
        {
            "temperature": 0.0,
            "max_tokens": 50,
            "response_format": {
                "type": "json_schema",
                "json_schema": {"name": "P", "schema": schema},
            },
        },
        "k",
    )
    assert body(req) == {
        "model": "m",
        "max_tokens": 50,
        "system": "S",
        "temperature": 0.0,
        "messages": [{"role": "user", "content": "U"}],
        "output_config": {"format": {"type": "json_schema", "schema": schema}},
    }
    assert limit_headers(
        {
            "anthropic-ratelimit-requests-limit": "50",
            "anthropic-ratelimit-tokens-remaining": "900",
            "retry-after": "3",
        }
    ) == {
        "x-ratelimit-limit-requests": "50",
        "x-ratelimit-remaining-tokens": "900",
        "retry-after": "3",
    }


def test_answers_faults_and_retries_over_the_messages_api(sim, tmp_path):  # noqa: F811
    url, opts = sim
    got, llm = ask_all(url, tmp_path, provider="anthropic")
    assert not [g for g in got if isinstance(g, BaseException)], got
    assert opts.stats["requests"] == len(got)  # one request per call, all via /v1/messages
    again, _ = ask_all(url, tmp_path, provider="anthropic")  # the same cache: no new request
    assert opts.stats["requests"] == len(got) and [a.content for a in again] == [
        g.content for g in got
    ]
    opts.rate_429, opts.rate_malformed = 0.3, 0.2  # 429s and answers cut off at max_tokens
    got, llm = ask_all(url, tmp_path / "other", provider="anthropic")
    assert not [g for g in got if isinstance(g, BaseException)], got
    retries = sum(
        u["retries"].get(k, 0)
        for u in llm.usage_dict().values()
        for k in ("RateLimitError", "CutOff")
    )
    assert retries == opts.stats["fault_429"] + opts.stats["fault_malformed"] > 0


def test_a_bad_key_stops_and_a_long_prompt_drops_one_record(sim, tmp_path):  # noqa: F811
    url, opts = sim
    opts.require_key = "right"
    got, _ = ask_all(url, tmp_path, provider="anthropic", api_key="wrong")
    assert any(isinstance(g, PermanentLLMError) and "AuthenticationError" in str(g) for g in got)
    opts.require_key, opts.context_limit = "", 60  # planner prompts are longer than 60 tokens
    got, _ = ask_all(url, tmp_path / "b", provider="anthropic")
    bad = [g for g in got if isinstance(g, LLMError)]
    assert bad and {g.kind for g in bad} == {"bad_request"}
    assert "context" in bad[0].detail


def test_a_build_over_anthropic_releases_and_records_what_answered(tmp_path, sim_url):
    config = write_config(
        tmp_path, sim_url, personas={"per_category": 1}, model={"provider": "anthropic"}
    )
    result = build(config)
    manifest = json.loads((Path(result["release_dir"]) / "manifest.json").read_text())
    assert manifest["config"]["model"]["provider"] == "anthropic"
    assert manifest["served_by"] == ["prb-simulator"] and manifest["simulated"]
    assert sum(manifest["per_category"].values()) > 0


def test_an_unknown_provider_is_refused_naming_the_known_ones(tmp_path, sim_url):
    from pipeline.config import ConfigError, load_config

    config = write_config(tmp_path, sim_url, model={"provider": "gemini"})
    with pytest.raises(ConfigError, match="unknown provider 'gemini'.*openai, anthropic"):
        load_config(config)
    assert BACKENDS.names()[:2] == ["openai", "anthropic"]
