"""The one way to call a model: prb's call path over one provider backend (pipeline/llm/backends:
OpenAI-compatible endpoints, Anthropic's Messages API).

Bounded concurrency, tenacity retries (429/5xx/timeouts/connection errors/unparseable output,
honouring Retry-After up to a cap), structured output parsed into pydantic models, a
content-addressed response cache, rate limits, and token usage counted per stage. A bad request
(e.g. a prompt over the context length) drops its record with the server's message. Only a bad
key, no access or an unknown model stop the run. The API key is handed to the backend's client
and nowhere else.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections import defaultdict
from dataclasses import replace
from typing import Protocol

from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception,
    stop_after_attempt,
    wait_random_exponential,
)

from pipeline import progress
from pipeline.calls import (
    CallResult,
    CutOff,
    EndpointError,
    LLMError,
    PermanentLLMError,
    Reply,
    Request,
    StageUsage,
    Unparseable,
)
from pipeline.llm import ratelimit
from pipeline.llm.backends import BACKENDS
from pipeline.llm.cache import ResponseCache, cache_key
from pipeline.llm.prompts import Prompt
from pipeline.llm.ratelimit import Limiter
from pipeline.llm.settings import ModelConfig
from pipeline.llm.structured import cached_response_format, parse_output
from pipeline.llm.window import fit_context, truncation_counts

log = logging.getLogger("prb.llm")


def retryable(exc: BaseException) -> bool:
    """Retried: a transient endpoint failure (429, 5xx, timeouts, connections) or an answer
    that is not what was asked for; never a bad key or a bad request."""
    return isinstance(exc, Unparseable) or (
        isinstance(exc, EndpointError) and exc.kind == "transient"
    )


def _retry_after(exc: BaseException | None) -> float | None:
    headers = getattr(exc, "headers", None)
    return ratelimit.retry_after(headers) if headers else None


def charged(tokens: dict, params: dict) -> int | None:
    """What a provider charged a request against its token limit: prompt + max_tokens."""
    prompt = tokens.get("prompt_tokens")
    if prompt is None:
        return None
    return prompt + int(params.get("max_tokens") or tokens.get("completion_tokens") or 0)


class Transport(Protocol):
    """Another way to get answers into the cache before the online path is tried: batch mode
    (pipeline/llm/batch.py) queues requests into Batch API jobs. `fetch` returns True if this
    run paid for the answer (submitted it), False if it only collected it; an answer it could
    not get is simply not in the cache, and the call goes online with its retries."""

    def bind(self, llm: LLM) -> None:
        """The client whose API (files, batches) and cache the transport uses."""

    async def fetch(self, llm: LLM, request: Request) -> bool: ...


class LLM:
    def __init__(
        self,
        cfg: ModelConfig,
        cache: ResponseCache,
        *,
        concurrency: int | None = None,
        transport: Transport | None = None,
    ):
        self.cfg = cfg
        self.cache = cache
        self.transport = transport
        self.backend = BACKENDS.get(cfg.provider)(cfg, concurrency or cfg.concurrency)
        self.semaphore = asyncio.Semaphore(concurrency or cfg.concurrency)
        self.limiter = Limiter(
            cfg.requests_per_minute, cfg.tokens_per_minute, learn=cfg.rate_limits_from_headers
        )
        self._inflight: dict[str, asyncio.Future[CallResult]] = {}  # cache key -> pending call
        self._windows: dict[str, int | None] = {}  # model -> the endpoint's context window
        self._window_lock = asyncio.Lock()
        self.truncation: dict[str, dict] = defaultdict(truncation_counts)  # by stage
        self.usage: dict[str, StageUsage] = defaultdict(StageUsage)
        progress.watch_usage(self.usage_dict)  # the live display reads the counters
        self._backoff = wait_random_exponential(
            multiplier=cfg.backoff_initial_s, max=cfg.backoff_max_s
        )
        if transport is not None:
            transport.bind(self)

    @property
    def batched(self) -> bool:
        """Calls go out in batch jobs: each round of dependent calls costs a job's turnaround,
        so a stage should ask what it can at once."""
        return self.transport is not None

    def _wait(self, state: RetryCallState) -> float:
        exc = state.outcome.exception() if state.outcome else None
        hinted = _retry_after(exc)
        return min(hinted, self.cfg.backoff_max_s) if hinted is not None else self._backoff(state)

    def params(self, prompt: Prompt) -> dict:
        """The request parameters of a prompt: its own (temperature, max_tokens) and, for a JSON
        task, the structured-output form of `model.structured_output` (in the cache key)."""
        if prompt.params.get("logprobs"):  # read from the first token: a grammar would force "{"
            return prompt.params
        fmt = cached_response_format(prompt.output, self.cfg.structured_output)
        return {**prompt.params, "response_format": fmt} if fmt else prompt.params

    def key_for(self, prompt: Prompt, model: str, messages: list[dict], seed: int) -> str:
        return cache_key(
            model=model,
            messages=messages,
            params=self.params(prompt),
            seed=seed,
            schema=prompt.output_schema(),
        )

    async def call(
        self,
        prompt: Prompt,
        *,
        stage: str,
        model: str,
        variables: dict,
        seed: int | None = None,
        max_tokens: int | None = None,
        fit: str | None = None,
        window: int | None = None,
    ) -> CallResult:
        """One model call; `max_tokens` overrides the prompt file's (e.g. sized from a word
        budget, so an answer over it is cut off and dropped, not kept half-written).

        With `fit` (the variable holding a user context, posts best first) the prompt is
        fitted to the context window (`window`, else `model.context_window`, else the
        endpoint's own figure where it gives one; unknown: sent whole) with `max_tokens` to
        spare: that variable is cut by whole lines from its end (pipeline/llm/window.py),
        counted in `truncation[stage]`, and a prompt that does not fit with it empty is refused
        (LLMError too_long), never sent. Without `fit` (the build's prompts: nothing in them
        may be cut) the server's own verdict stands: a 400 drops that record."""
        seed = self.cfg.seed if seed is None else seed
        if max_tokens is not None:
            prompt = prompt.with_params(max_tokens=max_tokens)
        messages = prompt.render(**variables)
        key = self.key_for(prompt, model, messages, seed)
        usage = self.usage[stage]
        hit = self._cached(prompt, key, usage)
        if fit:  # the window is asked only on a miss: a run the cache answers needs no endpoint
            limit = None if hit else window or await self.window_for(model)
            fitted = self._fit(prompt, variables, fit, limit, stage)
            if fitted is not variables:
                messages = prompt.render(**fitted)
                key = self.key_for(prompt, model, messages, seed)
                hit = self._cached(prompt, key, usage)
        if hit is not None:
            return hit

        if self.cfg.replay:  # offline: the recorded answer or failure, never a request
            return self._replayed(prompt, key, usage)
        pending = self._inflight.get(key)
        if pending is not None:  # the same request is already on its way: pay for it once
            usage.cache_hits += 1
            return replace(await asyncio.shield(pending), cached=True)
        request = Request(prompt.task, stage, model, messages, seed, self.params(prompt), key)
        pending = asyncio.ensure_future(self._answer(prompt, request))
        self._inflight[key] = pending
        pending.add_done_callback(self._settled(key))
        return await asyncio.shield(pending)

    def _replayed(self, prompt: Prompt, key: str, usage: StageUsage) -> CallResult:
        """`model.replay`: a request the cache has no answer for failed the recorded way; one
        it never saw stops the run (the recording is stale)."""
        failed = self.cache.failure(key)
        if failed is None:
            raise PermanentLLMError(
                "replay",
                f"model.replay: no recorded answer or failure for "
                f"a {prompt.task} request in {self.cache.path}: the "
                "recording is stale, record it again",
            )
        kind, detail = failed
        usage.failures[kind] += 1
        raise LLMError(kind, detail)

    def _cached(self, prompt: Prompt, key: str, usage: StageUsage) -> CallResult | None:
        hit = self.cache.get(key)
        if hit is None:
            return None
        content, _ = hit
        try:
            value = parse_output(content, prompt.output)
        except Unparseable:
            self.cache.delete(key)  # a schema tightened since: ask again
            return None
        usage.cache_hits += 1
        return CallResult(value, content, key, True)

    async def window_for(self, model: str) -> int | None:
        """The context window prompts for `model` must fit: the config's, else the endpoint's
        (asked once per model), else None (unknown)."""
        if self.cfg.context_window:
            return self.cfg.context_window
        async with self._window_lock:
            if model not in self._windows:
                self._windows[model] = await self.context_window(model)
        return self._windows[model]

    def _fit(
        self, prompt: Prompt, variables: dict, fit: str, limit: int | None, stage: str
    ) -> dict:
        """`variables` with `fit` cut to the window `limit` (the same dict when nothing was
        cut, or the window is unknown); LLMError too_long when the rest alone does not fit."""
        counts = self.truncation[stage]
        if not limit:
            counts["contexts"] += 1
            return variables
        budget = limit - int(prompt.params.get("max_tokens") or 0)

        def size(context: str) -> int:
            return ratelimit.prompt_tokens(prompt.render(**variables | {fit: context}))

        context = fit_context(variables[fit], size, budget, counts)
        if context is None:
            self.usage[stage].failures["too_long"] += 1
            raise LLMError(
                "too_long",
                f"{prompt.task}: the prompt needs {size('')} tokens with "
                f"no {fit}, over the {limit}-token context window less "
                f"{limit - budget} for the answer",
            )
        return variables if context == variables[fit] else variables | {fit: context}

    def _settled(self, key: str):
        def done(future: asyncio.Future) -> None:
            self._inflight.pop(key, None)
            # the callers may have been cancelled (a run stopping on its first error): the
            # outcome is theirs, but asyncio must not log it as "never retrieved"
            if not future.cancelled():
                future.exception()

        return done

    async def _answer(self, prompt: Prompt, req: Request) -> CallResult:
        """A cache miss: through the transport if there is one, else (or if it could not get
        the answer) online."""
        if self.transport is not None:
            paid = await self.transport.fetch(self, req)
            hit = self.cache.get(req.key)
            if hit is not None:
                try:
                    value = parse_output(hit[0], prompt.output)
                except Unparseable:
                    self.cache.delete(req.key)  # a bad transported answer: ask online
                else:
                    if not paid:  # collected from a job an interrupted run had paid for
                        self.usage[req.stage].cache_hits += 1
                    return CallResult(value, hit[0], req.key, cached=not paid)
        return await self._request(prompt, req)

    async def _request(self, prompt: Prompt, req: Request) -> CallResult:
        """Send one request with retries, parse it and cache the answer."""
        usage = self.usage[req.stage]

        def before_sleep(state: RetryCallState) -> None:
            exc = state.outcome.exception()
            usage.retries[getattr(exc, "cause", type(exc).__name__)] += 1
            log.debug("retrying %s (%s): %s", prompt.task, type(exc).__name__, exc)

        try:
            async for try_ in AsyncRetrying(
                retry=retry_if_exception(retryable),
                stop=stop_after_attempt(self.cfg.max_retries + 1),
                wait=self._wait,
                before_sleep=before_sleep,
                reraise=True,
            ):
                with try_:
                    return self._read(prompt, req, await self._send(req, usage))
        except (EndpointError, LLMError, Unparseable) as e:
            raise self._failed(e, req, usage) from None
        raise AssertionError("unreachable")

    async def _send(self, req: Request, usage: StageUsage) -> Reply:
        """One attempt through the backend, within the concurrency and the rate limits."""
        limiter = self.limiter

        def cost() -> int:  # counted only under a token limit: tiktoken costs ~0.3 ms a call
            return ratelimit.request_tokens(req.messages, req.params)

        async with self.semaphore:
            estimate = await limiter.acquire(cost)
            usage.calls += 1
            usage.sent()
            try:
                reply = await self.backend.send(req)
            except EndpointError as e:
                limiter.observe(e.headers, e.status)
                self._too_long_a_wait(e)
                raise
            except BaseException:
                limiter.observe(None)  # no answer: nothing learnt, but nobody waits on it
                raise
            finally:
                usage.answered()
            limiter.observe(reply.headers, reply.status)
        usage.add_tokens(reply.tokens)
        limiter.settle(estimate, charged(reply.tokens, req.params))
        return reply

    def _read(self, prompt: Prompt, req: Request, reply: Reply) -> CallResult:
        """The reply as the prompt's output, cached; a refusal, a cut-off or an unparseable
        answer raises (the last two are retried)."""
        content, finish_reason = reply.content, reply.finish_reason
        if finish_reason == "content_filter":
            # the provider refused: asking again gives the same refusal, so no retry
            raise LLMError("content_filter", f"{prompt.task}: answer withheld by the filter")
        if req.params.get("logprobs"):
            # a one-token answer read from its alternatives: max_tokens is the point, and
            # the alternatives are the answer (cached with it)
            content = json.dumps({"text": content, "top_logprobs": reply.top_logprobs or []})
        elif finish_reason == "length":
            # cut off at max_tokens: a text answer would parse but be incomplete; never cache it
            raise CutOff(
                f"{prompt.task}: answer cut off at max_tokens="
                f"{req.params.get('max_tokens', '?')} (finish_reason=length)"
            )
        value = parse_output(content, prompt.output)
        self.cache.put(
            req.key,
            task=prompt.task,
            model=req.model,
            request={"messages": req.messages, "params": req.params, "seed": req.seed},
            content=content,
            usage=reply.tokens,
        )
        return CallResult(value, content, req.key, False)

    def _too_long_a_wait(self, e: EndpointError) -> None:
        wait = _retry_after(e)
        if wait is not None and wait > ratelimit.MAX_RETRY_AFTER_S:
            said = (
                f"{self.cfg.base_url} asked to wait {wait:,.0f}s before retrying (HTTP "
                f"{e.status}), over the {ratelimit.MAX_RETRY_AFTER_S:g}s prb "
                "waits: the call failed; rerun later to resume"
            )
            progress.warn(said)
            raise LLMError("endpoint_error", said) from None

    def _failed(self, e: Exception, req: Request, usage: StageUsage) -> LLMError:
        """What a request that ran out of retries (or may not retry) raises, counted, and
        recorded in the cache for a replay of this run to reproduce."""
        if isinstance(e, EndpointError):
            usage.failures[e.cause if e.kind == "transient" else e.kind] += 1
            if e.kind == "permanent":
                return PermanentLLMError(
                    "permanent",
                    f"the endpoint refused the run (not retried): {e.cause} from "
                    f"{self.cfg.base_url} for model {req.model!r} (HTTP {e.status or '?'}: "
                    f"{e.detail}); check the endpoint, model and key",
                )
            # bad_request: this request only (too long a prompt, a value the server rejects):
            # its record is dropped with the server's words; the next may well be fine
            kind = "bad_request" if e.kind == "bad_request" else "endpoint_error"
            detail = f"HTTP {e.status}: {e.detail}" if e.kind == "bad_request" else e.detail
        elif isinstance(e, LLMError):
            kind, detail = e.kind, e.detail
            usage.failures[kind] += 1
        else:
            kind = "cut_off" if isinstance(e, CutOff) else "unparseable"
            detail = str(e)
            usage.failures[kind] += 1
        self.cache.put_failure(req.key, kind, detail)  # what a replay of this run reproduces
        return LLMError(kind, detail)

    async def context_window(self, model: str) -> int | None:
        """The endpoint's context window for `model` if its backend can tell; None if not."""
        ask = getattr(self.backend, "context_window", None)
        return await ask(model) if ask else None

    async def aclose(self) -> None:
        # requests still in flight (a run stopped part way) are cancelled, not left to fail
        # against a closed client after the loop has moved on
        for pending in list(self._inflight.values()):
            pending.cancel()
        await self.backend.aclose()

    def usage_dict(self) -> dict[str, dict]:
        return {stage: u.as_dict() for stage, u in sorted(self.usage.items())}


@contextlib.asynccontextmanager
async def session(cfg):
    """An LLM on a run config's endpoint and its response cache (`llm.cache`), both closed
    when the block ends: what every command that calls models outside a build opens."""
    cache = ResponseCache(cfg.cache_path)
    llm = LLM(cfg.model, cache)
    try:
        yield llm
    finally:
        await llm.aclose()
        cache.close()
