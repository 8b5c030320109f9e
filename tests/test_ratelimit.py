"""Rate limits (issue 20): the simulator enforces requests and tokens per minute as a provider
does, and prb keeps under them, whether told the limits or reading them from the headers; the
provider's prompt cache is counted and priced in the manifest's cost block."""

from __future__ import annotations

import asyncio
import json
import tempfile
from pathlib import Path

import httpx
import pytest
from conftest import build, write_config

from pipeline.config import ModelConfig, RunConfig
from pipeline.llm import LLM, LLMError
from pipeline.llm.cache import ResponseCache
from pipeline.llm.prompts import load_prompt
from pipeline.llm.ratelimit import Limiter, parse_duration, prompt_tokens

RPM = 1200  # 20 a second, a bucket of 20: a burst of 48 at once overruns it


def stats(url: str) -> dict:
    return httpx.get(url.removesuffix("/v1") + "/stats").json()


def chat(url: str, words: int = 5, max_tokens: int = 10) -> httpx.Response:
    return httpx.post(
        f"{url}/chat/completions",
        json={
            "model": "prb-sim-1",
            "max_tokens": max_tokens,
            "messages": [{"role": "user", "content": " ".join(["word"] * words)}],
        },
    )


def test_the_simulator_answers_429_over_its_limit_with_a_providers_headers(sim_factory):
    url = sim_factory(rpm=60, tpm=100_000)  # one request a second, a bucket of one
    first, second = chat(url), chat(url)
    assert first.status_code == 200 and second.status_code == 429
    assert first.headers["x-ratelimit-limit-requests"] == "60"
    assert first.headers["x-ratelimit-limit-tokens"] == "100000"
    assert first.headers["x-ratelimit-remaining-requests"] == "0"
    assert 0 < parse_duration(first.headers["x-ratelimit-reset-requests"]) <= 1.0
    assert second.json()["error"]["code"] == "rate_limit_exceeded"
    assert 0 < int(second.headers["retry-after-ms"]) <= 1000
    assert second.headers["retry-after"] == "1"
    # a request is charged its prompt and max_tokens: one over the token bucket is refused
    tokens = sim_factory(tpm=600)  # 10 tokens a second
    assert chat(tokens, words=4, max_tokens=4).status_code == 200  # 8 of 10
    refused = chat(tokens, words=4, max_tokens=4)
    assert refused.status_code == 429 and "tokens per min" in refused.json()["error"]["message"]


async def burst(url: str, n: int, concurrency: int = 48, **model) -> tuple[list, Limiter]:
    cfg = ModelConfig(
        base_url=url,
        concurrency=concurrency,
        max_retries=30,
        backoff_initial_s=0.05,
        backoff_max_s=0.5,
        structured_output="none",
        **model,
    )
    with tempfile.TemporaryDirectory() as tmp:
        cache = ResponseCache(Path(tmp) / "cache.sqlite")
        llm = LLM(cfg, cache)
        prompt = load_prompt("content_plan")

        async def one(i):
            try:
                return await llm.call(
                    prompt,
                    stage="t",
                    model="prb-sim-1",
                    variables={"question": f"How do I start, case {i}?"},
                )
            except LLMError as e:
                return e

        try:
            out = await asyncio.gather(*(one(i) for i in range(n)))
        finally:
            await llm.aclose()
            cache.close()
    return out, llm.limiter


@pytest.mark.parametrize(
    "model",
    [
        {"requests_per_minute": RPM},  # told
        {},  # learnt from the first answer's headers (the default)
    ],
    ids=["set", "learnt"],
)
def test_prb_stays_under_the_limit_without_429s(sim_factory, model):
    url = sim_factory(rpm=RPM, latency_ms=20)
    out, limiter = asyncio.run(burst(url, 60, **model))
    assert not [r for r in out if isinstance(r, LLMError)]
    s = stats(url)
    assert s["requests"] == 60 and s.get("rate_limited", 0) == 0, s
    assert limiter.requests is not None and limiter.stats["throttled"] > 0


def test_without_limits_the_same_burst_meets_429s(sim_factory):
    """Today's behaviour, kept behind `rate_limits_from_headers: false`: what the limiter saves."""
    url = sim_factory(rpm=RPM, latency_ms=20)
    asyncio.run(burst(url, 60, rate_limits_from_headers=False))  # some may run out of retries
    assert stats(url)["rate_limited"] >= 20


def test_a_token_limit_binds_and_is_kept(sim_factory):
    # each content-plan call is charged ~80 prompt words + 400 max_tokens: 6,000 tokens a
    # minute is ~12 calls a minute, a bucket of one call
    url = sim_factory(tpm=30_000, latency_ms=10)
    out, limiter = asyncio.run(burst(url, 8, tokens_per_minute=30_000))
    assert not [r for r in out if isinstance(r, LLMError)]
    assert stats(url).get("rate_limited", 0) == 0
    assert limiter.tokens is not None and limiter.stats["throttled"] > 0


def test_a_429_pauses_every_request_for_its_retry_after():
    async def go():
        limiter = Limiter(requests_per_minute=6000)
        limiter.observe({"retry-after-ms": "300", "x-ratelimit-remaining-requests": "0"}, 429)
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        await asyncio.gather(limiter.acquire(lambda: 1), limiter.acquire(lambda: 1))
        return loop.time() - t0

    assert asyncio.run(go()) >= 0.29


def test_the_estimate_counts_bpe_tokens_and_never_undercounts_the_simulators_words():
    messages = [
        {"role": "system", "content": "You plan answers. Return JSON."},
        {"role": "user", "content": "<question>How do I start the cello?</question>"},
    ]
    words = sum(len(m["content"].split()) for m in messages)
    assert prompt_tokens(messages) >= words + 8  # BPE tokens plus the per-message overhead


def test_limits_are_execution_only(tmp_path):
    cfg = RunConfig.model_validate(
        {"model": {"requests_per_minute": 500, "tokens_per_minute": 9000}}
    )
    plain = RunConfig()
    assert cfg.recorded() == plain.recorded()  # not in the manifest
    assert cfg.resume_inputs() == plain.resume_inputs()  # nor the fingerprint


def test_cached_prompt_tokens_are_counted_and_priced_at_the_cached_rate(tmp_path, sim_factory):
    url = sim_factory(cache_min_tokens=32, cache_block=16)
    price = {"input_per_1m": 1.0, "cached_input_per_1m": 0.25, "output_per_1m": 2.0}
    config = write_config(
        tmp_path, url, personas={"per_category": 2}, cost={"prices": {"prb-sim-1": price}}
    )
    result = build(config)
    manifest = json.loads((Path(result["release_dir"]) / "manifest.json").read_text())
    block = manifest["cost"]
    cached = block["cached_prompt_tokens"]
    assert cached > 0 and cached == sum(s["cached_prompt_tokens"] for s in block["stages"].values())
    assert stats(url)["cached_tokens"] == cached  # what the provider reported, every call kept
    stages = block["stages"].values()
    prompt = sum(s["prompt_tokens"] for s in stages)
    completion = sum(s["completion_tokens"] for s in stages)
    expected = ((prompt - cached) * 1.0 + cached * 0.25 + completion * 2.0) / 1e6
    assert block["total_cost"] == pytest.approx(expected, abs=1e-5)
    assert block["total_tokens"] == prompt + completion  # cached tokens are not counted twice
    # issue 47: where the time went, in run_stats.json: cached tokens beside those evaluated,
    # and each model stage's seconds at the endpoint against its wall time
    run_stats = json.loads((Path(result["run_dir"]) / "run_stats.json").read_text())
    usage = run_stats["usage"]
    assert sum(u.get("cached_prompt_tokens", 0) for u in usage.values()) == cached
    for name, spent in run_stats["stages"].items():
        calls = usage.get(name, {}).get("calls", 0)
        assert ("model_busy_s" in spent) == (calls > 0), (name, spent)
        if calls:
            assert 0 < spent["model_busy_s"] <= spent["wall_s"] + 0.01
            assert spent["model_idle_s"] == pytest.approx(
                spent["wall_s"] - spent["model_busy_s"], abs=0.01
            )
