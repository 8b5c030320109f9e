"""`--mode batch`: calls go through the simulator's /v1/files and /v1/batches over real HTTP,
answers land in the cache, and the flow continues from there to the same release."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import httpx
from conftest import build, write_config

from pipeline.config import load_config
from pipeline.llm import LLM
from pipeline.llm.batch import ENDPOINT, BatchTransport
from pipeline.llm.cache import ResponseCache
from pipeline.llm.prompts import load_prompt
from pipeline.sim.batches import answer_line


def build_batch(config: Path) -> dict:
    from pipeline.run.flow import build as build_flow

    return asyncio.run(build_flow(str(config), {}, mode="batch"))


def stats(base_url: str) -> dict:
    return httpx.get(base_url.removesuffix("/v1") + "/stats").json()


def parquet_bytes(result: dict) -> dict[str, bytes]:
    release = Path(result["release_dir"])
    return {str(p.relative_to(release)): p.read_bytes() for p in sorted(release.rglob("*.parquet"))}


def test_batch_mode_builds_the_online_release_without_online_calls(tmp_path, sim_url, sim_factory):
    small = {"personas": {"per_category": 2}}
    online = build(write_config(tmp_path / "online", sim_url, **small))
    url = sim_factory()
    cfg = write_config(tmp_path / "batch", url, batch={"poll_s": 0.05}, **small)
    result = build_batch(cfg)

    seen = stats(url)
    assert seen.get("requests", 0) == 0  # not one online chat completion
    # one batch per round of dependent calls: planner, content plan, chosen, rejected, the
    # judge's qualification, judges
    assert seen["batches_created"] == 6
    calls = {stage: u["calls"] for stage, u in result["usage"].items()}
    q = json.loads((Path(result["run_dir"]) / "qualification.json").read_text())
    assert calls == {
        "rubrics": 6,
        "pairs": 18,
        "filters": 6 * result["funnel"]["pairs"] + q["calls"],
    }
    assert seen["batch_lines"] == sum(calls.values())
    assert parquet_bytes(result) == parquet_bytes(online)
    assert result["funnel"] == online["funnel"]

    jobs = [json.loads(x) for x in (Path(result["run_dir"]) / "batches.jsonl").open()]
    assert [j["state"] for j in jobs] == ["submitted", "collected"] * 6
    assert all(j["status"] == "completed" for j in jobs if j["state"] == "collected")

    again = build_batch(cfg)  # everything cached: nothing submitted
    assert sum(u["calls"] for u in again["usage"].values()) == 0
    assert stats(url)["batches_created"] == 6


def batch_llm(cfg, cache, run_dir) -> LLM:
    return LLM(cfg.model, cache, transport=BatchTransport(cfg.batch, run_dir))


async def _calls(llm: LLM, questions: list[str]):
    prompt = load_prompt("content_plan")
    return await asyncio.gather(
        *(
            llm.call(prompt, stage="pairs", model="prb-sim-1", variables={"question": q})
            for q in questions
        )
    )


def test_rerun_collects_a_recorded_batch_instead_of_resubmitting(tmp_path, sim_factory):
    url = sim_factory(latency_ms=300)  # the batch is still running when the first run dies
    questions = [f"How do I start learning instrument number {i}?" for i in range(5)]
    run_dir = tmp_path / "run"

    async def first_run_dies_while_polling():
        cfg = load_config(write_config(tmp_path, url, batch={"poll_s": 60}))
        cache = ResponseCache(cfg.cache_path)
        llm = batch_llm(cfg, cache, run_dir)
        calls = asyncio.create_task(_calls(llm, questions))
        while not (run_dir / "batches.jsonl").exists():
            await asyncio.sleep(0.02)
        calls.cancel()  # as a crash would: submitted, recorded, never collected
        await asyncio.gather(calls, return_exceptions=True)
        await llm.aclose()
        cache.close()

    asyncio.run(first_run_dies_while_polling())
    assert stats(url)["batches_created"] == 1
    lines = (run_dir / "batches.jsonl").read_text().splitlines()
    assert [json.loads(x)["state"] for x in lines] == ["submitted"]

    async def rerun():
        cfg = load_config(write_config(tmp_path, url, batch={"poll_s": 0.05}))
        cache = ResponseCache(cfg.cache_path)
        llm = batch_llm(cfg, cache, run_dir)
        try:
            return await _calls(llm, questions), llm.usage_dict()
        finally:
            await llm.aclose()
            cache.close()

    results, usage = asyncio.run(rerun())
    assert stats(url)["batches_created"] == 1  # collected, not paid for twice
    assert stats(url).get("requests", 0) == 0
    assert all(len(r.value.key_points) >= 2 for r in results)
    assert usage["pairs"]["calls"] == 0 and usage["pairs"]["cache_hits"] == 5
    states = [json.loads(x)["state"] for x in (run_dir / "batches.jsonl").read_text().splitlines()]
    assert states == ["submitted", "collected"]


def test_a_cut_off_refused_or_garbled_batch_answer_is_not_cached_but_its_tokens_count(
    tmp_path, sim_url
):
    """Such a line falls back to the online path (a cut-off answer is retried there, a refusal
    dropped), as an unanswered line does; its tokens were paid, so they are counted."""
    task = load_prompt("content_plan").task
    body = {"model": "prb-sim-1", "messages": [{"role": "user", "content": "Hi?"}], "seed": 1}
    cases = {"stop": "k0", "length": "k1", "content_filter": "k2", "garbled": "k3"}

    async def store_each() -> tuple[dict, ResponseCache]:
        cfg = load_config(write_config(tmp_path, sim_url))
        cache = ResponseCache(cfg.cache_path)
        llm = batch_llm(cfg, cache, tmp_path / "run")
        stored, tokens = {}, 0
        for finish, key in cases.items():
            cid = f"{task}:{key}"
            line = answer_line({"custom_id": cid, "url": ENDPOINT, "body": body}, ("prb-sim-1",), 0)
            completion = line["response"]["body"]
            if finish == "garbled":
                line["response"]["body"] = {"choices": "not a list of choices"}
            else:
                completion["choices"][0]["finish_reason"] = finish
                tokens += completion["usage"]["total_tokens"]
            stored[finish] = llm.transport.store_line(
                line, {cid: body}, {cid: ("pairs", body, None)}
            )
        usage = llm.usage_dict()["pairs"]
        assert usage["prompt_tokens"] + usage["completion_tokens"] == tokens > 0
        await llm.aclose()
        return stored, cache

    stored, cache = asyncio.run(store_each())
    assert stored == {"stop": 1, "length": 0, "content_filter": 0, "garbled": 0}
    assert [cache.get(key) is not None for key in cases.values()] == [True, False, False, False]
    cache.close()


def test_a_batch_the_service_cannot_read_fails_with_its_reason(tmp_path, sim_url):
    """Issue 48: the simulator's batch task died on an unreadable input file without a word and
    left the batch `in_progress` forever (the client polling on); it fails the batch with the
    line that broke it, as OpenAI's service does."""
    import time

    from openai import OpenAI

    good = {"custom_id": "a", "method": "POST", "url": ENDPOINT, "body": {"model": "prb-sim-1"}}
    data = (json.dumps(good) + "\n{not json\n").encode()
    client = OpenAI(base_url=sim_url, api_key="sk-test")
    uploaded = client.files.create(file=("in.jsonl", data), purpose="batch")
    batch = client.batches.create(
        input_file_id=uploaded.id, endpoint=ENDPOINT, completion_window="24h"
    )
    deadline = time.monotonic() + 30
    while batch.status not in ("completed", "failed") and time.monotonic() < deadline:
        time.sleep(0.05)
        batch = client.batches.retrieve(batch.id)
    assert batch.status == "failed", batch
    (error,) = batch.errors.data
    assert "line 2 of the input file is not JSON" in error.message
