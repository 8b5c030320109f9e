"""Endpoint faults: each is retried, or recorded as its documented outcome, and never loses or
corrupts finished work. Outcomes (see README "Faults and resume"):

- retried (counted by kind in run_stats.json): 429 with or without Retry-After, 500/502/503,
  connection reset, read timeout, truncated or non-JSON body, content that is not the schema;
- when retries run out: the record is dropped (`<stage>_endpoint_error` / `_unparseable` /
  `_cut_off`), and asked again when the run resumes;
- content filter: not retried, dropped with reason `<stage>_content_filter`;
- 401 / 404 model: the run stops at once (exit 4), nothing is recorded as dropped.

The simulator runs in a thread of the test process, so each test can set its faults directly;
it still answers over real HTTP through the openai client.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import threading
import time
from collections import Counter
from pathlib import Path

import httpx
import openai
import pytest
import uvicorn
from conftest import build, write_config
from tenacity import RetryCallState

from pipeline.config import ModelConfig
from pipeline.errors import NothingReleased
from pipeline.llm import LLM, LLMError, PermanentLLMError
from pipeline.llm.backends.base import classify
from pipeline.llm.backends.openai import BAD_REQUEST, PERMANENT
from pipeline.llm.cache import ResponseCache
from pipeline.llm.prompts import load_prompt
from pipeline.serving import free_port
from pipeline.sim.server import SimOptions, create_app

DEFAULTS = SimOptions()


@pytest.fixture(scope="module")
def live_sim():
    opts = SimOptions()
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(create_app(opts), host="127.0.0.1", port=port, log_level="warning")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.02)
    yield f"http://127.0.0.1:{port}/v1", opts
    server.should_exit = True
    thread.join(10)


@pytest.fixture
def sim(live_sim):
    """(url, options): the thread's simulator with every fault off and fresh counters."""
    url, opts = live_sim
    for f in dataclasses.fields(SimOptions):
        if f.name not in ("stats", "attempts"):
            setattr(opts, f.name, getattr(DEFAULTS, f.name))
    opts.stats.clear()
    opts.attempts.clear()  # faults are drawn per request and attempt: start every test afresh
    return url, opts


PROFILE = [{"id": "u-p1", "category": "x", "text": "I only have ten minutes a day."}]
QUESTIONS = ["How do I start running?", "How do I learn chess?", "How do I bake bread?"]


def ask_all(url: str, cache_dir: Path, **model) -> tuple[list, LLM]:
    """The planner and quality-judge calls for three questions; results or exceptions."""
    cfg = ModelConfig(
        base_url=url,
        max_retries=model.pop("max_retries", 12),
        timeout_s=model.pop("timeout_s", 5.0),
        backoff_initial_s=0.01,
        backoff_max_s=0.02,
        **model,
    )
    llm = LLM(cfg, ResponseCache(cache_dir / "cache.sqlite"))
    planner, judge = load_prompt("planner"), load_prompt("judge_quality")

    async def go():
        calls = [
            llm.call(
                planner,
                stage="rubrics",
                model=cfg.generator,
                variables={"profile": PROFILE, "question": q},
            )
            for q in QUESTIONS
        ] + [
            llm.call(
                judge,
                stage="filters",
                model=cfg.judge,
                variables={"question": q, "answer": "Start slowly."},
            )
            for q in QUESTIONS
        ]
        try:
            return await asyncio.gather(*calls, return_exceptions=True)
        finally:
            await llm.aclose()

    return asyncio.run(go()), llm


RETRIED = {  # fault -> (simulator options, the exception kind counted as a retry)
    "429_retry_after": ({"rate_429": 0.5}, "RateLimitError"),
    "429_no_retry_after": ({"rate_429": 0.5, "retry_after": ""}, "RateLimitError"),
    "500": ({"rate_500": 0.5}, "InternalServerError"),
    "502": ({"rate_502": 0.5}, "InternalServerError"),
    "503": ({"rate_503": 0.5}, "InternalServerError"),
    "connection_reset": ({"rate_reset": 0.5}, "APIConnectionError"),
    "read_timeout": ({"rate_slow": 0.5, "slow_s": 1.0}, "APITimeoutError"),
    "truncated_body": ({"rate_truncated": 0.5}, "Unparseable"),
    "non_json_body": ({"rate_non_json": 0.5}, "Unparseable"),
    "wrong_schema": ({"rate_wrong_schema": 0.5}, "Unparseable"),
    "cut_off_content": ({"rate_malformed": 0.5}, "CutOff"),
}


@pytest.mark.parametrize("fault", sorted(RETRIED))
def test_transient_fault_is_retried_to_the_clean_answer(fault, sim, tmp_path):
    url, opts = sim
    clean, _ = ask_all(url, tmp_path / "clean")
    options, kind = RETRIED[fault]
    for name, value in {"seed": 3, **options}.items():
        setattr(opts, name, value)
    got, llm = ask_all(url, tmp_path / "faulty", timeout_s=0.5)
    assert [r.content for r in got] == [r.content for r in clean]  # same answers in the end
    retries = sum((u.retries for u in llm.usage.values()), Counter())
    assert set(retries) == {kind} and retries[kind] > 0, retries
    assert sum(v for k, v in opts.stats.items() if k.startswith("fault_")) == retries[kind]


def test_retry_after_is_honoured_and_its_absence_backs_off(tmp_path):
    cfg = ModelConfig(backoff_initial_s=7.0, backoff_max_s=20.0)
    llm = LLM(cfg, ResponseCache(tmp_path / "c.sqlite"))

    def wait_after(headers: dict) -> float:
        request = httpx.Request("POST", "http://x/v1/chat/completions")
        response = httpx.Response(429, headers=headers, request=request)
        # as the OpenAI backend hands a 429 to the call path
        exc = classify(
            openai.RateLimitError("rate limited", response=response, body=None),
            cfg,
            permanent=PERMANENT,
            bad_request=BAD_REQUEST,
        )
        state = RetryCallState(None, None, (), {})
        state.attempt_number = 1
        state.set_exception((type(exc), exc, None))
        return llm._wait(state)

    assert wait_after({"Retry-After": "3"}) == 3.0
    assert wait_after({"Retry-After": "0"}) == 0.0
    assert wait_after({"Retry-After": "600"}) == 20.0  # capped by backoff_max_s
    assert 0 <= wait_after({}) <= 7.0  # no header: randomised exponential backoff


def test_retries_are_bounded_then_the_call_fails_with_its_kind(sim, tmp_path):
    url, opts = sim
    opts.rate_503 = 1.0
    got, llm = ask_all(url, tmp_path, max_retries=2)
    assert all(isinstance(r, LLMError) and r.kind == "endpoint_error" for r in got)
    assert opts.stats["requests"] == len(got) * 3  # one try and two retries each, no more


def test_content_filter_is_not_retried(sim, tmp_path):
    url, opts = sim
    opts.rate_content_filter = 1.0
    got, llm = ask_all(url, tmp_path)
    assert all(isinstance(r, LLMError) and r.kind == "content_filter" for r in got)
    assert opts.stats["requests"] == len(got)
    assert llm.usage["rubrics"].failures == {"content_filter": 3}


@pytest.mark.parametrize("fault", ["401_bad_key", "404_unknown_model"])
def test_permanent_error_is_not_retried(fault, sim, tmp_path):
    url, opts = sim
    extra = {}
    if fault == "401_bad_key":
        opts.require_key = "sk-the-right-one"
    else:
        extra = {"generator": "no-such-model", "judge": "no-such-model"}
    got, _ = ask_all(url, tmp_path, **extra)
    assert all(isinstance(r, PermanentLLMError) for r in got)
    assert opts.stats["requests"] == len(got)
    status = "HTTP 401" if fault == "401_bad_key" else "HTTP 404"
    assert status in str(got[0]) and "sk-the-right-one" not in str(got[0])


# --- the same faults inside a whole build --------------------------------------------------


def data_files(release: Path) -> dict[str, bytes]:
    return {str(p.relative_to(release)): p.read_bytes() for p in release.rglob("*.parquet")}


def test_faulty_build_releases_the_clean_pairs_and_counts_retries_outside_the_manifest(
    sim, tmp_path, sim_url
):
    url, opts = sim
    small = {"per_category": 2}
    clean = build(write_config(tmp_path / "clean", sim_url, personas=small))
    opts.rate_429 = opts.rate_500 = 0.08
    for name in (
        "rate_502",
        "rate_reset",
        "rate_truncated",
        "rate_non_json",
        "rate_wrong_schema",
        "rate_malformed",
    ):
        setattr(opts, name, 0.05)
    retry_fast = {"max_retries": 15, "backoff_initial_s": 0.01, "backoff_max_s": 0.02}
    config = write_config(tmp_path / "faulty", url, personas=small, model=retry_fast)
    faulty = build(config)
    assert data_files(Path(faulty["release_dir"])) == data_files(Path(clean["release_dir"]))
    stats = json.loads((Path(faulty["run_dir"]) / "run_stats.json").read_text())
    retried = {k for u in stats["usage"].values() for k in u["retries"]}
    assert {"RateLimitError", "InternalServerError", "Unparseable", "CutOff"} <= retried
    manifest = (Path(faulty["release_dir"]) / "manifest.json").read_bytes()
    assert b"RateLimitError" not in manifest  # run-dependent counts stay out of the manifest
    before = manifest
    build(config)  # a rerun: everything cached, byte-identical manifest
    assert (Path(faulty["release_dir"]) / "manifest.json").read_bytes() == before


def test_content_filter_drops_are_counted_in_the_manifest_and_not_asked_again(sim, tmp_path):
    url, opts = sim
    opts.rate_content_filter, opts.fault_tasks, opts.seed = 0.5, "planner", 5
    config = write_config(tmp_path, url, personas={"per_category": 2})
    first = build(config)
    refused = opts.stats["fault_content_filter"]
    assert 0 < refused < 6
    manifest = json.loads((Path(first["release_dir"]) / "manifest.json").read_text())
    assert manifest["drop_reasons"]["planner_content_filter"] == refused
    dropped = (Path(first["run_dir"]) / "dropped.jsonl").read_text().splitlines()
    assert [json.loads(d)["reason"] for d in dropped] == ["planner_content_filter"] * refused
    again = build(config)  # resume: the refusals are recorded outcomes, not retried
    assert sum(u["calls"] for u in again["usage"].values()) == 0
    assert opts.stats["fault_content_filter"] == refused


def test_exhausted_retries_become_recorded_drop_reasons(sim, tmp_path):
    url, opts = sim
    opts.rate_503, opts.fault_tasks = 1.0, "judge_blind"
    model = {"max_retries": 1, "backoff_initial_s": 0.01, "backoff_max_s": 0.02}
    lost = r"filters stage passed on none of its 6 records \(judge_endpoint_error 6; e\.g\. .*up\?"
    with pytest.raises(NothingReleased, match=lost):
        build(write_config(tmp_path, url, personas={"per_category": 2}, model=model))
    filters = (tmp_path / "outputs" / "demo" / "filters.jsonl").read_text().splitlines()
    assert len(filters) == 6
    assert all("judge_endpoint_error" in json.loads(f)["reasons"] for f in filters)
    # the judge's calibration calls met the same 503s: an endpoint that does not answer is
    # not a weak judge, so the qualification is left undecided and the filters went on
    q = json.loads((tmp_path / "outputs" / "demo" / "qualification.json").read_text())
    assert q["passed"] is None and q["failed_calls"] == q["calls"]
    # 2 blind calls per pair and each calibration call, 2 tries each
    assert opts.stats["fault_503"] == (6 * 2 + q["calls"]) * 2


def test_unknown_judge_model_stops_the_run_and_keeps_finished_stages(sim, tmp_path):
    url, opts = sim
    config = write_config(
        tmp_path, url, personas={"per_category": 2}, model={"judge": "no-such-model"}
    )
    with pytest.raises(PermanentLLMError, match="no-such-model.*HTTP 404"):
        build(config)
    run_dir = tmp_path / "outputs" / "demo"
    assert len((run_dir / "pairs.jsonl").read_text().splitlines()) == 6  # finished work kept
    # nothing judged, nothing half-written (the judge's qualification met the refusal first)
    assert not (run_dir / "filters.jsonl").exists() or not (run_dir / "filters.jsonl").read_text()
    assert not (run_dir / "dropped.jsonl").read_text()  # and nothing recorded as dropped
    assert not (run_dir / "release").exists()
    # stopped at once: no judge call asked more than once (6 pairs x 6 judge calls at most)
    assert opts.stats["requests"] - opts.stats["answered"] <= 36


def test_identical_requests_in_flight_are_sent_once(sim, tmp_path):
    url, opts = sim
    opts.latency_ms = 200  # keep the first request in flight while the others arrive
    cfg = ModelConfig(base_url=url)
    llm = LLM(cfg, ResponseCache(tmp_path / "cache.sqlite"))
    plan = load_prompt("content_plan")

    async def go():
        try:
            return await asyncio.gather(
                *(
                    llm.call(plan, stage="pairs", model=cfg.generator, variables={"question": q})
                    for q in ["How do I start running?"] * 4 + ["How do I learn chess?"]
                )
            )
        finally:
            await llm.aclose()

    results = asyncio.run(go())
    assert opts.stats["requests"] == 2
    assert llm.usage["pairs"].calls == 2 and llm.usage["pairs"].cache_hits == 3
    assert len({r.content for r in results[:4]}) == 1 and results[4].content != results[0].content
    assert [r.cached for r in results].count(False) == 2


def test_answer_cut_off_at_max_tokens_is_retried_not_cached(sim, tmp_path):
    """A text answer has no schema to fail: finish_reason=length is what marks it incomplete."""
    url, opts = sim
    opts.rate_malformed = 1.0
    cfg = ModelConfig(base_url=url, max_retries=2, backoff_initial_s=0.0, backoff_max_s=0.0)
    cache = ResponseCache(tmp_path / "cache.sqlite")
    llm = LLM(cfg, cache)
    chosen = load_prompt("chosen")
    variables = {
        "question": "How do I start running?",
        "key_points": ["Start slowly", "Rest days matter"],
        "aspects": [{"aspect": "Keep it short", "evidence": "[p1]", "reason": "busy"}],
        "word_budget": 100,
    }

    async def go():
        try:
            return await llm.call(chosen, stage="pairs", model=cfg.generator, variables=variables)
        finally:
            await llm.aclose()

    with pytest.raises(LLMError) as err:
        asyncio.run(go())
    assert (
        err.value.kind == "cut_off" and "max_tokens=300 (finish_reason=length)" in err.value.detail
    )
    assert opts.stats["requests"] == 3 and cache.count() == 0


@pytest.mark.parametrize("task", ["planner", "judge_blind"])
def test_resume_asks_again_what_a_flaky_endpoint_left_undone(task, sim, tmp_path, sim_url):
    """Drops for exhausted retries are not final: once the endpoint recovers, resuming the run
    gives exactly the release of a run that never saw the outage."""
    url, opts = sim
    small = {"per_category": 2}
    clean = build(write_config(tmp_path / "clean", sim_url, personas=small))
    opts.rate_503, opts.fault_tasks = 1.0, task
    model = {"max_retries": 1, "backoff_initial_s": 0.01, "backoff_max_s": 0.02}
    config = write_config(tmp_path / "flaky", url, personas=small, model=model)
    reason = "planner_endpoint_error" if task == "planner" else "judge_endpoint_error"
    with pytest.raises(NothingReleased, match=rf"{reason}.*HTTP 503 from http://127\.0\.0\.1"):
        build(config)  # every record lost to the outage: nothing released, exit 5 in the CLI

    opts.rate_503 = 0.0  # the endpoint recovers
    resumed = build(config)
    assert resumed["usage"][{"planner": "rubrics"}.get(task, "filters")]["calls"] > 0
    assert data_files(Path(resumed["release_dir"])) == data_files(Path(clean["release_dir"]))
    manifest = json.loads((Path(resumed["release_dir"]) / "manifest.json").read_text())
    assert reason not in manifest["drop_reasons"]
    assert resumed["funnel"] == clean["funnel"]
    again = build(config)  # settled now: nothing left to ask
    assert sum(u["calls"] for u in again["usage"].values()) == 0


def test_garbled_answers_are_asked_again_on_resume(sim, tmp_path, sim_url):
    """Half the answers come back as non-JSON, truncated or cut off; with retries exhausted they
    are dropped as `_unparseable` or `_cut_off`. Those are the endpoint's failures, not settled
    outcomes: once it recovers, resuming gives exactly the release of a run that never saw them
    (it used to keep them as drops forever)."""
    url, opts = sim
    small = {"per_category": 2}
    clean = build(write_config(tmp_path / "clean", sim_url, personas=small))
    opts.seed, opts.rate_non_json, opts.rate_truncated, opts.rate_malformed = 11, 0.2, 0.2, 0.1
    model = {"max_retries": 1, "backoff_initial_s": 0.0, "backoff_max_s": 0.0}
    config = write_config(tmp_path / "garbled", url, personas=small, model=model)
    with contextlib.suppress(NothingReleased):  # the faults may well have taken every pair
        build(config)
    run_dir = tmp_path / "garbled" / "outputs" / "demo"
    drops = (run_dir / "dropped.jsonl").read_text().splitlines()
    dropped = [json.loads(x)["reason"] for x in drops]
    judged = [json.loads(x) for x in (run_dir / "filters.jsonl").read_text().splitlines()]
    garbled = ("_unparseable", "_cut_off")
    unparseable = [r for r in dropped if r.endswith(garbled)]
    unparseable += [r for f in judged for r in f["reasons"] if r.endswith(garbled)]
    assert unparseable, "the faults must leave some records unparseable for this test"

    opts.rate_non_json = opts.rate_truncated = opts.rate_malformed = 0.0  # recovered
    resumed = build(config)
    assert data_files(Path(resumed["release_dir"])) == data_files(Path(clean["release_dir"]))
    manifest = json.loads((Path(resumed["release_dir"]) / "manifest.json").read_text())
    assert not [r for r in manifest["drop_reasons"] if r.endswith(garbled)]
    assert resumed["funnel"] == clean["funnel"]


def test_a_request_the_server_rejects_drops_only_its_record(sim, tmp_path):
    """A 400 (here: the prompt is over the model's context length) concerns one request: its
    record is dropped with the server's own message, and the run goes on (it used to stop the
    whole run with 'check the endpoint, model and key')."""
    url, opts = sim
    opts.context_limit = 460  # the planner prompts of the two longest profiles are over it
    config = write_config(tmp_path, url, personas={"per_category": 2})
    result = build(config)
    dropped = [
        json.loads(x)
        for x in (Path(result["run_dir"]) / "dropped.jsonl").read_text().split("\n")
        if x
    ]
    assert dropped and {d["reason"] for d in dropped} == {"planner_bad_request"}
    assert all("maximum context length is 460 tokens" in d["detail"] for d in dropped)
    assert result["funnel"]["rubrics"] == 6 - len(dropped) and result["funnel"]["released"] > 0
    manifest = json.loads((Path(result["release_dir"]) / "manifest.json").read_text())
    assert manifest["drop_reasons"]["planner_bad_request"] == len(dropped)
    calls = opts.stats["fault_400"]
    build(config)  # settled: a bad request is not asked again on resume
    assert opts.stats["fault_400"] == calls


def test_retries_against_a_dead_port_count_under_the_words_of_the_drop(tmp_path):
    """A dead port's retries were counted as "APITimeoutError" while its records were dropped
    for "connection refused at …" (issue 48): both say the same now."""
    from pipeline.serving import free_port

    dead = f"http://127.0.0.1:{free_port()}/v1"
    got, llm = ask_all(dead, tmp_path, max_retries=1)
    assert all(isinstance(r, LLMError) and "connection refused" in r.detail for r in got)
    assert dict(llm.usage["rubrics"].retries) == {"connection refused": 3}
